package telemetry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gantryhq/gantry/telemetry"
)

// TestLBRequests: requests are counted and timed per endpoint and status class, and Forget
// drops a deleted endpoint's series for good (a request of it still in flight when it was
// deleted does not bring them back); other endpoints are kept.
func TestLBRequests(t *testing.T) {
	t.Parallel()
	m := telemetry.NewLBRequests()
	for _, ep := range []string{"gone", "kept"} {
		m.ObserveRequest(ep, 200, 30*time.Millisecond)
		m.ObserveRequest(ep, 204, 2*time.Second)
		m.ObserveRequest(ep, 503, time.Second)
	}
	m.ObserveRequest("kept", 0, time.Second)   // no answer: not observed
	m.ObserveRequest("kept", 999, time.Second) // no class of HTTP's
	if n := testutil.CollectAndCount(m); n != 4 {
		t.Fatalf("%d series; want 4 (2xx and 5xx of each endpoint)", n)
	}
	m.Forget("gone")
	m.ObserveRequest("gone", 200, time.Millisecond)
	if n := testutil.CollectAndCount(m); n != 2 {
		t.Errorf("%d series after Forget and a late request; want 2 (the kept endpoint's)", n)
	}
	want := `gantry_lb_request_duration_seconds_count{code="2xx",endpoint="kept"} 2
gantry_lb_request_duration_seconds_count{code="5xx",endpoint="kept"} 1`
	if got := counts(t, m); got != want {
		t.Errorf("counts:\n%s\nwant:\n%s", got, want)
	}
}

// counts are the _count lines of m's histograms, as /metrics shows them.
func counts(t *testing.T, m *telemetry.LBRequests) string {
	t.Helper()
	var lines []string
	mfs, err := testutil.CollectAndFormat(m, expfmt.TypeTextPlain, "gantry_lb_request_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mfs), "\n") {
		if strings.HasPrefix(l, "gantry_lb_request_duration_seconds_count") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
