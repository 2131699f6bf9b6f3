package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/server"
	"github.com/gantryhq/gantry/server/servertest"
)

// TestHistorySurvivesRestart: the endpoint's history is in the store, not in the process: a
// job that completed right before a stop is in the history a server on the same data
// directory answers.
func TestHistorySurvivesRestart(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := servertest.New(t, server.Config{Data: data}, server.Options{Tick: time.Hour})
	key := servertest.Key(t, s, "alice", core.ScopeAll)
	var ep struct{ ID string }
	servertest.Expect(t, "POST", s.URL()+"/v2/serverless", key, echoEndpoint, 201, &ep)
	if code, body := servertest.Call(t, "POST", s.URL()+"/v2/"+ep.ID+"/runsync", key, `{"input":{"hello":1}}`); code != 200 || !strings.Contains(body, `"COMPLETED"`) {
		t.Fatalf("runsync = %d %s; want 200 COMPLETED", code, body)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	s.Close()

	again := servertest.New(t, server.Config{Data: data}, server.Options{Tick: time.Hour})
	if got := historyCompleted(t, again.URL(), key, ep.ID); got != 1 {
		t.Errorf("completed jobs in the history after a restart = %d; want 1", got)
	}
}

// historyCompleted sums the completed jobs of the endpoint's last hour, as GET
// /v2/{id}/metrics answers them.
func historyCompleted(t *testing.T, base, key, ep string) int64 {
	t.Helper()
	var h struct {
		Buckets []struct{ Completed int64 }
	}
	body := servertest.Expect(t, "GET", base+"/v2/"+ep+"/metrics?range=1h", key, "", 200, nil)
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("history %s: %v", body, err)
	}
	var n int64
	for _, b := range h.Buckets {
		n += b.Completed
	}
	return n
}
