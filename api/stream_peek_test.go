package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestStreamPeekTakesNothing: a client reading /stream while the console reads the same job
// with peek=true (as its job page does every 2 s) gets every part, and the console sees them
// all too, also after the client took them.
func TestStreamPeekTakesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tok := e.engine.RegisterWorker(ep, "w1")
	q := "?gpu=CPU&job_in_progress=0"
	id := e.run(ep, `{}`)
	e.workerCall("GET", "/v2/"+ep+"/job-take/w1"+q, tok, "")
	type reply struct {
		Status string
		Stream []struct {
			Output json.RawMessage
			Seq    *int64
		}
	}
	read := func(path string) reply {
		t.Helper()
		r := e.do("GET", path, e.alice, "")
		var out reply
		if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil {
			t.Fatalf("GET %s = %d %s", path, r.status, r.body)
		}
		return out
	}
	var client, console []string
	var after int64
	peek := func() {
		t.Helper()
		for _, c := range read(fmt.Sprintf("/v2/%s/stream/%s?peek=true&after=%d", ep, id, after)).Stream {
			if c.Seq == nil || *c.Seq <= after {
				t.Fatalf("peeked chunk %s has seq %v after %d; want a growing seq", c.Output, c.Seq, after)
			}
			after = *c.Seq
			console = append(console, string(c.Output))
		}
	}
	take := func() {
		t.Helper()
		for _, c := range read("/v2/" + ep + "/stream/" + id).Stream {
			if c.Seq != nil {
				t.Errorf("/stream without peek answered seq %d: its wire form must stay RunPod's", *c.Seq)
			}
			client = append(client, string(c.Output))
		}
	}
	part := func(p string) {
		t.Helper()
		if r := e.workerCall("POST", "/v2/"+ep+"/job-stream/w1/"+id+q+"&isStream=false", tok, `{"output":"`+p+`"}`); r.status != 200 {
			t.Fatalf("job-stream = %d %s", r.status, r.body)
		}
	}
	for i := 1; i <= 6; i++ {
		part(fmt.Sprintf("p%d", i))
		peek() // the page, before and after the client, at every turn
		if i%2 == 0 {
			take()
			peek()
		}
	}
	peek()
	want := `"p1" "p2" "p3" "p4" "p5" "p6"`
	if got := strings.Join(client, " "); got != want {
		t.Errorf("the client got %s; want %s (the console's reads must take nothing)", got, want)
	}
	if got := strings.Join(console, " "); got != want {
		t.Errorf("the console saw %s; want %s", got, want)
	}
	if r := e.workerCall("POST", "/v2/"+ep+"/job-done/w1/"+id+q, tok, `{"output":"end"}`); r.status != 200 {
		t.Fatalf("done = %d %s", r.status, r.body)
	}
	all := read("/v2/" + ep + "/stream/" + id + "?peek=true")
	if all.Status != "COMPLETED" || len(all.Stream) != 6 {
		t.Errorf("peek from the start after the end = %s with %d chunks; want COMPLETED with the 6 delivered ones kept", all.Status, len(all.Stream))
	}
	if r := e.do("GET", "/v2/"+ep+"/stream/"+id+"?peek=true&after=-1", e.alice, ""); r.status != 422 || !strings.Contains(r.body, "query.after") {
		t.Errorf("after=-1 = %d %s; want 422 naming query.after", r.status, r.body)
	}
}
