package models_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/testkit"
	"github.com/gantryhq/gantry/models"
	"github.com/gantryhq/gantry/store/filedir"
	"github.com/gantryhq/gantry/worker"
)

// newFiles returns a file store in a temporary directory.
func newFiles(t *testing.T) *core.Files {
	t.Helper()
	dir, err := filedir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &core.Files{Store: dir, Key: bytes.Repeat([]byte{1}, 32), Clock: testkit.NewClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))}
}

// responder is a worker.Responder that stores files as Gantry does and records the stream.
type responder struct {
	files *core.Files
	job   string
	mu    sync.Mutex
	parts []worker.Chunk
}

func (r *responder) Progress(context.Context, any) error { return nil }

func (r *responder) Stream(_ context.Context, part any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts = append(r.parts, part.(worker.Chunk))
	return nil
}

func (r *responder) PutFile(ctx context.Context, ext string, data []byte) (worker.File, error) {
	f, err := r.files.Put(ctx, r.job, ext, bytes.NewReader(data))
	if err != nil {
		return worker.File{}, err
	}
	return worker.File{Name: f.Name, URL: "http://gantry.test" + f.Path(), ExpiresAt: f.Expires, Bytes: f.Size, ContentType: f.ContentType}, nil
}

var _ worker.Responder = (*responder)(nil)

// put stores a file for a job as a worker would and returns its URL.
func put(t *testing.T, files *core.Files, job, ext string, data []byte) string {
	t.Helper()
	f, err := files.Put(t.Context(), job, ext, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return "http://gantry.test" + f.Path()
}

func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gifOf(t *testing.T, delays ...int) []byte {
	t.Helper()
	pal := color.Palette{color.Black, color.White}
	g := &gif.GIF{}
	for _, d := range delays {
		g.Image = append(g.Image, image.NewPaletted(image.Rect(0, 0, 8, 8), pal))
		g.Delay = append(g.Delay, d)
	}
	var buf bytes.Buffer
	if err := gif.EncodeAll(&buf, g); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wavOf is a 16-bit mono PCM WAV at 22050 Hz with n bytes of sound; declared, when not -1, is
// the size its data chunk claims.
func wavOf(n int, declared int64) []byte {
	if declared < 0 {
		declared = int64(n)
	}
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + n))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1))
	le(uint16(1))
	le(uint32(22050))
	le(uint32(44100))
	le(uint16(2))
	le(uint16(16))
	b.WriteString("LIST")
	le(uint32(3))
	b.WriteString("abc\x00") // an odd-sized chunk and its pad byte
	b.WriteString("data")
	le(uint32(declared))
	b.Write(make([]byte, n))
	return b.Bytes()
}

func specs(t *testing.T) []models.Spec {
	t.Helper()
	s, err := models.Catalog(models.Builtin, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func charge(t *testing.T, m *models.Meter, model, job, input, output string) (core.Charge, error) {
	t.Helper()
	return m.Measure(t.Context(), core.MeterJob{ID: job, Endpoint: model, Input: json.RawMessage(input), Output: json.RawMessage(output)})
}

// TestMeasureFromProduced: each unit is computed from what the job produced, not from what its
// input asked for nor from what its output claims.
func TestMeasureFromProduced(t *testing.T) {
	t.Parallel()
	files := newFiles(t)
	m := models.NewMeter(specs(t), files)
	img := put(t, files, "job-img", "png", pngOf(t, 320, 200))
	clip := put(t, files, "job-vid", "gif", gifOf(t, 7, 7, 7)) // 3 frames of 70 ms
	long := put(t, files, "job-vid2", "gif", gifOf(t, 250, 250, 1))
	wav := put(t, files, "job-tts", "wav", wavOf(44100, -1)) // one second of sound
	text2500 := strings.Repeat("é", 2500)

	tests := []struct {
		name, model, job, input, output string
		measure                         string
		quantity, units, cost           int64
	}{
		{"image: the PNG's size, not the asked or claimed one", "gantry-image", "job-img",
			`{"prompt":"x","width":1024,"height":1024}`, `{"image_url":"` + img + `","width":1024,"height":1024}`,
			"pixels", 64000, 64000, 154}, // 0.064 MP at $0.0024 = 153.6 micro-dollars, rounded up
		{"video: the GIF's delays, not frames/fps asked", "gantry-video", "job-vid",
			`{"prompt":"x","frames":120,"fps":1}`, `{"video_url":"` + clip + `","duration_ms":120000}`,
			"milliseconds", 210, 1_000_000, 100000},
		{"video: 5.01 s is two started units", "gantry-video", "job-vid2",
			`{"prompt":"x"}`, `{"video_url":"` + long + `"}`, "milliseconds", 5010, 2_000_000, 200000},
		{"speech: the input text spoken, not the characters claimed", "gantry-tts", "job-tts",
			`{"text":"  ` + text2500 + ` "}`, `{"audio_url":"` + wav + `","characters":1}`,
			"characters", 2500, 3_000_000, 45000},
		{"text: the prompt's and the output's words, not the counts claimed", "gantry-text", "job-txt",
			`{"prompt":"three word prompt","max_tokens":4000}`,
			`{"text":["five words were made here"],"input_tokens":999,"output_tokens":4000}`,
			"tokens", 8, 8, 2}, // 8 tokens at $0.20 per 1M = 1.6 micro-dollars, rounded up
		{"text: chunks joined as streamed", "gantry-text", "job-txt2",
			`{"prompt":"a b"}`, `{"text":["b ","a ","b"]}`, "tokens", 5, 5, 1},
	}
	for _, tt := range tests {
		c, err := charge(t, m, tt.model, tt.job, tt.input, tt.output)
		if err != nil {
			t.Errorf("%s: Measure = %v", tt.name, err)
			continue
		}
		if c.Model != tt.model || c.Measure != tt.measure || c.Quantity != tt.quantity || c.UnitsMicros != tt.units || c.CostMicros != tt.cost {
			t.Errorf("%s: Measure = %+v; want %s %d, %d units (millionths), %d micro-dollars", tt.name, c, tt.measure, tt.quantity, tt.units, tt.cost)
		}
	}
}

// TestMeasureRefuses: an output whose product cannot be found or read is not charged; the job
// fails instead.
func TestMeasureRefuses(t *testing.T) {
	t.Parallel()
	files := newFiles(t)
	m := models.NewMeter(specs(t), files)
	other := put(t, files, "job-other", "png", pngOf(t, 64, 64))
	notPNG := put(t, files, "job-a", "gif", gifOf(t, 10))
	silent := put(t, files, "job-s", "wav", wavOf(0, -1))
	tests := []struct{ name, model, job, input, output string }{
		{"no image_url", "gantry-image", "job-a", `{}`, `{"width":64}`},
		{"another job's file", "gantry-image", "job-a", `{}`, `{"image_url":"` + other + `"}`},
		{"a GIF as the image", "gantry-image", "job-a", `{}`, `{"image_url":"` + notPNG + `"}`},
		{"a file that was never stored", "gantry-image", "job-a", `{}`, `{"image_url":"http://x/files/job-a-zzzzzzzzzz.png"}`},
		{"output not an object", "gantry-video", "job-a", `{}`, `"hello"`},
		{"a PNG as the clip", "gantry-video", "job-other", `{}`, `{"video_url":"` + other + `"}`},
		{"silent WAV", "gantry-tts", "job-s", `{"text":"hello"}`, `{"audio_url":"` + silent + `"}`},
		{"no audio", "gantry-tts", "job-s", `{"text":"hello"}`, `{}`},
		{"no text", "gantry-text", "job-t", `{"prompt":"a"}`, `{"output_tokens":3}`},
		{"not a model", "ep123", "job-t", `{}`, `{}`},
	}
	for _, tt := range tests {
		if c, err := charge(t, m, tt.model, tt.job, tt.input, tt.output); err == nil {
			t.Errorf("%s: Measure = %+v; want an error (no charge)", tt.name, c)
		}
	}
	if m.Metered("ep123") || !m.Metered("gantry-image") {
		t.Error("Metered: want the models' endpoints only")
	}
}

func TestUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		got, want int64
	}{
		{"ImageUnits(1024, 1024)", models.ImageUnits(1024, 1024), 1_048_576},
		{"ImageUnits(2048, 2048)", models.ImageUnits(2048, 2048), 4_194_304},
		{"VideoUnits(0)", models.VideoUnits(0), 0},
		{"VideoUnits(1)", models.VideoUnits(1), 1_000_000},
		{"VideoUnits(5000)", models.VideoUnits(5000), 1_000_000},
		{"VideoUnits(5001)", models.VideoUnits(5001), 2_000_000},
		{"SpeechUnits(1)", models.SpeechUnits(1), 1_000_000},
		{"SpeechUnits(1000)", models.SpeechUnits(1000), 1_000_000},
		{"SpeechUnits(1001)", models.SpeechUnits(1001), 2_000_000},
		{"TextUnits(1000000)", models.TextUnits(1_000_000), 1_000_000},
		{"Tokens(\"  a b\\tc\\n\")", models.Tokens("  a b\tc\n"), 3},
		{"Tokens(\"\")", models.Tokens(""), 0},
		{"Characters(\"héllo\")", models.Characters("héllo"), 5},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d; want %d", tt.name, tt.got, tt.want)
		}
	}
}

func TestParsePrice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0.0024", 2400, true}, {"1", 1_000_000, true}, {"0.1", 100_000, true}, {"12.345678", 12_345_678, true},
		{"0", 0, true}, {"1000", 1_000_000_000, true},
		{"0.0000001", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1001", 0, false}, {"abc", 0, false},
		{".5", 0, false}, {"1.-5", 0, false}, {"1e3", 0, false}, {"", 0, false},
	}
	for _, tt := range tests {
		got, err := models.ParsePrice(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParsePrice(%q) = %d, %v; want %d (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	ptr := func(s string) *string { return &s }
	typ := core.ModelText
	// The built-in catalog is valid, one model per type.
	got := specs(t)
	seen := map[core.ModelType]bool{}
	for _, s := range got {
		seen[s.Type] = true
		if ep := s.Endpoint("local"); ep.ID != s.ID || ep.Owner != core.PlatformOwner || ep.GPU.Pools[0] != "local" || ep.Workers.Max != models.DefaultWorkersMax {
			t.Errorf("%s.Endpoint = %+v", s.ID, ep)
		}
		if m := s.Model(); m.ID != s.ID || len(m.Params) == 0 || m.Unit.ID == "" || m.PriceMicros != s.PriceMicros {
			t.Errorf("%s.Model = %+v", s.ID, m)
		}
	}
	if len(seen) != 4 {
		t.Errorf("built-in types = %v; want all four", seen)
	}

	merged, err := models.Catalog(models.Builtin, []models.Override{
		{ID: "gantry-image", Price: ptr("0.01"), Pools: []string{"gpu-a"}},
		{ID: "gantry-video", Disabled: true},
		{ID: "my-llm", Type: &typ, Image: ptr("example/llm:1"), Price: ptr("0.5")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, s := range merged {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, " ") != "gantry-image gantry-tts gantry-text my-llm" || merged[0].PriceMicros != 10000 ||
		merged[0].Image != "gantry/image" || merged[0].Pools[0] != "gpu-a" || merged[3].PriceMicros != 500000 {
		t.Errorf("merged catalog = %+v", merged)
	}
	if models.Builtin[0].PriceMicros != 2400 {
		t.Error("Catalog changed the built-in defaults")
	}

	bad := []struct {
		name string
		o    []models.Override
		want string
	}{
		{"new without type", []models.Override{{ID: "x-1", Image: ptr("i")}}, "needs type and image"},
		{"bad slug", []models.Override{{ID: "Bad_Slug", Type: &typ, Image: ptr("i")}}, "lower-case"},
		{"reserved", []models.Override{{ID: "billing", Type: &typ, Image: ptr("i")}}, "reserved"},
		{"twice", []models.Override{{ID: "gantry-text"}, {ID: "gantry-text"}}, "listed twice"},
		{"disable unknown", []models.Override{{ID: "nope", Disabled: true}}, "not a built-in"},
		{"bad price", []models.Override{{ID: "gantry-text", Price: ptr("0.0000001")}}, "at most 6 places"},
		{"bad type", []models.Override{{ID: "gantry-text", Type: func() *core.ModelType { x := core.ModelType("AUDIO"); return &x }()}}, "unknown type"},
	}
	for _, tt := range bad {
		if _, err := models.Catalog(models.Builtin, tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Catalog = %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// run runs a worker handler on input as job id, with files stored in files.
func run(t *testing.T, h worker.Handler, files *core.Files, id, input string) (json.RawMessage, *responder, error) {
	t.Helper()
	r := &responder{files: files, job: id}
	out, err := h(context.Background(), &worker.Job{ID: id, Input: json.RawMessage(input)}, r)
	if err != nil {
		return nil, r, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b, r, nil
}

// TestWorkers runs each built-in worker and meters what it produced.
func TestWorkers(t *testing.T) {
	t.Parallel()
	files := newFiles(t)
	m := models.NewMeter(specs(t), files)
	tests := []struct {
		model  string
		h      worker.Handler
		input  string
		checks func(t *testing.T, out map[string]any, c core.Charge, r *responder)
	}{
		{"gantry-image", models.Image, `{"prompt":"a lighthouse at dusk","width":256,"height":128}`,
			func(t *testing.T, out map[string]any, c core.Charge, _ *responder) {
				if out["width"] != 256.0 || out["height"] != 128.0 || out["content_type"] != "image/png" || c.Quantity != 256*128 {
					t.Errorf("image output %v, charge %+v", out, c)
				}
			}},
		{"gantry-video", models.Video, `{"prompt":"waves","frames":9,"fps":3,"width":64,"height":64}`,
			func(t *testing.T, out map[string]any, c core.Charge, _ *responder) {
				// 3 fps is a 33 cs delay: 9 frames last 2.97 s, one started 5-second unit.
				if out["duration_ms"] != 2970.0 || out["frames"] != 9.0 || c.Quantity != 2970 || c.UnitsMicros != 1_000_000 {
					t.Errorf("video output %v, charge %+v", out, c)
				}
			}},
		{"gantry-text", models.Text, `{"prompt":"one two three","max_tokens":5}`,
			func(t *testing.T, out map[string]any, c core.Charge, r *responder) {
				text, _ := json.Marshal(out["text"])
				if string(text) != `["three two one three two"]` || out["input_tokens"] != 3.0 || out["output_tokens"] != 5.0 || c.Quantity != 8 {
					t.Errorf("text output %v, charge %+v", out, c)
				}
				if len(r.parts) != 5 {
					t.Fatalf("streamed %d chunks; want 5", len(r.parts))
				}
				first, _ := json.Marshal(r.parts[0].Output)
				last, _ := json.Marshal(r.parts[4].Metrics)
				if string(first) != `{"text":["three "],"input_tokens":3,"output_tokens":1}` ||
					!strings.Contains(string(last), `"input_tokens":3,"output_tokens":5,`) || !strings.Contains(string(last), `"stream_index":4`) {
					t.Errorf("chunks: first output %s, last metrics %s", first, last)
				}
			}},
	}
	for _, tt := range tests {
		raw, r, err := run(t, tt.h, files, "job-"+tt.model, tt.input)
		if err != nil {
			t.Errorf("%s: %v", tt.model, err)
			continue
		}
		c, err := charge(t, m, tt.model, "job-"+tt.model, tt.input, string(raw))
		if err != nil {
			t.Errorf("%s: Measure(output %s) = %v", tt.model, raw, err)
			continue
		}
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		tt.checks(t, out, c, r)
	}
}

// TestImageIsTheHashOfThePrompt: the same prompt paints the same PNG, another prompt another.
func TestImageIsTheHashOfThePrompt(t *testing.T) {
	t.Parallel()
	files := newFiles(t)
	pixels := func(id, prompt string) []byte {
		out, _, err := run(t, models.Image, files, id, `{"prompt":"`+prompt+`","width":64,"height":64}`)
		if err != nil {
			t.Fatal(err)
		}
		var o struct {
			ImageURL string `json:"image_url"`
		}
		_ = json.Unmarshal(out, &o)
		rc, _, err := files.OpenJobFile(t.Context(), id, o.ImageURL)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return b
	}
	a1, a2, b := pixels("job-1", "a cat"), pixels("job-2", "a cat"), pixels("job-3", "a dog")
	if !bytes.Equal(a1, a2) || bytes.Equal(a1, b) {
		t.Error("want the same PNG for the same prompt and a different one for another prompt")
	}
}

func TestWorkerInputErrors(t *testing.T) {
	t.Parallel()
	files := newFiles(t)
	tests := []struct {
		h     worker.Handler
		input string
		want  string
	}{
		{models.Image, `{"prompt":"x","width":100}`, "width 100 must be a multiple of 8 from 64 to 2048"},
		{models.Image, `{"prompt":"x","height":4096}`, "height 4096 must be a multiple of 8"},
		{models.Image, `{"width":64}`, "input.prompt is required"},
		{models.Image, `{"prompt":"x","steps":30}`, `unknown field "steps"`},
		{models.Image, `{"prompt":"x","width":"big"}`, "input.width must be a JSON integer"},
		{models.Video, `{"prompt":"x","frames":500}`, "frames 500 must be from 1 to 120"},
		{models.Video, `{"prompt":"x","fps":0,"width":1024}`, "fps 0 must be from 1 to 50"},
		{models.Text, `{"prompt":"   "}`, "input.prompt is required"},
		{models.Text, `{"prompt":"x","max_tokens":0}`, "max_tokens 0 must be from 1 to 4096"},
		{models.Speech{}.Handle, `{"text":""}`, "input.text is required"},
		{models.Speech{}.Handle, `{"text":"hi","voice":"-w /etc/x"}`, "is not an espeak-ng voice name"},
		{models.Speech{}.Handle, `{"text":"hi","speed":10}`, "speed 10 must be from 80 to 450"},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.h, files, "job-x", tt.input)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("input %s: err = %v; want it to contain %q", tt.input, err, tt.want)
		}
	}
}

// TestSpeech speaks with the machine's espeak-ng. It is skipped where espeak-ng is missing,
// unless GANTRY_REQUIRE_ESPEAK=1 (CI installs it and sets that).
func TestSpeech(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("espeak-ng"); err != nil {
		if os.Getenv("GANTRY_REQUIRE_ESPEAK") == "1" {
			t.Fatal("espeak-ng is not installed, and GANTRY_REQUIRE_ESPEAK=1")
		}
		t.Skip("espeak-ng is not installed (apt-get install espeak-ng)")
	}
	files := newFiles(t)
	m := models.NewMeter(specs(t), files)
	input := `{"text":"  Hello from Gantry. This sentence is spoken by espeak-ng.  ","voice":"en-us","speed":200}`
	out, _, err := run(t, models.Speech{}.Handle, files, "job-tts", input)
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		URL        string `json:"audio_url"`
		DurationMs int64  `json:"duration_ms"`
		Characters int64
	}
	_ = json.Unmarshal(out, &o)
	if o.DurationMs < 500 || o.Characters != 56 {
		t.Errorf("speech output %s; want some seconds of sound and the 56 characters spoken", out)
	}
	c, err := charge(t, m, "gantry-tts", "job-tts", input, string(out))
	if err != nil || c.Quantity != 56 || c.UnitsMicros != 1_000_000 || c.CostMicros != 15000 {
		t.Errorf("Measure = %+v, %v; want 56 characters, 1 unit, 15000 micro-dollars", c, err)
	}
	if _, _, err := run(t, models.Speech{}.Handle, files, "job-tts2", `{"text":"hi","voice":"xx-nonexistent"}`); err == nil ||
		!strings.Contains(err.Error(), "espeak-ng failed") {
		t.Errorf("unknown voice: err = %v; want espeak-ng's failure", err)
	}
}

func TestSpeechWithoutEspeak(t *testing.T) {
	t.Parallel()
	_, _, err := run(t, models.Speech{Command: "/nonexistent/espeak-ng"}.Handle, newFiles(t), "job-x", `{"text":"hello"}`)
	if err != models.ErrNoEspeak || !strings.Contains(err.Error(), "apt-get install espeak-ng") {
		t.Errorf("without espeak-ng: err = %v; want ErrNoEspeak, saying how to install it", err)
	}
}
