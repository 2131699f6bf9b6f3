package models

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gantryhq/gantry/worker"
)

// The built-in model workers (worker.Handler), run by `gantry worker image|video|speech|text`.
// Each checks its input again (a worker may be reached without Gantry's check), produces its
// output and reports what it produced; Gantry's meter measures the files itself.

// decode reads a job's input into v, refusing unknown fields.
func decode(model string, input json.RawMessage, v any) error {
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			want := "string"
			if k := te.Type.Kind(); k >= reflect.Int && k <= reflect.Int64 {
				want = "integer"
			}
			return fmt.Errorf("%s: input.%s must be a JSON %s (got %s)", model, te.Field, want, te.Value)
		}
		return fmt.Errorf("%s: reading the input: %v", model, err)
	}
	return nil
}

func orInt(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// checkSide checks an image or clip side.
func checkSide(model, name string, v, maxSide int) error {
	if v < MinSide || v > maxSide || v%SideStep != 0 {
		return fmt.Errorf("%s: %s %d must be a multiple of %d from %d to %d", model, name, v, SideStep, MinSide, maxSide)
	}
	return nil
}

func checkPrompt(model, prompt string, maxChars int) error {
	if strings.TrimSpace(prompt) == "" {
		return fmt.Errorf("%s: input.prompt is required", model)
	}
	if n := len([]rune(prompt)); n > maxChars {
		return fmt.Errorf("%s: input.prompt has %d characters; at most %d", model, n, maxChars)
	}
	return nil
}

// painter paints the pattern a prompt hashes to: three colours, a wave and rings, all derived
// from SHA-256(prompt). It is not a generative model; it makes the same picture for the same
// prompt, and a different one for any other.
type painter struct {
	colors             [3][3]float64
	fx, fy, phase      float64
	cx, cy, rings, mix float64
}

func newPainter(prompt string) painter {
	h := sha256.Sum256([]byte(prompt))
	f := func(i int) float64 { return float64(binary.BigEndian.Uint16(h[i:])) / 65535 } // [0,1]
	var p painter
	for c := range 3 {
		for k := range 3 {
			p.colors[c][k] = 40 + 215*f(2*(3*c+k)%30)
		}
	}
	p.fx, p.fy = 1+5*f(18), 1+5*f(20)
	p.phase = 2 * math.Pi * f(22)
	p.cx, p.cy = f(24), f(26)
	p.rings, p.mix = 2+10*f(28), 0.25+0.5*f(30)
	return p
}

// value is the pattern at (u, v) in [0,1)² at time t (cycles), in [0,1].
func (p painter) value(u, v, t float64) float64 {
	a := math.Sin(2*math.Pi*(p.fx*u+p.fy*v+t) + p.phase)
	dx, dy := u-p.cx, v-p.cy
	b := math.Cos(2 * math.Pi * (p.rings*math.Sqrt(dx*dx+dy*dy) - t))
	return math.Min(math.Max(0.5+0.5*(p.mix*a+(1-p.mix)*b), 0), 1)
}

// color blends the three colours along x in [0,1].
func (p painter) color(x float64) (r, g, b uint8) {
	i, w := 0, x*2
	if w >= 1 {
		i, w = 1, w-1
	}
	c0, c1 := p.colors[i], p.colors[i+1]
	ch := func(k int) uint8 { return uint8(c0[k] + (c1[k]-c0[k])*w) }
	return ch(0), ch(1), ch(2)
}

// paint paints a width × height image of the prompt's pattern.
func paint(prompt string, width, height int) *image.NRGBA {
	p := newPainter(prompt)
	img := image.NewNRGBA(image.Rect(0, 0, width, height))
	for y := range height {
		row := img.Pix[y*img.Stride:]
		for x := range width {
			r, g, b := p.color(p.value(float64(x)/float64(width), float64(y)/float64(height), 0))
			row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = r, g, b, 255
		}
	}
	return img
}

// Image is the gantry/image worker: a PNG painted from the prompt (see painter), stored on the
// platform; the output gives its URL and the size of the PNG written.
func Image(ctx context.Context, job *worker.Job, r worker.Responder) (any, error) {
	var in struct {
		Prompt string `json:"prompt"`
		Width  *int   `json:"width"`
		Height *int   `json:"height"`
	}
	if err := decode("image", job.Input, &in); err != nil {
		return nil, err
	}
	w, h := orInt(in.Width, 512), orInt(in.Height, 512)
	if err := errors.Join(checkPrompt("image", in.Prompt, MaxPromptChars), checkSide("image", "width", w, MaxSide),
		checkSide("image", "height", h, MaxSide)); err != nil {
		return nil, err
	}
	img := paint(in.Prompt, w, h)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("image: encoding the PNG: %w", err)
	}
	f, err := r.PutFile(ctx, "png", buf.Bytes())
	if err != nil {
		return nil, err
	}
	b := img.Bounds()
	return map[string]any{"image_url": f.URL, "width": b.Dx(), "height": b.Dy(), "content_type": f.ContentType,
		"expires_at": f.ExpiresAt}, nil
}

// gifDelay is the frame delay of a GIF for fps frames per second: whole hundredths of a second,
// at least 2 (players show shorter delays as 10).
func gifDelay(fps int) int { return max(2, int(math.Round(100/float64(fps)))) }

// Video is the gantry/video worker: an animated GIF of frames painted from the prompt, the
// pattern drifting one cycle over the clip. Its duration is frames × the frame delay, which is
// fps rounded to whole hundredths of a second.
func Video(ctx context.Context, job *worker.Job, r worker.Responder) (any, error) {
	var in struct {
		Prompt string `json:"prompt"`
		Frames *int   `json:"frames"`
		FPS    *int   `json:"fps"`
		Width  *int   `json:"width"`
		Height *int   `json:"height"`
	}
	if err := decode("video", job.Input, &in); err != nil {
		return nil, err
	}
	frames, fps := orInt(in.Frames, 24), orInt(in.FPS, 12)
	w, h := orInt(in.Width, 256), orInt(in.Height, 256)
	errs := []error{checkPrompt("video", in.Prompt, MaxPromptChars), checkSide("video", "width", w, MaxVideoSide),
		checkSide("video", "height", h, MaxVideoSide)}
	if frames < 1 || frames > MaxFrames {
		errs = append(errs, fmt.Errorf("video: frames %d must be from 1 to %d", frames, MaxFrames))
	}
	if fps < 1 || fps > MaxFPS {
		errs = append(errs, fmt.Errorf("video: fps %d must be from 1 to %d", fps, MaxFPS))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p := newPainter(in.Prompt)
	pal := make(color.Palette, 256)
	for i := range pal {
		r, g, b := p.color(float64(i) / 255)
		pal[i] = color.RGBA{r, g, b, 255}
	}
	delay := gifDelay(fps)
	anim := &gif.GIF{Config: image.Config{ColorModel: pal, Width: w, Height: h}}
	for f := range frames {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		img := image.NewPaletted(image.Rect(0, 0, w, h), pal)
		t := float64(f) / float64(frames)
		for y := range h {
			for x := range w {
				img.Pix[y*img.Stride+x] = uint8(math.Round(255 * p.value(float64(x)/float64(w), float64(y)/float64(h), t)))
			}
		}
		anim.Image = append(anim.Image, img)
		anim.Delay = append(anim.Delay, delay)
	}
	var buf bytes.Buffer
	if err := gif.EncodeAll(&buf, anim); err != nil {
		return nil, fmt.Errorf("video: encoding the GIF: %w", err)
	}
	file, err := r.PutFile(ctx, "gif", buf.Bytes())
	if err != nil {
		return nil, err
	}
	return map[string]any{"video_url": file.URL, "duration_ms": int64(frames) * int64(delay) * 10, "frames": frames,
		"fps": 100 / float64(delay), "width": w, "height": h, "content_type": file.ContentType, "expires_at": file.ExpiresAt}, nil
}

// ErrNoEspeak is the error of a speech job on a machine without espeak-ng.
var ErrNoEspeak = errors.New("speech: espeak-ng is not installed on the worker's machine; install it " +
	"(Debian or Ubuntu: apt-get install espeak-ng) and run the job again (it was not charged)")

// voiceRE is the form of an espeak-ng voice name.
var voiceRE = regexp.MustCompile(`^[a-z][a-z0-9]*(?:[-+][a-z0-9]+)*$`)

// Speech is the gantry/speech worker: espeak-ng speaks the input text to a WAV file, which is
// stored on the platform. Command is the espeak-ng program ("" = "espeak-ng" on PATH).
type Speech struct {
	Command string
}

// Handle is the worker.Handler.
func (s Speech) Handle(ctx context.Context, job *worker.Job, r worker.Responder) (any, error) {
	var in struct {
		Text  string  `json:"text"`
		Voice *string `json:"voice"`
		Speed *int    `json:"speed"`
	}
	if err := decode("speech", job.Input, &in); err != nil {
		return nil, err
	}
	text := SpeechText(in.Text)
	voice, speed := "en", orInt(in.Speed, 175)
	if in.Voice != nil {
		voice = *in.Voice
	}
	var errs []error
	switch n := len([]rune(text)); {
	case n == 0:
		errs = append(errs, errors.New("speech: input.text is required"))
	case n > MaxSpeechChars:
		errs = append(errs, fmt.Errorf("speech: input.text has %d characters; at most %d", n, MaxSpeechChars))
	}
	if len(voice) > 32 || !voiceRE.MatchString(voice) {
		errs = append(errs, fmt.Errorf("speech: voice %q is not an espeak-ng voice name (such as en, en-us, de)", voice))
	}
	if speed < 80 || speed > 450 {
		errs = append(errs, fmt.Errorf("speech: speed %d must be from 80 to 450 words per minute", speed))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	prog, err := exec.LookPath(cmp.Or(s.Command, "espeak-ng"))
	if err != nil {
		return nil, ErrNoEspeak
	}
	dir, err := os.MkdirTemp("", "gantry-speech-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	out := filepath.Join(dir, "speech.wav")
	cmd := exec.CommandContext(ctx, prog, "-v", voice, "-s", strconv.Itoa(speed), "-w", out, "--stdin")
	cmd.Stdin = strings.NewReader(text)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("speech: espeak-ng failed: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	wav, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("speech: espeak-ng wrote no WAV: %w", err)
	}
	info, err := ReadWAVInfo(bytes.NewReader(wav))
	if err != nil || info.DataBytes == 0 {
		return nil, fmt.Errorf("speech: espeak-ng produced no sound (%v; %s)", err, strings.TrimSpace(stderr.String()))
	}
	f, err := r.PutFile(ctx, "wav", wav)
	if err != nil {
		return nil, err
	}
	return map[string]any{"audio_url": f.URL, "duration_ms": info.DurationMs, "sample_rate": info.SampleRate,
		"characters": Characters(text), "content_type": f.ContentType, "expires_at": f.ExpiresAt}, nil
}

// textChunk is one streamed chunk's output (spec 2.9): the token, and the token counts.
type textChunk struct {
	Text         []string `json:"text"`
	InputTokens  int      `json:"input_tokens"`
	OutputTokens int      `json:"output_tokens"`
}

// textMetrics are a chunk's metrics (spec 2.9): running totals and throughput.
type textMetrics struct {
	AvgGenThroughput    float64 `json:"avg_gen_throughput"`    // tokens generated per second so far
	AvgPromptThroughput float64 `json:"avg_prompt_throughput"` // prompt tokens per second of the run so far
	CPUKVCacheUsage     float64 `json:"cpu_kv_cache_usage"`
	GPUKVCacheUsage     float64 `json:"gpu_kv_cache_usage"`
	InputTokens         int     `json:"input_tokens"`
	OutputTokens        int     `json:"output_tokens"` // generated so far
	Pending             int     `json:"pending"`
	Running             int     `json:"running"`
	Swapped             int     `json:"swapped"`
	StreamIndex         int     `json:"stream_index"`
	Scenario            string  `json:"scenario"`
}

// Text is the gantry/text worker: it streams the prompt's words back in reverse order, cycling,
// max_tokens of them, one token (word) per chunk. A chunk's output holds the token (text, an
// array of one string), the prompt's token count and its own (1); its metrics hold the running
// totals. The final output is the whole text with the totals and the last metrics.
func Text(ctx context.Context, job *worker.Job, r worker.Responder) (any, error) {
	var in struct {
		Prompt       string `json:"prompt"`
		MaxTokens    *int   `json:"max_tokens"`
		TokenDelayMs *int   `json:"token_delay_ms"`
	}
	if err := decode("text", job.Input, &in); err != nil {
		return nil, err
	}
	n, delay := orInt(in.MaxTokens, 64), orInt(in.TokenDelayMs, 0)
	errs := []error{checkPrompt("text", in.Prompt, MaxTextPromptChars)}
	if n < 1 || n > MaxTokens {
		errs = append(errs, fmt.Errorf("text: max_tokens %d must be from 1 to %d", n, MaxTokens))
	}
	if delay < 0 || delay > 1000 {
		errs = append(errs, fmt.Errorf("text: token_delay_ms %d must be from 0 to 1000", delay))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	words := strings.Fields(in.Prompt)
	start := time.Now()
	var text strings.Builder
	var m textMetrics
	for i := range n {
		if delay > 0 {
			t := time.NewTimer(time.Duration(delay) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		tok := words[len(words)-1-i%len(words)]
		if i < n-1 {
			tok += " "
		}
		text.WriteString(tok)
		secs := max(time.Since(start).Seconds(), 1e-6)
		m = textMetrics{AvgGenThroughput: float64(i+1) / secs, AvgPromptThroughput: float64(len(words)) / secs,
			InputTokens: len(words), OutputTokens: i + 1, Running: 1, StreamIndex: i, Scenario: "gantry-text"}
		chunk := worker.Chunk{Output: textChunk{Text: []string{tok}, InputTokens: len(words), OutputTokens: 1}, Metrics: m}
		if err := r.Stream(ctx, chunk); err != nil {
			return nil, fmt.Errorf("text: streaming token %d: %w", i, err)
		}
	}
	m.Running = 0
	return map[string]any{"text": []string{text.String()}, "input_tokens": len(words), "output_tokens": n, "metrics": m}, nil
}

var (
	_ worker.Handler = Image
	_ worker.Handler = Video
	_ worker.Handler = Speech{}.Handle
	_ worker.Handler = Text
)
