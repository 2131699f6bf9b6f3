package conformance

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestLoadBalancer sends requests to a LOAD_BALANCER endpoint whose gantry/http-echo workers
// the Docker pool runs as containers on free host ports.
func TestLoadBalancer(t *testing.T) {
	t.Parallel()
	ep := create(t, fmt.Sprintf(`{"name":"conformance-lb","type":"LOAD_BALANCER","image":%q,"gpu":{"pools":[%q]},
		"workers":{"min":0,"max":2,"idleTimeout":30},"scaling":{"type":"REQUEST_COUNT","requestCount":4}}`, httpEchoImage, poolID))
	id := ep["id"].(string)
	base := ep["requestUrls"].(map[string]any)["base"].(string)
	if base != gantry.base+"/lb/"+id {
		t.Fatalf("requestUrls.base = %s", base)
	}
	r := do(t, "PUT", "/lb/"+id+"/some/path?q=1", "Bearer "+gantry.key, `{"x":1}`)
	var echo struct{ Method, Path, Query, Body, Worker string }
	_ = json.Unmarshal(r.body, &echo)
	if r.status != 200 || echo.Method != "PUT" || echo.Path != "/some/path" || echo.Query != "q=1" || echo.Body != `{"x":1}` || echo.Worker == "" {
		t.Fatalf("proxied PUT = %d %s", r.status, r.body)
	}
	if r := do(t, "GET", "/lb/"+id+"/status/418", gantry.key, ""); r.status != 418 {
		t.Errorf("the worker's own status = %d; want 418 as is", r.status)
	}
	if r := do(t, "GET", "/lb/"+id+"/x", "", ""); r.status != 401 {
		t.Errorf("no key = %d; want 401", r.status)
	}
	r = do(t, "GET", "/v2/"+id+"/health", gantry.key, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"idle":1`) && !strings.Contains(string(r.body), `"running":1`) {
		t.Errorf("health = %d %s; want one worker", r.status, r.body)
	}
}
