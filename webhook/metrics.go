package webhook

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// This file is the deliveries' counts by outcome, for /metrics.

// webhookOutcomes counts webhook deliveries by outcome; the zero value is ready to use.
type webhookOutcomes struct {
	delivered, gaveUp, notSent, deferred atomic.Int64
}

var webhookDesc = prometheus.NewDesc("gantry_webhook_deliveries_total",
	"Webhook deliveries by outcome: delivered (a 2xx answer), gave_up (every attempt failed), "+
		"not_sent (an address the policy refuses, or a bad URL), deferred (the queue was full; the job engine offers it again).",
	[]string{"outcome"}, nil)

// Collector returns the deliveries' counts by outcome as a Prometheus collector.
func (w *Deliverer) Collector() prometheus.Collector { return (*webhookCollector)(w) }

type webhookCollector Deliverer

// Describe sends the deliveries' description.
func (c *webhookCollector) Describe(ch chan<- *prometheus.Desc) { ch <- webhookDesc }

// Collect sends the deliveries' counts.
func (c *webhookCollector) Collect(ch chan<- prometheus.Metric) {
	o := &c.outcomes
	for _, v := range [...]struct {
		name string
		n    int64
	}{{"delivered", o.delivered.Load()}, {"gave_up", o.gaveUp.Load()}, {"not_sent", o.notSent.Load()}, {"deferred", o.deferred.Load()}} {
		ch <- prometheus.MustNewConstMetric(webhookDesc, prometheus.CounterValue, float64(v.n), v.name)
	}
}
