package scheduler

import (
	"maps"
	"net/url"
	"strconv"
	"time"

	"github.com/gantryhq/gantry/core"
)

// This file is the worker-protocol environment a queue worker starts with.

// PingInterval is the heartbeat period handed to workers; well inside core.WorkerLostAfter.
const PingInterval = 10 * time.Second

// env is the worker-protocol environment (notes/runpod-compat.md) over the endpoint's env.
// Every URL already carries a query, as the RunPod SDK appends with a bare '&'. base is where
// the worker reaches Gantry (workerBase).
func (s *Scheduler) env(ep *core.Endpoint, res *Reservation, id, token, base string) map[string]string {
	env := maps.Clone(ep.Env)
	if env == nil {
		env = map[string]string{}
	}
	info := res.s.info
	q := "?gpu=" + url.QueryEscape(info.GPUType)
	base += "/v2/" + ep.ID
	for k, v := range map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB":         base + "/job-take/" + id + q,
		"RUNPOD_WEBHOOK_POST_OUTPUT":     base + "/job-done/" + id + "/$ID" + q,
		"RUNPOD_WEBHOOK_POST_STREAM":     base + "/job-stream/" + id + "/$ID" + q,
		"RUNPOD_WEBHOOK_PING":            base + "/ping/" + id + q,
		"RUNPOD_POD_ID":                  id,
		"RUNPOD_AI_API_KEY":              token,
		"RUNPOD_ENDPOINT_ID":             ep.ID,
		"RUNPOD_GPU_COUNT":               strconv.Itoa(res.Count),
		"RUNPOD_DC_ID":                   info.DataCenter,
		"RUNPOD_PING_INTERVAL":           strconv.FormatInt(PingInterval.Milliseconds(), 10),
		"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
		"RUNPOD_SKIP_GPU_CHECK":          "true",
	} {
		env[k] = v
	}
	return env
}
