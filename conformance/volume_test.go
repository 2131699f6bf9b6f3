package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNetworkVolume runs a network volume's life on the docker pool (issue 30): a worker
// container reads a file the test put in the volume's directory on the host before the job and
// writes one the test finds there after the container is gone; the volume cannot be deleted
// while an endpoint names it and outlives the endpoint; a second endpoint's worker reads what
// the first wrote; the volume's delete removes its directory. The pool's volumeRoot is a host
// directory mounted into Gantry's container at the same path (start).
func TestNetworkVolume(t *testing.T) {
	t.Parallel()
	auth := "Bearer " + gantry.key
	r := do(t, "POST", "/v2/network-volumes", auth, `{"name":"conformance-weights","size":10,"dataCenter":"LOCAL"}`)
	if r.status != 201 {
		t.Fatalf("POST /v2/network-volumes = %d %s; want 201", r.status, r.body)
	}
	var vol struct{ ID string }
	if err := json.Unmarshal(r.body, &vol); err != nil || vol.ID == "" {
		t.Fatalf("created volume %s: %v; want an id", r.body, err)
	}
	t.Cleanup(func() { do(t, "DELETE", "/v2/network-volumes/"+vol.ID, auth, "") })
	dir := filepath.Join(gantry.volumes, vol.ID)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("the volume's directory %s on the host after create: %v; want it made before the answer", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.txt"), []byte("weights v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	endpoint := func(name string) string {
		t.Helper()
		return create(t, fmt.Sprintf(`{"name":%q,"type":"QUEUE","image":%q,"gpu":{"pools":[%q]},"networkVolumes":[%q],"flashboot":"OFF",
			"workers":{"min":0,"max":1,"idleTimeout":1},"scaling":{"type":"QUEUE_DELAY","queueDelay":2}}`, name, volumeImage, poolID, vol.ID))["id"].(string)
	}
	runsync := func(ep, input string) string {
		t.Helper()
		code, j := jobCall(t, "POST", "/v2/"+ep+"/runsync", `{"input":`+input+`}`)
		var out struct{ Read, Path string }
		if err := json.Unmarshal(j.Output, &out); code != 200 || j.Status != "COMPLETED" || err != nil {
			w := do(t, "GET", "/v2/serverless/"+ep+"/workers", auth, "")
			t.Fatalf("runsync %s on %s = %d %+v (output %s); want COMPLETED\nworkers: %s", input, ep, code, j, j.Output, w.body)
		}
		if out.Path != "/runpod-volume" {
			t.Errorf("the worker of %s has GANTRY_VOLUME_PATH %q; want /runpod-volume", ep, out.Path)
		}
		return out.Read
	}
	ep1 := endpoint("conformance-volume-writer")
	if got := runsync(ep1, `{"read":"weights.txt","write":"out.txt","text":"from `+ep1+`\n"}`); got != "weights v1\n" {
		t.Errorf("the worker read %q from /runpod-volume/weights.txt; want the pre-loaded %q", got, "weights v1\n")
	}
	// FLASHBOOT off, idle timeout 1 s: the worker's container is removed.
	deadline := time.Now().Add(60 * time.Second)
	for {
		h := do(t, "GET", "/v2/"+ep1+"/health", auth, "")
		var v struct {
			Workers struct{ Idle, Running, Initializing, Unhealthy, Suspended, Throttled int }
		}
		_ = json.Unmarshal(h.body, &v)
		w := v.Workers
		if h.status == 200 && w.Idle+w.Running+w.Initializing+w.Unhealthy+w.Suspended+w.Throttled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker of %s never went away: health %d %s", ep1, h.status, h.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "from "+ep1+"\n" {
		t.Errorf("out.txt on the host after the worker exited = %q, %v; want what the worker wrote", b, err)
	}

	r = do(t, "DELETE", "/v2/network-volumes/"+vol.ID, auth, "")
	if r.status != 409 || !strings.Contains(string(r.body), ep1) {
		t.Errorf("DELETE the volume while %s names it = %d %s; want 409 naming the endpoint", ep1, r.status, r.body)
	}
	if r := do(t, "DELETE", "/v2/serverless/"+ep1, auth, ""); r.status >= 300 {
		t.Fatalf("DELETE endpoint %s = %d %s", ep1, r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.txt")); err != nil {
		t.Errorf("out.txt after the endpoint's delete: %v; want it kept", err)
	}

	ep2 := endpoint("conformance-volume-reader")
	if got := runsync(ep2, `{"read":"out.txt"}`); got != "from "+ep1+"\n" {
		t.Errorf("the second endpoint's worker read %q from /runpod-volume/out.txt; want %q", got, "from "+ep1+"\n")
	}
	if r := do(t, "DELETE", "/v2/serverless/"+ep2, auth, ""); r.status >= 300 {
		t.Fatalf("DELETE endpoint %s = %d %s", ep2, r.status, r.body)
	}
	if r := do(t, "DELETE", "/v2/network-volumes/"+vol.ID, auth, ""); r.status != 204 {
		t.Fatalf("DELETE the volume no endpoint names = %d %s; want 204", r.status, r.body)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the volume's directory %s after its delete: %v; want it gone", dir, err)
	}
}
