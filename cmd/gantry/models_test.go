package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// modelJob is a model job's status as the tests read it.
type modelJob struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Output json.RawMessage `json:"output"`
	Cost   *struct {
		Measure    string `json:"measure"`
		Quantity   int64  `json:"quantity"`
		Units      string `json:"units"`
		CostMicros int64  `json:"costMicros"`
	} `json:"cost"`
}

func modelCall(t *testing.T, method, url, key, body string) (int, modelJob) {
	t.Helper()
	code, _, b := send(t, method, url, key, body)
	var j modelJob
	_ = json.Unmarshal(b, &j)
	if code != 200 {
		t.Logf("%s %s = %d %s", method, url, code, b)
	}
	return code, j
}

// fetch GETs a produced file's signed URL, with no key.
func fetch(t *testing.T, url string) (string, []byte) {
	t.Helper()
	code, h, b := send(t, "GET", url, "", "")
	if code != 200 {
		t.Fatalf("GET %s = %d %s", url, code, b)
	}
	return h.Get("Content-Type"), b
}

func newUserKey(t *testing.T, bin, data, user string) string {
	t.Helper()
	out, err := exec.Command(bin, "keys", "create", "--data", data, "--user", user).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

type usageReport struct {
	Items []struct {
		JobID      string `json:"jobId"`
		Model      string `json:"model"`
		CostMicros int64  `json:"costMicros"`
	} `json:"items"`
	CostMicros int64 `json:"costMicros"`
}

func getUsage(t *testing.T, base, key, query string) usageReport {
	t.Helper()
	code, body := call(t, "GET", base+"/v2/billing/usage"+query, key, "")
	if code != 200 {
		t.Fatalf("usage = %d %s", code, body)
	}
	var u usageReport
	_ = json.Unmarshal([]byte(body), &u)
	return u
}

// TestModelsEndToEnd runs each built-in model once through `gantry serve` and its real worker
// processes, reads the files they produced at their signed URLs, checks the charges, and
// checks that the usage is still there after a restart.
func TestModelsEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	data := t.TempDir()
	s := startServe(t, bin, "--data", data, "--quota-minute", "0", "--quota-hour", "0", "--quota-day", "0")
	alice, bob := newUserKey(t, bin, data, "alice"), newUserKey(t, bin, data, "bob")
	v2 := s.base + "/v2/"

	code, body := call(t, "GET", v2+"models", alice, "")
	for _, id := range []string{"gantry-image", "gantry-video", "gantry-tts", "gantry-text"} {
		if code != 200 || !strings.Contains(body, `"id":"`+id+`"`) {
			t.Errorf("GET /v2/models = %d; want %s in %s", code, id, body)
		}
	}
	charged := map[string]int64{} // job id -> micro-dollars

	// Image: a PNG of the size asked for, at its URL; charged its megapixels.
	code, j := modelCall(t, "POST", v2+"gantry-image/runsync", alice, `{"input":{"prompt":"a lighthouse at dusk","width":256,"height":128}}`)
	var img struct {
		URL string `json:"image_url"`
	}
	_ = json.Unmarshal(j.Output, &img)
	if code != 200 || j.Status != "COMPLETED" || j.Cost == nil || j.Cost.Quantity != 256*128 || j.Cost.CostMicros != 79 {
		t.Fatalf("image runsync = %d %+v cost %+v; want COMPLETED, 32768 pixels, 79 micro-dollars", code, j, j.Cost)
	}
	ctype, b := fetch(t, img.URL)
	if cfg, err := png.DecodeConfig(bytes.NewReader(b)); ctype != "image/png" || err != nil || cfg.Width != 256 || cfg.Height != 128 {
		t.Errorf("image_url: %s %v %+v; want a 256x128 PNG", ctype, err, cfg)
	}
	charged[j.ID] = j.Cost.CostMicros

	// Video: a GIF whose duration is its frames' delays; 10 frames at 10 fps is 1 s, one unit.
	code, j = modelCall(t, "POST", v2+"gantry-video/runsync", alice, `{"input":{"prompt":"waves","frames":10,"fps":10,"width":64,"height":64}}`)
	var vid struct {
		URL        string `json:"video_url"`
		DurationMs int64  `json:"duration_ms"`
	}
	_ = json.Unmarshal(j.Output, &vid)
	if code != 200 || j.Status != "COMPLETED" || vid.DurationMs != 1000 || j.Cost == nil || j.Cost.Quantity != 1000 || j.Cost.CostMicros != 100000 {
		t.Fatalf("video runsync = %d %+v cost %+v; want COMPLETED, 1000 ms, one 5-second unit", code, j, j.Cost)
	}
	if ctype, b := fetch(t, vid.URL); ctype != "image/gif" || !bytes.HasPrefix(b, []byte("GIF89a")) {
		t.Errorf("video_url: %s; want a GIF", ctype)
	}
	charged[j.ID] = j.Cost.CostMicros

	// Speech: espeak-ng's WAV, charged per started 1000 characters; without espeak-ng a clear
	// failure and no charge.
	code, j = modelCall(t, "POST", v2+"gantry-tts/runsync", alice, `{"input":{"text":"Hello from Gantry."}}`)
	if _, err := exec.LookPath("espeak-ng"); err != nil && os.Getenv("GANTRY_REQUIRE_ESPEAK") != "1" {
		if j.Status != "FAILED" || !strings.Contains(j.Error, "apt-get install espeak-ng") || j.Cost != nil {
			t.Errorf("speech without espeak-ng = %+v; want FAILED saying how to install it, no cost", j)
		}
	} else {
		var sp struct {
			URL string `json:"audio_url"`
		}
		_ = json.Unmarshal(j.Output, &sp)
		if code != 200 || j.Status != "COMPLETED" || j.Cost == nil || j.Cost.Quantity != 18 || j.Cost.CostMicros != 15000 {
			t.Fatalf("speech runsync = %d %+v cost %+v; want COMPLETED, 18 characters, 15000 micro-dollars", code, j, j.Cost)
		}
		if ctype, b := fetch(t, sp.URL); ctype != "audio/wav" || !bytes.HasPrefix(b, []byte("RIFF")) || len(b) < 10000 {
			t.Errorf("audio_url: %s, %d bytes; want a WAV with sound", ctype, len(b))
		}
		charged[j.ID] = j.Cost.CostMicros
	}

	// Text: streamed token by token in spec 2.9 chunks, then charged its tokens.
	code, j = modelCall(t, "POST", v2+"gantry-text/run", alice, `{"input":{"prompt":"one two three","max_tokens":5}}`)
	if code != 200 {
		t.Fatalf("text run = %d", code)
	}
	textJob := j.ID
	var chunks []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, _, b := send(t, "GET", v2+"gantry-text/stream/"+textJob, alice, "")
		var st struct {
			Status string
			Stream []struct {
				Output struct {
					Text         []string `json:"text"`
					InputTokens  int      `json:"input_tokens"`
					OutputTokens int      `json:"output_tokens"`
				}
				Metrics *struct {
					OutputTokens int `json:"output_tokens"`
					StreamIndex  int `json:"stream_index"`
				}
			}
		}
		_ = json.Unmarshal(b, &st)
		for i, c := range st.Stream {
			if c.Output.InputTokens != 3 || c.Output.OutputTokens != 1 || len(c.Output.Text) != 1 || c.Metrics == nil || c.Metrics.StreamIndex != len(chunks) {
				t.Errorf("chunk %d = %+v; want one token, 3 input tokens, metrics", i, c)
			}
			chunks = append(chunks, strings.Join(c.Output.Text, ""))
		}
		if st.Status == "COMPLETED" && len(st.Stream) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if got := strings.Join(chunks, ""); got != "three two one three two" {
		t.Errorf("streamed %q; want the prompt's words reversed, cycling", got)
	}
	j = waitModel(t, v2+"gantry-text/status/"+textJob, alice)
	if j.Cost == nil || j.Cost.Quantity != 8 || j.Cost.CostMicros != 2 {
		t.Errorf("text job cost %+v; want 8 tokens, 2 micro-dollars", j.Cost)
	}
	charged[textJob] = j.Cost.CostMicros

	// Bob sees none of it; Alice's usage is one record per job.
	if code, _ := modelCall(t, "GET", v2+"gantry-text/status/"+textJob, bob, ""); code != 404 {
		t.Errorf("bob reading alice's model job = %d; want 404", code)
	}
	if u := getUsage(t, s.base, bob, ""); len(u.Items) != 0 {
		t.Errorf("bob's usage = %+v; want none", u)
	}
	check := func(when string) {
		u := getUsage(t, s.base, alice, "")
		total := int64(0)
		for _, c := range charged {
			total += c
		}
		got := map[string]int64{}
		for _, it := range u.Items {
			got[it.JobID] = it.CostMicros
		}
		if fmt.Sprint(got) != fmt.Sprint(charged) || u.CostMicros != total {
			t.Errorf("%s: alice's usage = %v, total %d; want %v, total %d", when, got, u.CostMicros, charged, total)
		}
	}
	check("before the restart")
	s.stop(t)

	s = startServe(t, bin, "--data", data)
	check("after the restart")
	if code, j := modelCall(t, "GET", s.base+"/v2/gantry-text/status/"+textJob, alice, ""); code != 200 || j.Cost == nil || j.Cost.CostMicros != 2 {
		t.Errorf("text job after the restart = %d %+v; want its cost", code, j)
	}
	s.stop(t)
}

// waitModel polls a model job's status until it ends.
func waitModel(t *testing.T, url, key string) modelJob {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, j := modelCall(t, "GET", url, key, "")
		switch j.Status {
		case "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT":
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %s after 30 s", url, j.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestModelsConfig: the config's models section changes prices, removes and adds models; a
// bad entry stops serve with a message naming it.
func TestModelsConfig(t *testing.T) {
	t.Parallel()
	bin := buildGantry(t)
	cfg := filepath.Join(t.TempDir(), "gantry.yaml")
	_ = os.WriteFile(cfg, []byte(`models:
  - id: gantry-image
    price: "0.01"
  - id: gantry-video
    disabled: true
  - id: echo-llm
    type: TEXT_GENERATION
    image: gantry/text
    name: Another text model
    price: "1"
fileTtl: 10m
`), 0o600)
	data := t.TempDir()
	s := startServe(t, bin, "--data", data, "--config", cfg)
	key := newUserKey(t, bin, data, "alice")
	code, body := call(t, "GET", s.base+"/v2/models", key, "")
	if code != 200 || !strings.Contains(body, `"id":"gantry-image"`) || !strings.Contains(body, `"perUnit":"0.01","perUnitMicros":10000`) ||
		strings.Contains(body, `"gantry-video"`) || !strings.Contains(body, `"id":"echo-llm"`) {
		t.Errorf("GET /v2/models with the config = %d %s", code, body)
	}
	code, j := modelCall(t, "POST", s.base+"/v2/echo-llm/runsync", key, `{"input":{"prompt":"a b","max_tokens":2}}`)
	if code != 200 || j.Status != "COMPLETED" || j.Cost == nil || j.Cost.CostMicros != 4 {
		t.Errorf("echo-llm runsync = %d %+v; want COMPLETED, 4 tokens at $1 per 1M", code, j)
	}
	if code, _ := modelCall(t, "POST", s.base+"/v2/gantry-video/runsync", key, `{"input":{"prompt":"x"}}`); code != 404 {
		t.Errorf("a disabled model = %d; want 404", code)
	}
	s.stop(t)

	for _, bad := range []struct{ yaml, want string }{
		{"models:\n  - id: Bad_Name\n    type: TEXT_GENERATION\n    image: x\n", "lower-case"},
		{"models:\n  - id: gantry-text\n    price: \"0.00000001\"\n", "at most 6 places"},
		{"models:\n  - id: gantry-text\n    prize: 1\n", "prize"},
		{"models:\n  - id: gantry-text\n    pools: [nowhere]\n", "unknown pool"},
		{"models:\n  - id: gantry-text\n    workers: {min: 3, max: 1}\n", "min <= max"},
		{"models:\n  - id: my-llm\n    type: TEXT_GENERATION\n    image: example/llm:1\n", `model my-llm: its endpoint: $.image: no listed pool can run image "example/llm:1": pool local (process) has no images: entry for "example/llm:1"`},
	} {
		p := filepath.Join(t.TempDir(), "bad.yaml")
		_ = os.WriteFile(p, []byte(bad.yaml), 0o600)
		// A config wrongly accepted would serve on: the deadline ends it, and the test fails.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--config", p).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), bad.want) {
			t.Errorf("config %q: err %v, output %s; want a refusal containing %q", bad.yaml, err, out, bad.want)
		}
	}
}
