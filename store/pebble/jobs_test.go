package pebble_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/store/pebble"
)

func TestJobStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	j := &core.Job{ID: "j1", Endpoint: "ep", Status: core.InQueue, CreatedAt: at, Seq: 7}
	if err := st.PutJob(j, []byte(`{"b":1,"a":2}`), true); err != nil {
		t.Fatal(err)
	}
	j.Status, j.Output = core.Completed, json.RawMessage(`"out"`)
	if err := st.PutJob(j, nil, false); err != nil { // nil input keeps the stored one
		t.Fatal(err)
	}
	if err := st.SyncJobs(); err != nil {
		t.Fatal(err)
	}
	if in, err := st.Input("j1"); err != nil || string(in) != `{"b":1,"a":2}` {
		t.Errorf("Input = %s, %v; want the input byte for byte", in, err)
	}
	st.Close()

	st, err = pebble.Open(dir) // what was synced survives
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.GetJob("j1")
	if err != nil || got.Status != core.Completed || string(got.Output) != `"out"` || !got.CreatedAt.Equal(at) || got.Seq != 7 {
		t.Errorf("GetJob after reopen = %+v, %v", got, err)
	}
	_ = st.PutJob(&core.Job{ID: "j2"}, []byte(`{}`), false)
	var ids []string
	if err := st.ScanJobs(func(j *core.Job) { ids = append(ids, j.ID) }); err != nil || !slices.Equal(ids, []string{"j1", "j2"}) {
		t.Errorf("ScanJobs = %v, %v; want [j1 j2]", ids, err)
	}
	if err := st.DeleteJob("j1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetJob("j1"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetJob after delete = %v; want ErrNotFound", err)
	}
	if _, err := st.Input("j1"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Input after delete = %v; want ErrNotFound", err)
	}
}

func TestScanEndpoints(t *testing.T) {
	t.Parallel()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, e := range []core.Endpoint{{ID: "a", Owner: "alice"}, {ID: "b", Owner: "bob"}} {
		if err := st.PutEndpoint(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.PutTemplate(ctx, core.Template{ID: "t", Owner: "alice"}) // not an endpoint
	var ids []string
	err = st.ScanEndpoints(ctx, func(e core.Endpoint) error { ids = append(ids, e.ID+"/"+e.Owner); return nil })
	if err != nil || !slices.Equal(ids, []string{"a/alice", "b/bob"}) {
		t.Errorf("ScanEndpoints = %v, %v; want every owner's endpoints and nothing else", ids, err)
	}
	stop := errors.New("stop")
	if err := st.ScanEndpoints(ctx, func(core.Endpoint) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("ScanEndpoints did not return fn's error: %v", err)
	}
}

// TestJobRecordRoundTrip: every field survives the store's codec.
func TestJobRecordRoundTrip(t *testing.T) {
	t.Parallel()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.UTC)
	want := core.Job{
		ID: "sync-1", Endpoint: "ep", Owner: "alice", Status: core.Failed, Sync: true, Webhook: "http://h/x",
		Policy:    core.JobPolicy{ExecutionTimeoutMs: 5000, LowPriority: true, TTLMs: 60000},
		TimeoutMs: 5000, S3Config: json.RawMessage(`{"bucketName":"b"}`), Output: json.RawMessage(`{"a":[1,"é"]}`),
		Error: "boom \"quoted\"", Retries: 2, WorkerID: "w1", Seq: 1 << 40, Streamed: true, WebhookPending: true,
		CreatedAt: at, QueuedAt: at.Add(time.Second), StartedAt: at.Add(2 * time.Second), EndedAt: at.Add(3 * time.Second),
		Retention: time.Minute, ExpiresAt: at.Add(time.Hour),
	}
	if err := st.PutJob(&want, []byte(`{}`), false); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetJob("sync-1")
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("round trip:\n got %s\nwant %s", gb, wb)
	}
	zero := core.Job{ID: "z", Status: core.InQueue}
	_ = st.PutJob(&zero, nil, false)
	if got, _ := st.GetJob("z"); !got.StartedAt.IsZero() || !got.CreatedAt.IsZero() || got.Output != nil {
		t.Errorf("unset fields came back set: %+v", got)
	}
}

// TestUsageSurvivesReopen checks the ledger and a job's cost after the store is closed and
// opened again, as a restart does.
func TestUsageSurvivesReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	c := core.Charge{Model: "gantry-text", Unit: "1m_tokens", Measure: "tokens", Quantity: 12, UnitsMicros: 12, PriceMicros: 200000, CostMicros: 3}
	if _, added, err := st.AddUsage(context.Background(), core.Usage{Charge: c, JobID: "j1", Owner: "alice", At: at}); err != nil || !added {
		t.Fatalf("AddUsage = %v, %v", added, err)
	}
	if err := st.PutJob(&core.Job{ID: "j1", Endpoint: "gantry-text", Status: core.Completed, Cost: &c}, []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	st.Close()

	st, err = pebble.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var got []core.Usage
	if err := st.ScanUsage(context.Background(), "alice", time.Time{}, time.Time{}, func(u core.Usage) bool { got = append(got, u); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Charge != c || !got[0].At.Equal(at) {
		t.Errorf("ScanUsage after reopen = %+v; want the one record", got)
	}
	if _, added, _ := st.AddUsage(context.Background(), core.Usage{Charge: c, JobID: "j1", Owner: "alice", At: at.Add(time.Hour)}); added {
		t.Error("AddUsage of a recorded job after reopen added a second record")
	}
	j, err := st.GetJob("j1")
	if err != nil || j.Cost == nil || *j.Cost != c {
		t.Errorf("GetJob after reopen: cost %+v, %v; want %+v", j.Cost, err, c)
	}
}
