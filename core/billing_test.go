package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

func TestCostMicros(t *testing.T) {
	t.Parallel()
	tests := []struct {
		units, price, want int64
	}{
		{1_000_000, 2400, 2400},      // one megapixel
		{262_144, 2400, 630},         // 512x512: 629.1456 rounds up
		{1_048_576, 2400, 2517},      // 1024x1024: 2516.5824
		{12, 200_000, 3},             // 12 tokens at $0.20 per 1M: 2.4 rounds up
		{1, 1, 1},                    // any charge at all is at least a micro-dollar
		{0, 2400, 0},                 // nothing produced, nothing charged
		{5_000_000, 0, 0},            // free model
		{3_000_000, 100_000, 300000}, // three 5-second units at $0.10
		{1 << 62, 1 << 62, 1<<63 - 1},
	}
	for _, tt := range tests {
		if got := core.CostMicros(tt.units, tt.price); got != tt.want {
			t.Errorf("CostMicros(%d, %d) = %d; want %d", tt.units, tt.price, got, tt.want)
		}
	}
}

func TestFormatMicros(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"}, {1, "0.000001"}, {630, "0.00063"}, {2400, "0.0024"}, {1_048_576, "1.048576"},
		{3_000_000, "3"}, {-2_500_000, "-2.5"},
	}
	for _, tt := range tests {
		if got := core.FormatMicros(tt.in); got != tt.want {
			t.Errorf("FormatMicros(%d) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestCheckInput(t *testing.T) {
	t.Parallel()
	m := core.Model{ID: "img", Params: []core.Param{
		{Name: "prompt", Type: "string", Required: true, MaxLength: 10},
		{Name: "width", Type: "integer", Min: 64, Max: 2048, MultipleOf: 8},
		{Name: "hd", Type: "boolean"},
	}}
	tests := []struct {
		input string
		want  []string // the errors, "" = valid
	}{
		{`{"prompt":"a cat"}`, nil},
		{`{"prompt":"a cat","width":512,"hd":true,"width2":null}`, []string{"$.input.width2: unknown parameter of model img (see GET /v2/models)"}},
		{`{"prompt":"a cat","width":null}`, nil},
		{`{}`, []string{"$.input.prompt: is required"}},
		{`{"prompt":"  "}`, []string{"$.input.prompt: must not be empty"}},
		{`{"prompt":"ééééééééééé"}`, []string{"$.input.prompt: must have at most 10 characters (got 11)"}},
		{`{"prompt":1}`, []string{"$.input.prompt: must be a string"}},
		{`{"prompt":"x","width":513}`, []string{"$.input.width: must be a multiple of 8 (got 513)"}},
		{`{"prompt":"x","width":8}`, []string{"$.input.width: must be at least 64 (got 8)"}},
		{`{"prompt":"x","width":4096}`, []string{"$.input.width: must be at most 2048 (got 4096)"}},
		{`{"prompt":"x","width":1.5}`, []string{"$.input.width: must be an integer"}},
		{`{"prompt":"x","hd":"yes"}`, []string{"$.input.hd: must be true or false"}},
		{`{"width":1,"zz":1}`, []string{"$.input.prompt: is required", "$.input.width: must be at least 64 (got 1)", "$.input.zz: unknown parameter of model img (see GET /v2/models)"}},
		{`[1]`, []string{"$.input: must be a JSON object"}},
	}
	for _, tt := range tests {
		err := m.CheckInput([]byte(tt.input))
		var got []string
		var ce *core.Error
		if errors.As(err, &ce) {
			for _, f := range ce.Fields {
				got = append(got, f.String())
			}
		}
		if !slices.Equal(got, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("CheckInput(%s) = %v; want %v", tt.input, got, tt.want)
		}
	}
}

// pixelMeter meters endpoint "gantry-image": the output {"pixels": N} produced N pixels (a
// megapixel costs 2400 micro-dollars); {"bad": true} cannot be measured. It counts its calls.
type pixelMeter struct {
	mu    sync.Mutex
	calls int
}

func (m *pixelMeter) Metered(endpoint string) bool { return endpoint == "gantry-image" }

func (m *pixelMeter) Measure(_ context.Context, j core.MeterJob) (core.Charge, error) {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	var out struct {
		Pixels int64
		Bad    bool
	}
	if err := json.Unmarshal(j.Output, &out); err != nil || out.Bad {
		return core.Charge{}, fmt.Errorf("no image in the output")
	}
	return core.Charge{Model: j.Endpoint, Unit: "megapixel", Measure: "pixels", Quantity: out.Pixels,
		UnitsMicros: out.Pixels, PriceMicros: 2400, CostMicros: core.CostMicros(out.Pixels, 2400)}, nil
}

// meteredRig is a rig whose endpoint "gantry-image" is metered.
func meteredRig(t *testing.T) (*rig, *pixelMeter) {
	t.Helper()
	r := newRig(t)
	m := &pixelMeter{}
	r.meter = m
	r.store.Close()
	r.open()
	r.ep = &core.Endpoint{ID: "gantry-image", Owner: core.PlatformOwner, TimeoutMs: 60000}
	return r, m
}

func (r *rig) usage(owner string) []core.Usage {
	r.t.Helper()
	var out []core.Usage
	if err := r.store.ScanUsage(r.t.Context(), owner, time.Time{}, time.Time{}, func(u core.Usage) bool { out = append(out, u); return true }); err != nil {
		r.t.Fatal(err)
	}
	return out
}

func (r *rig) get(id string) core.Job {
	r.t.Helper()
	j, err := r.jobs.Get(r.t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: id}, 0)
	if err != nil {
		r.t.Fatalf("Get(%s) = %v", id, err)
	}
	return j
}

// TestMeterOnCompletion: a completed model job is charged what its output says it produced,
// once; every way of not completing charges nothing.
func TestMeterOnCompletion(t *testing.T) {
	t.Parallel()
	alice := func(s *core.Submission) { s.Owner = "alice" }
	tests := []struct {
		name   string
		finish func(r *rig, id string) // the job has been taken by worker "w"
		want   core.JobStatus
		cost   int64 // -1 = no charge
	}{
		{"completed", func(r *rig, id string) {
			_ = r.jobs.Done(t.Context(), r.ep.ID, "w", id, core.Result{Output: json.RawMessage(`{"pixels":262144}`)})
		}, core.Completed, 630},
		{"failed by the worker", func(r *rig, id string) {
			_ = r.jobs.Done(t.Context(), r.ep.ID, "w", id, core.Result{Error: "espeak-ng is not installed", Output: json.RawMessage(`{"pixels":5}`)})
		}, core.Failed, -1},
		{"output that cannot be measured", func(r *rig, id string) {
			_ = r.jobs.Done(t.Context(), r.ep.ID, "w", id, core.Result{Output: json.RawMessage(`{"bad":true}`)})
		}, core.Failed, -1},
		{"cancelled while running", func(r *rig, id string) {
			_, _ = r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: id})
			_ = r.jobs.Done(t.Context(), r.ep.ID, "w", id, core.Result{Output: json.RawMessage(`{"pixels":1}`)}) // too late
		}, core.Cancelled, -1},
		{"timed out", func(r *rig, id string) {
			r.jobs.Tick(t.Context(), r.clock.Advance(time.Minute))
			_ = r.jobs.Done(t.Context(), r.ep.ID, "w", id, core.Result{Output: json.RawMessage(`{"pixels":1}`)}) // too late
		}, core.TimedOut, -1},
		{"progress only", func(r *rig, id string) {
			_ = r.jobs.Done(t.Context(), r.ep.ID, "w", id, core.Result{Progress: true, Output: json.RawMessage(`{"pixels":9}`)})
		}, core.InProgress, -1},
		{"worker lost", func(r *rig, id string) { r.jobs.ForgetWorker(t.Context(), "w") }, core.InQueue, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, _ := meteredRig(t)
			r.jobs.RegisterWorker(r.ep.ID, "w")
			j := r.submit(`{"prompt":"x","width":1024,"height":1024}`, alice)
			r.take("w")
			tt.finish(r, j.ID)
			got := r.get(j.ID)
			if got.Status != tt.want {
				t.Fatalf("status = %s (%s); want %s", got.Status, got.Error, tt.want)
			}
			u := r.usage("alice")
			switch {
			case tt.cost < 0 && (len(u) != 0 || got.Cost != nil):
				t.Errorf("charged %+v, job cost %+v; want nothing", u, got.Cost)
			case tt.cost >= 0 && (len(u) != 1 || u[0].CostMicros != tt.cost || got.Cost == nil || *got.Cost != u[0].Charge):
				t.Errorf("ledger %+v, job cost %+v; want one record of %d micro-dollars, shown on the job", u, got.Cost, tt.cost)
			}
			if tt.cost >= 0 && (u[0].JobID != j.ID || u[0].Owner != "alice" || u[0].Quantity != 262144) {
				t.Errorf("record %+v; want job %s of alice, 262144 pixels", u[0], j.ID)
			}
		})
	}
}

// TestMeterRetryChargesOnce: an output the meter cannot measure fails the job with a
// reason, and a retry that completes is charged once.
func TestMeterRetryChargesOnce(t *testing.T) {
	t.Parallel()
	r, _ := meteredRig(t)
	r.jobs.RegisterWorker(r.ep.ID, "w")
	j := r.submit(`{}`, func(s *core.Submission) { s.Owner = "alice" })
	r.take("w")
	_ = r.jobs.Done(t.Context(), r.ep.ID, "w", j.ID, core.Result{Output: json.RawMessage(`{"bad":true}`)})
	if got := r.get(j.ID); got.Status != core.Failed || !strings.Contains(got.Error, "nothing is charged: no image in the output") {
		t.Fatalf("unmeasurable output: %s %q; want FAILED saying why and that nothing is charged", got.Status, got.Error)
	}
	if _, err := r.jobs.Retry(t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: j.ID, Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	r.take("w")
	_ = r.jobs.Done(t.Context(), r.ep.ID, "w", j.ID, core.Result{Output: json.RawMessage(`{"pixels":1000000}`)})
	if u := r.usage("alice"); len(u) != 1 || u[0].CostMicros != 2400 {
		t.Errorf("after a failed run and a completed retry: ledger %+v; want one charge of 2400", u)
	}
	// Done again (a worker retrying its post) changes nothing.
	if err := r.jobs.Done(t.Context(), r.ep.ID, "w", j.ID, core.Result{Output: json.RawMessage(`{"pixels":1000000}`)}); core.KindOf(err) != core.KindConflict {
		t.Errorf("repeated Done = %v; want a conflict", err)
	}
	if u := r.usage("alice"); len(u) != 1 {
		t.Errorf("after a repeated Done: %d records; want 1", len(u))
	}
}

// TestMeterConcurrentExactlyOnce completes many jobs at once, each posted by several racing
// job-done posts while cancels race with some of them: each completed job is charged exactly
// once, and no cancelled job is charged. Run with -race.
func TestMeterConcurrentExactlyOnce(t *testing.T) {
	t.Parallel()
	r, m := meteredRig(t)
	const n, posts = 48, 4
	ids := make([]string, n)
	for i := range ids {
		ids[i] = r.submit(`{}`, func(s *core.Submission) { s.Owner = "alice" }).ID
	}
	for i := range ids {
		w := fmt.Sprintf("w%d", i)
		r.jobs.RegisterWorker(r.ep.ID, w)
		if tk := r.take(w); tk.ID == "" {
			t.Fatal("no job")
		}
	}
	// Which worker holds which job: the order of takes is the order of submits.
	holder := map[string]string{}
	for i, id := range ids {
		holder[id] = fmt.Sprintf("w%d", i)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, id := range ids {
		for range posts {
			wg.Go(func() {
				<-start
				_ = r.jobs.Done(t.Context(), r.ep.ID, holder[id], id, core.Result{Output: json.RawMessage(`{"pixels":1000000}`)})
			})
		}
		if i%4 == 0 {
			wg.Go(func() { <-start; _, _ = r.jobs.Cancel(t.Context(), core.JobRef{Endpoint: r.ep.ID, ID: id}) })
		}
	}
	close(start)
	wg.Wait()
	charged := map[string]int{}
	for _, u := range r.usage("alice") {
		charged[u.JobID]++
	}
	completed := 0
	for _, id := range ids {
		j := r.get(id)
		switch {
		case j.Status == core.Completed && (charged[id] != 1 || j.Cost == nil):
			t.Errorf("completed job %s charged %d times (cost %+v); want once", id, charged[id], j.Cost)
		case j.Status == core.Cancelled && charged[id] != 0:
			t.Errorf("cancelled job %s charged %d times; want never", id, charged[id])
		case j.Status != core.Completed && j.Status != core.Cancelled:
			t.Errorf("job %s is %s; want COMPLETED or CANCELLED", id, j.Status)
		}
		if j.Status == core.Completed {
			completed++
		}
	}
	if len(charged) != completed || completed < n*3/4 {
		t.Errorf("%d jobs charged, %d completed of %d; want one charge per completed job", len(charged), completed, n)
	}
	t.Logf("%d completed, %d cancelled first; the meter measured %d posts", completed, n-completed, m.calls)
}

// TestUsageSurvivesRestart: the ledger and each job's cost are there after the engine and store
// are opened again.
func TestUsageSurvivesRestart(t *testing.T) {
	t.Parallel()
	r, _ := meteredRig(t)
	r.jobs.RegisterWorker(r.ep.ID, "w")
	j := r.submit(`{}`, func(s *core.Submission) { s.Owner = "alice" })
	r.take("w")
	_ = r.jobs.Done(t.Context(), r.ep.ID, "w", j.ID, core.Result{Output: json.RawMessage(`{"pixels":2000000}`)})
	r.store.Close()
	r.open()
	if _, _, err := r.jobs.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if u := r.usage("alice"); len(u) != 1 || u[0].CostMicros != 4800 || u[0].JobID != j.ID {
		t.Errorf("ledger after restart = %+v; want the one charge of 4800", u)
	}
	if got := r.get(j.ID); got.Cost == nil || got.Cost.CostMicros != 4800 {
		t.Errorf("job cost after restart = %+v; want 4800", got.Cost)
	}
}

func TestBillingReport(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	models := core.NewModels([]core.Model{{ID: "gantry-image"}, {ID: "gantry-text"}})
	b := &core.Billing{Usage: r.store, Models: models}
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	add := func(job, owner, model string, at time.Time, cost int64) {
		_, _, err := r.store.AddUsage(t.Context(), core.Usage{Charge: core.Charge{Model: model, Unit: "u", UnitsMicros: cost * 10, CostMicros: cost},
			JobID: job, Owner: owner, At: at})
		if err != nil {
			t.Fatal(err)
		}
	}
	add("j1", "alice", "gantry-image", day.Add(time.Hour), 100)
	add("j2", "alice", "gantry-text", day.Add(2*time.Hour), 20)
	add("j3", "alice", "gantry-image", day.Add(26*time.Hour), 300)
	add("j4", "bob", "gantry-image", day.Add(time.Hour), 7000)
	add("j5", "alice", "retired-model", day.Add(3*time.Hour), 1)

	ids := func(us []core.Usage) []string {
		var out []string
		for _, u := range us {
			out = append(out, u.JobID)
		}
		return out
	}
	tests := []struct {
		filter core.UsageFilter
		items  []string
		cost   int64
		totals string
	}{
		{core.UsageFilter{}, []string{"j1", "j2", "j5", "j3"}, 421, "gantry-image:2:400 gantry-text:1:20 retired-model:1:1"},
		{core.UsageFilter{Model: "gantry-image"}, []string{"j1", "j3"}, 400, "gantry-image:2:400"},
		{core.UsageFilter{From: day, To: day.AddDate(0, 0, 1)}, []string{"j1", "j2", "j5"}, 121, "gantry-image:1:100 gantry-text:1:20 retired-model:1:1"},
		{core.UsageFilter{From: day.Add(26 * time.Hour)}, []string{"j3"}, 300, "gantry-image:1:300"},
		{core.UsageFilter{To: day.Add(time.Hour)}, []string{}, 0, ""},
	}
	for _, tt := range tests {
		rep, err := b.Report(t.Context(), "alice", tt.filter)
		if err != nil {
			t.Errorf("Report(%+v) = %v", tt.filter, err)
			continue
		}
		var totals []string
		for _, x := range rep.Totals {
			totals = append(totals, fmt.Sprintf("%s:%d:%d", x.Model, x.Jobs, x.CostMicros))
		}
		if got := ids(rep.Items); !slices.Equal(got, tt.items) && !(len(got) == 0 && len(tt.items) == 0) ||
			rep.CostMicros != tt.cost || strings.Join(totals, " ") != tt.totals {
			t.Errorf("Report(%+v) = items %v cost %d totals %q; want %v %d %q", tt.filter, got, rep.CostMicros, totals, tt.items, tt.cost, tt.totals)
		}
	}
	// Pages of 2 walk the same records, with the totals of all of them on every page.
	var walked []string
	cursor := ""
	for page := 0; page < 10; page++ {
		rep, err := b.Report(t.Context(), "alice", core.UsageFilter{Limit: 2, Cursor: cursor})
		if err != nil || rep.CostMicros != 421 {
			t.Fatalf("page %d: %v, cost %d; want 421 on every page", page, err, rep.CostMicros)
		}
		walked = append(walked, ids(rep.Items)...)
		if cursor = rep.NextCursor; cursor == "" {
			break
		}
	}
	if !slices.Equal(walked, []string{"j1", "j2", "j5", "j3"}) {
		t.Errorf("paged walk = %v; want [j1 j2 j5 j3]", walked)
	}
	// Bad filters name the parameter.
	for _, f := range []core.UsageFilter{
		{Model: "nope"}, {From: day, To: day}, {Cursor: "garbage"},
	} {
		_, err := b.Report(t.Context(), "alice", f)
		var ce *core.Error
		if !errors.As(err, &ce) || ce.Kind != core.KindInvalid || len(ce.Fields) != 1 || !strings.HasPrefix(ce.Fields[0].Path, "query.") {
			t.Errorf("Report(%+v) = %v; want one invalid query parameter", f, err)
		}
	}
}

func TestBillingQuery(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	b := &core.Billing{Usage: r.store, Models: core.NewModels([]core.Model{{ID: "gantry-image"}})}
	tests := []struct {
		q    core.UsageQuery
		want []string // the parameters named; nil = valid
	}{
		{core.UsageQuery{}, nil},
		{core.UsageQuery{Model: "gantry-image", From: "2026-11-01", To: "2026-11-30T12:00:00Z", Limit: 5}, nil},
		{core.UsageQuery{Model: "nope", From: "yesterday"}, []string{"query.from", "query.model"}},
		{core.UsageQuery{From: "2026-11-02", To: "2026-11-01"}, []string{"query.to"}},
		{core.UsageQuery{From: "2026-11-02", To: "soon"}, []string{"query.to"}},
		{core.UsageQuery{Cursor: "x"}, []string{"query.cursor"}},
	}
	for _, tt := range tests {
		_, f, err := b.Query(t.Context(), "alice", tt.q)
		var got []string
		var ce *core.Error
		if errors.As(err, &ce) {
			for _, fe := range ce.Fields {
				got = append(got, fe.Path)
			}
			slices.Sort(got)
		}
		if !slices.Equal(got, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("Query(%+v) = %v (%v); want parameters %v named", tt.q, got, err, tt.want)
		}
		if err == nil && tt.q.To == "2026-11-30T12:00:00Z" && !f.To.Equal(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)) {
			t.Errorf("Query(%+v) applied to = %v", tt.q, f.To)
		}
	}
}

func TestParseUsageTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		upper bool
		want  time.Time
		ok    bool
	}{
		{"", false, time.Time{}, true},
		{"2026-11-21", false, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC), true},
		{"2026-11-21", true, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), true},
		{"2026-11-21T10:30:00Z", true, time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC), true},
		{"2026-11-21T12:30:00+02:00", false, time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC), true},
		{"2026-11-21T10:30:00.5Z", false, time.Date(2026, 11, 21, 10, 30, 0, 5e8, time.UTC), true},
		{"yesterday", false, time.Time{}, false},
		{"2026-13-01", false, time.Time{}, false},
		{"2026-11-21 10:30", false, time.Time{}, false},
	}
	for _, tt := range tests {
		got, err := core.ParseUsageTime("query.from", tt.in, tt.upper)
		if (err == nil) != tt.ok || !got.Equal(tt.want) {
			t.Errorf("ParseUsageTime(%q, %v) = %v, %v; want %v (ok %v)", tt.in, tt.upper, got, err, tt.want, tt.ok)
		}
	}
}
