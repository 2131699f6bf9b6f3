package scaleout_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/server/servertest"
)

// TestHistoryAcrossReplicas: the endpoint's history is the store's, so every replica answers
// the same: jobs submitted through either replica are counted once, in the history both
// answer.
func TestHistoryAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := replicas(t, 2, nil)
	l := leader(t, rs)
	a, b := rs[1-l], rs[l] // A follows, B leads
	key := servertest.Key(t, a, "alice", core.ScopeAll)
	var ep struct{ ID string }
	servertest.Expect(t, "POST", a.URL()+"/v2/serverless", key, echoEndpoint, 201, &ep)
	for _, r := range []string{a.URL(), b.URL(), a.URL()} {
		if code, body := call(t, "POST", r+"/v2/"+ep.ID+"/runsync", key, `{"input":{"n":1}}`); code != 200 || !strings.Contains(body, `"COMPLETED"`) {
			t.Fatalf("runsync on %s = %d %s; want 200 COMPLETED", r, code, body)
		}
	}
	completed := func(base string) int64 {
		var h struct {
			Buckets []struct{ Completed int64 }
		}
		body := servertest.Expect(t, "GET", base+"/v2/"+ep.ID+"/metrics", key, "", 200, nil)
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("history %s: %v", body, err)
		}
		var n int64
		for _, x := range h.Buckets {
			n += x.Completed
		}
		return n
	}
	// Each replica stores what ended on it within a second (core.HistoryFlushEvery).
	testkit.Eventually(t, "both replicas to answer the 3 completed jobs", func() bool {
		return completed(a.URL()) == 3 && completed(b.URL()) == 3
	})
}
