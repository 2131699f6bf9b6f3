package api_test

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
)

// TestRunInputLifted: /run takes the input out of the body before the generated decoder reads
// the rest, and neither what a worker gets nor what a bad body is told changes: the input
// reaches the worker byte for byte (the last one when the key is repeated, as the decoder
// keeps), the other members are still checked, and a byte offset in an error counts in the
// body as sent.
func TestRunInputLifted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	big := `{"s":"` + strings.Repeat("x", 1000) + `"}`
	for _, tc := range []struct {
		name, body string
		status     int
		want       string // in the job a worker takes, or in the error
	}{
		{"input first", `{"input":` + big + `,"policy":{"ttl":60000}}`, 200, `"input":` + big},
		{"input last", `{"webhook":"https://hooks.example/x","input": {"a" : [1, 2]} }`, 200, `"input":{"a" : [1, 2]}`},
		{"input repeated", `{"input":{"first":1},"input":{"second":2}}`, 200, `"input":{"second":2}`},
		{"input repeated, last not an object", `{"input":{"first":1},"input":[2]}`, 422, `$.input`},
		{"input not an object", `{"input":"` + strings.Repeat("x", 100) + `"}`, 422, `$.input`},
		{"input missing", `{"policy":{"ttl":60000}}`, 422, `$.input`},
		{"unknown property after input", `{"input":` + big + `,"inputs":{}}`, 422, `$.inputs`},
		{"bad policy after input", `{"input":` + big + `,"policy":{"ttl":"long"}}`, 422, `at ` + strconv.Itoa(len(`{"input":`+big+`,"policy":{"ttl":`)) + `)`},
		{"bad webhook between inputs", `{"input":` + big + `,"webhook":5,"input":{}}`, 422, `at ` + strconv.Itoa(len(`{"input":`+big+`,"webhook":`)) + `)`},
		{"not an object", `[{"input":{}}]`, 422, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v2/"+ep+"/run", e.alice, tc.body)
			if r.status != tc.status {
				t.Fatalf("run = %d %s; want %d", r.status, r.body, tc.status)
			}
			if tc.status != 200 {
				if !strings.Contains(r.body, tc.want) {
					t.Errorf("run = %d %s; want it to mention %s", r.status, r.body, tc.want)
				}
				return
			}
			take := e.workerCall("GET", "/v2/"+ep+"/job-take/w1?gpu=CPU&job_in_progress=0", tok, "")
			if take.status != 200 || !strings.Contains(take.body, tc.want) {
				t.Errorf("job-take = %d %s; want the job with %s", take.status, take.body, tc.want)
			}
		})
	}
}

// BenchmarkRun measures /run through the whole API (no network): the body checks, the lifting
// of the input, the generated decoder and the job's submission.
func BenchmarkRun(b *testing.B) {
	e := setup(b, setupOpts{quota: core.Quota{}})
	ep := e.create(minimalQueue)
	for _, size := range []int{1 << 10, 64 << 10} {
		body := `{"input":{"prompt":"` + strings.Repeat("a cat on a mat ", size/15) + `"},"policy":{"ttl":60000}}`
		b.Run(strconv.Itoa(size>>10)+"KB", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v2/"+ep+"/run", strings.NewReader(body))
				req.Header.Set("Authorization", e.alice)
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				e.api.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("run = %d %s", w.Code, w.Body)
				}
			}
		})
	}
}
