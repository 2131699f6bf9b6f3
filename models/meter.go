package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"strings"

	"github.com/gantryhq/gantry/core"
)

// Metering rules. Each turns what was produced into billing units, kept in millionths of a
// unit so that nothing is a float; core.CostMicros then prices them, rounding up once, to a
// whole micro-dollar per job.

// ImageUnits is the megapixels of a width × height image, in millionths: exactly its pixels.
func ImageUnits(width, height int) int64 { return int64(width) * int64(height) }

// VideoUnits is the started 5-second units of a clip of durationMs, in millionths.
func VideoUnits(durationMs int64) int64 { return ceilDiv(durationMs, 5000) * 1e6 }

// SpeechUnits is the started 1000-character blocks of chars characters, in millionths.
func SpeechUnits(chars int64) int64 { return ceilDiv(chars, 1000) * 1e6 }

// TextUnits is tokens in millionths of 1M tokens: exactly the tokens.
func TextUnits(tokens int64) int64 { return tokens }

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Tokens counts the tokens of a text: its whitespace-separated words.
func Tokens(s string) int64 { return int64(len(strings.Fields(s))) }

// SpeechText is the text a speech job speaks: the input's text with surrounding space trimmed.
func SpeechText(text string) string { return strings.TrimSpace(text) }

// Characters counts a text's characters: Unicode code points.
func Characters(s string) int64 { return int64(len([]rune(s))) }

// FileOpener opens a file a job stored (core.Files.OpenJobFile): a name or URL of a file of
// another job is refused.
type FileOpener interface {
	OpenJobFile(ctx context.Context, jobID, nameOrURL string) (io.ReadSeekCloser, core.FileInfo, error)
}

// Meter measures the output of model jobs (core.Meter).
type Meter struct {
	specs map[string]Spec
	files FileOpener
}

// NewMeter meters the jobs of the given models, reading their files through files.
func NewMeter(specs []Spec, files FileOpener) *Meter {
	m := &Meter{specs: map[string]Spec{}, files: files}
	for _, s := range specs {
		m.specs[s.ID] = s
	}
	return m
}

// Metered reports whether the endpoint is a model's.
func (m *Meter) Metered(endpoint string) bool {
	_, ok := m.specs[endpoint]
	return ok
}

// Measure prices a completed model job from what it produced:
//
//   - image: the pixels of the PNG that image_url names, from the file's own header (not the
//     width and height asked for, nor those the output claims);
//   - video: the duration of the GIF that video_url names, the sum of its frame delays, in
//     started 5-second units;
//   - speech: the characters of the input text spoken (see SpeechText), in started blocks of
//     1000, once the WAV that audio_url names is there and holds sound;
//   - text: the tokens of the prompt plus those of the text the output holds (see Tokens).
//
// The file must be one this job stored. Anything missing or unreadable is an error: the job
// fails and is not charged.
func (m *Meter) Measure(ctx context.Context, j core.MeterJob) (core.Charge, error) {
	s, ok := m.specs[j.Endpoint]
	if !ok {
		return core.Charge{}, fmt.Errorf("%s is not a model", j.Endpoint)
	}
	c := core.Charge{Model: s.ID, Unit: types[s.Type].unit.ID, PriceMicros: s.PriceMicros}
	var err error
	switch s.Type {
	case core.ModelImage:
		c.Measure = "pixels"
		var w, h int
		w, h, err = m.imageSize(ctx, j)
		c.Quantity, c.UnitsMicros = int64(w)*int64(h), ImageUnits(w, h)
	case core.ModelVideo:
		c.Measure = "milliseconds"
		var info GIFInfo
		info, err = m.clip(ctx, j)
		c.Quantity, c.UnitsMicros = info.DurationMs, VideoUnits(info.DurationMs)
	case core.ModelSpeech:
		c.Measure = "characters"
		c.Quantity, err = m.spoken(ctx, j)
		c.UnitsMicros = SpeechUnits(c.Quantity)
	case core.ModelText:
		c.Measure = "tokens"
		c.Quantity, err = textTokens(j)
		c.UnitsMicros = TextUnits(c.Quantity)
	default:
		err = fmt.Errorf("model %s has unknown type %q", s.ID, s.Type)
	}
	if err != nil {
		return core.Charge{}, err
	}
	c.CostMicros = core.CostMicros(c.UnitsMicros, c.PriceMicros)
	return c, nil
}

// urlField reads a string field of the output.
func urlField(output json.RawMessage, field string) (string, error) {
	var out map[string]json.RawMessage
	if err := json.Unmarshal(output, &out); err != nil {
		return "", errors.New("the output is not a JSON object")
	}
	var u string
	if err := json.Unmarshal(out[field], &u); err != nil || u == "" {
		return "", fmt.Errorf("the output has no %s", field)
	}
	return u, nil
}

// open opens the file that the output's field names.
func (m *Meter) open(ctx context.Context, j core.MeterJob, field string) (io.ReadSeekCloser, error) {
	u, err := urlField(j.Output, field)
	if err != nil {
		return nil, err
	}
	if m.files == nil {
		return nil, errors.New("no file store to read the output from")
	}
	f, _, err := m.files.OpenJobFile(ctx, j.ID, u)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return f, nil
}

func (m *Meter) imageSize(ctx context.Context, j core.MeterJob) (int, int, error) {
	f, err := m.open(ctx, j, "image_url")
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		return 0, 0, fmt.Errorf("image_url is not a readable PNG: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, fmt.Errorf("image_url is an empty PNG (%d×%d)", cfg.Width, cfg.Height)
	}
	return cfg.Width, cfg.Height, nil
}

func (m *Meter) clip(ctx context.Context, j core.MeterJob) (GIFInfo, error) {
	f, err := m.open(ctx, j, "video_url")
	if err != nil {
		return GIFInfo{}, err
	}
	defer func() { _ = f.Close() }()
	info, err := ReadGIFInfo(f)
	if err != nil {
		return GIFInfo{}, fmt.Errorf("video_url is not a readable GIF: %w", err)
	}
	if info.DurationMs <= 0 {
		return GIFInfo{}, fmt.Errorf("video_url is a GIF of no duration (%d frames)", info.Frames)
	}
	return info, nil
}

func (m *Meter) spoken(ctx context.Context, j core.MeterJob) (int64, error) {
	f, err := m.open(ctx, j, "audio_url")
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	info, err := ReadWAVInfo(f)
	if err != nil {
		return 0, fmt.Errorf("audio_url is not a readable WAV: %w", err)
	}
	if info.DataBytes == 0 {
		return 0, errors.New("audio_url is a WAV with no sound")
	}
	var in struct{ Text string }
	if err := json.Unmarshal(j.Input, &in); err != nil {
		return 0, fmt.Errorf("reading the input text: %w", err)
	}
	n := Characters(SpeechText(in.Text))
	if n == 0 {
		return 0, errors.New("the input has no text to have spoken")
	}
	return n, nil
}

func textTokens(j core.MeterJob) (int64, error) {
	var out struct {
		Text []string `json:"text"`
	}
	if err := json.Unmarshal(j.Output, &out); err != nil || out.Text == nil {
		return 0, errors.New("the output has no text (an array of strings)")
	}
	var in struct{ Prompt string }
	if err := json.Unmarshal(j.Input, &in); err != nil {
		return 0, fmt.Errorf("reading the prompt: %w", err)
	}
	return Tokens(in.Prompt) + Tokens(strings.Join(out.Text, "")), nil
}

var _ core.Meter = (*Meter)(nil)
