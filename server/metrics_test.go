package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// recordLog is a slog.Handler that keeps every record, at every level.
type recordLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// matching returns the records kept whose message contains s and whose level is at least min.
func (l *recordLog) matching(s string, min slog.Level) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.records {
		if r.Level >= min && strings.Contains(r.Message, s) {
			out = append(out, r)
		}
	}
	return out
}

// heldFamilies is an unchecked collector of n gauge families, whose Collect waits for release:
// the test hangs up between the request and the answer.
type heldFamilies struct {
	n       int
	release chan struct{}
}

func (heldFamilies) Describe(chan<- *prometheus.Desc) {}
func (h heldFamilies) Collect(ch chan<- prometheus.Metric) {
	<-h.release
	for i := range h.n {
		d := prometheus.NewDesc(fmt.Sprintf("test_family_%d", i), "A family that makes /metrics long enough to fail a write "+strings.Repeat("x", 200), nil, nil)
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(i))
	}
}

// TestMetricsClientHangsUp: a /metrics client that hangs up mid-answer (curl /metrics | head)
// logs no error, one per family left to write; at most one debug line says it left.
func TestMetricsClientHangsUp(t *testing.T) {
	t.Parallel()
	rec := &recordLog{}
	s := servertest.New(t, server.Config{}, server.Options{Tick: time.Hour, Log: slog.New(rec)})
	held := heldFamilies{n: 300, release: make(chan struct{})}
	s.Metrics().MustRegister(held)

	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: gantry\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Hang up with a reset before the answer, so that its writes fail at once.
	if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	close(held.release)

	// The debug line comes once the answer is over, whatever it logged before.
	testkit.Eventually(t, "a debug line that the /metrics client left", func() bool {
		return len(rec.matching("/metrics client left", slog.LevelDebug)) > 0 || len(rec.matching("", slog.LevelError)) > 5
	})
	if errs := rec.matching("", slog.LevelWarn); len(errs) != 0 {
		t.Fatalf("a client that hung up logged %d warnings or errors; want none. The first: %s", len(errs), errs[0].Message)
	}
	if n := len(rec.matching("/metrics client left", slog.LevelDebug)); n != 1 {
		t.Errorf("%d debug lines that the client left; want 1", n)
	}
}
