package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// By default gantry serve refuses a webhook to a loopback address (422 naming the rule and
// webhooks.allowPrivate); `webhooks: {allowPrivate: true}` in the config file lets it through
// and the webhook arrives, but not one to Gantry's own address. A negative webhooks.workers is refused at start.
func TestServeWebhookRules(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	if help, _ := exec.Command(bin, "serve", "--help").CombinedOutput(); !strings.Contains(string(help), "-webhook-allow-private") ||
		!strings.Contains(string(help), "allowPrivate:") {
		t.Errorf("serve --help lacks -webhook-allow-private or webhooks.allowPrivate:\n%s", help)
	}
	got := make(chan string, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
	}))
	defer hook.Close()
	body := `{"input":{"echo":1},"webhook":"` + hook.URL + `/done"}`

	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	for _, allow := range []bool{false, true} {
		os.WriteFile(cfg, []byte("webhooks: {allowPrivate: "+map[bool]string{false: "false", true: "true"}[allow]+", workers: 2}\n"), 0o600)
		data := t.TempDir()
		s := startServe(t, bin, "--data", data, "--config", cfg)
		out, err := exec.Command(bin, "keys", "create", "--data", data, "--user", "alice").Output()
		if err != nil {
			t.Fatal(err)
		}
		key := strings.TrimSpace(string(out)[strings.LastIndex(strings.TrimSpace(string(out)), "\n")+1:])
		code, resp := call(t, "POST", s.base+"/v2/serverless", key, echoEndpoint)
		if code != 201 {
			t.Fatalf("create endpoint = %d %s", code, resp)
		}
		var ep struct{ ID string }
		_ = json.Unmarshal([]byte(resp), &ep)
		code, h, b := send(t, "POST", s.base+"/v2/"+ep.ID+"/runsync", key, body)
		if !allow {
			if code != 422 || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), `$.webhook: 127.0.0.1 is a loopback address`) ||
				!strings.Contains(string(b), "webhooks.allowPrivate: true") {
				t.Errorf("runsync with a loopback webhook = %d %s; want 422 naming the loopback rule and webhooks.allowPrivate", code, b)
			}
			s.stop(t)
			continue
		}
		self := `{"input":{"echo":1},"webhook":"` + s.base + `/v2/` + ep.ID + `/run"}`
		if code, _, b := send(t, "POST", s.base+"/v2/"+ep.ID+"/run", key, self); code != 422 || !strings.Contains(string(b), "Gantry's own address") {
			t.Errorf("run with a webhook to gantry itself and allowPrivate = %d %s; want 422 naming Gantry's own address", code, b)
		}
		var j jobView
		_ = json.Unmarshal(b, &j)
		if code != 200 || j.Status != "COMPLETED" {
			t.Fatalf("runsync with a loopback webhook and allowPrivate = %d %s; want 200 COMPLETED", code, b)
		}
		select {
		case w := <-got:
			if !strings.Contains(w, `"id":"`+j.ID+`"`) || !strings.Contains(w, `"status":"COMPLETED"`) {
				t.Errorf("webhook body %s; want job %s COMPLETED", w, j.ID)
			}
		case <-time.After(30 * time.Second):
			t.Error("no webhook within 30 s with allowPrivate")
		}
		s.stop(t)
	}

	os.WriteFile(cfg, []byte("webhooks: {workers: -1}\n"), 0o600)
	if out, err := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--config", cfg).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "webhooks: workers -1") {
		t.Errorf("webhooks.workers -1: err %v, output %s; want a refusal naming it", err, out)
	}
}
