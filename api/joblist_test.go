package api_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// listJobs pages through GET /v2/{ep}/jobs with query q as key and returns the ids in order and
// the number of pages.
func (e *env) listJobs(key, ep, q string, limit int) ([]string, int) {
	e.t.Helper()
	var ids []string
	cursor, pages := "", 0
	for {
		r := e.as(key, "GET", fmt.Sprintf("/v2/%s/jobs?limit=%d&cursor=%s%s", ep, limit, cursor, q), "")
		if r.status != 200 {
			e.t.Fatalf("list jobs%s = %d %s; want 200", q, r.status, r.body)
		}
		m := r.json(e.t)
		for _, it := range m["items"].([]any) {
			item := it.(map[string]any)
			for _, k := range slices.Sorted(maps.Keys(item)) {
				if !slices.Contains([]string{"id", "status", "createdAt", "delayTime", "executionTime", "retries", "workerId"}, k) {
					e.t.Errorf("job list item has %q; want only the summary fields (no input or output)", k)
				}
			}
			ids = append(ids, item["id"].(string))
		}
		pages++
		next, ok := m["nextCursor"].(string)
		if !ok {
			return ids, pages
		}
		cursor = next
	}
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	var ids []string // oldest first
	for i := range 12 {
		e.clock.Set(t0.Add(time.Duration(i) * time.Millisecond))
		body := fmt.Sprintf(`{"input":{"n":%d}}`, i)
		if i == 2 {
			body = `{"input":{"n":2},"policy":{"executionTimeout":5000}}`
		}
		r := e.as(e.alice, "POST", "/v2/"+ep+"/run", body)
		if r.status != 200 {
			t.Fatalf("run %d = %d %s", i, r.status, r.body)
		}
		ids = append(ids, r.json(t)["id"].(string))
	}
	take := func(want string) {
		t.Helper()
		r := e.workerCall("GET", "/v2/"+ep+"/job-take/w1?gpu=CPU", tok, "")
		if r.status != 200 || r.json(t)["id"] != want {
			t.Fatalf("take = %d %s; want job %s", r.status, r.body, want)
		}
	}
	done := func(id, body string) {
		t.Helper()
		if r := e.workerCall("POST", "/v2/"+ep+"/job-done/w1/"+id+"?gpu=CPU", tok, body); r.status != 200 {
			t.Fatalf("job-done %s = %d %s", id, r.status, r.body)
		}
	}
	take(ids[0])
	done(ids[0], `{"output":"ok"}`)
	take(ids[1])
	done(ids[1], `{"error":"boom"}`)
	take(ids[2])
	take(ids[3])
	if r := e.as(e.alice, "POST", "/v2/"+ep+"/cancel/"+ids[4], ""); r.status != 200 {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
	e.clock.Advance(6 * time.Second)
	e.engine.Tick(t.Context(), e.clock.Now()) // ids[2] passes its execution timeout

	newest := slices.Clone(ids)
	slices.Reverse(newest)
	got, pages := e.listJobs(e.alice, ep, "", 5)
	if !slices.Equal(got, newest) || pages != 3 {
		t.Errorf("listed %v in %d pages; want %v (newest first) in 3", got, pages, newest)
	}
	if got, pages := e.listJobs(e.read, ep, "", 100); !slices.Equal(got, newest) || pages != 1 {
		t.Errorf("listed with a read key %v in %d pages; want %v in 1", got, pages, newest)
	}
	queued := slices.Clone(newest[:7])
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"&status=IN_QUEUE", queued},
		{"&status=IN_PROGRESS", []string{ids[3]}},
		{"&status=COMPLETED", []string{ids[0]}},
		{"&status=FAILED", []string{ids[1]}},
		{"&status=CANCELLED", []string{ids[4]}},
		{"&status=TIMED_OUT", []string{ids[2]}},
		{"&status=FAILED&status=TIMED_OUT", []string{ids[2], ids[1]}},
	} {
		for _, limit := range []int{2, 100} {
			if got, _ := e.listJobs(e.alice, ep, tc.q, limit); !slices.Equal(got, tc.want) {
				t.Errorf("list%s (limit %d) = %v; want %v", tc.q, limit, got, tc.want)
			}
		}
	}
	// The summary of a job in progress names its worker and its times.
	r := e.as(e.alice, "GET", "/v2/"+ep+"/jobs?status=IN_PROGRESS", "")
	item := r.json(t)["items"].([]any)[0].(map[string]any)
	if item["workerId"] != "w1" || item["executionTime"] != float64(6000) || item["status"] != "IN_PROGRESS" || !strings.HasPrefix(item["createdAt"].(string), "2026-11-21T10:00:15") {
		t.Errorf("in-progress item = %v; want workerId w1, executionTime 6000, createdAt 2026-11-21T10:00:15", item)
	}

	for _, tc := range []struct {
		name, key, path string
		status          int
		detail          string
	}{
		{"a bad cursor", e.alice, "/v2/" + ep + "/jobs?cursor=bogus", 422, "cursor"},
		{"an unknown status", e.alice, "/v2/" + ep + "/jobs?status=DONE", 422, "query.status"},
		{"limit 0", e.alice, "/v2/" + ep + "/jobs?limit=0", 422, "query.limit"},
		{"limit 101", e.alice, "/v2/" + ep + "/jobs?limit=101", 422, "query.limit"},
		{"another user's endpoint", e.bob, "/v2/" + ep + "/jobs", 404, ep},
		{"a jobs key of other endpoints", e.jobs, "/v2/" + ep + "/jobs", 403, "may not use endpoint"},
		{"no key", "", "/v2/" + ep + "/jobs", 401, "API key"},
	} {
		r := e.as(tc.key, "GET", tc.path, "")
		if r.status != tc.status || !strings.Contains(r.body, tc.detail) {
			t.Errorf("%s: %d %s; want %d naming %q", tc.name, r.status, r.body, tc.status, tc.detail)
		}
	}
}

func TestListJobsOfAModelShowsTheCallersOwn(t *testing.T) {
	t.Parallel()
	e := modelEnv(t)
	run := func(key string) string {
		t.Helper()
		r := e.do("POST", "/v2/gantry-text/run", key, `{"input":{"prompt":"a b c"}}`)
		if r.status != 200 {
			t.Fatalf("run = %d %s", r.status, r.body)
		}
		return r.json(t)["id"].(string)
	}
	a1, b1, a2 := run(e.alice), run(e.bob), run(e.alice)
	if got, _ := e.listJobs(e.alice, "gantry-text", "", 1); !slices.Equal(got, []string{a2, a1}) {
		t.Errorf("alice lists %v; want only hers, %v", got, []string{a2, a1})
	}
	if got, _ := e.listJobs(e.bob, "gantry-text", "", 50); !slices.Equal(got, []string{b1}) {
		t.Errorf("bob lists %v; want only his, %v", got, []string{b1})
	}
}
