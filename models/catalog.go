package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/core"
)

// Spec is a ready-made model as the platform runs it: what the catalog shows, and the
// platform endpoint (id = the slug) that serves it.
type Spec struct {
	ID          string
	Name        string
	Type        core.ModelType
	Description string
	// Image is what the endpoint's workers run: gantry/image, ... for the built-in workers.
	Image string
	Env   map[string]string
	// Pools the workers are placed on, in order; empty = the first pool of the config.
	Pools []string
	// WorkersMin and WorkersMax bound the endpoint's workers; IdleTimeout is how long an idle
	// worker stays, seconds. WorkersMax 0 means no worker runs (jobs wait).
	WorkersMin, WorkersMax, IdleTimeout int
	// QueueDelay is the QUEUE_DELAY scaler's threshold, seconds.
	QueueDelay float64
	// TimeoutMs is each job's execution timeout, milliseconds.
	TimeoutMs int64
	// PriceMicros is the price of one billing unit, in millionths of a US dollar.
	PriceMicros int64
}

// Built-in defaults of every model's endpoint.
const (
	DefaultWorkersMax  = 2
	DefaultIdleTimeout = 60     // seconds
	DefaultQueueDelay  = 4      // seconds
	DefaultTimeoutMs   = 300000 // milliseconds
)

// withDefaults is a spec of the given id with the endpoint defaults.
func withDefaults(s Spec) Spec {
	s.WorkersMax, s.IdleTimeout, s.QueueDelay, s.TimeoutMs = DefaultWorkersMax, DefaultIdleTimeout, DefaultQueueDelay, DefaultTimeoutMs
	return s
}

// Builtin is the catalog every Gantry serves unless the config changes it. Prices are list
// prices in the range of hosted models of each kind, in micro-dollars per unit.
var Builtin = builtin()

func builtin() []Spec {
	specs := []Spec{
		{ID: "gantry-image", Name: "Gantry test image (prompt-hashed PNG)", Type: core.ModelImage, Image: "gantry/image",
			Description: "A CPU test model, not a diffusion model: it paints a PNG of the requested size whose colours " +
				"and pattern are derived from a SHA-256 hash of the prompt, so the same prompt and size always give the same image.",
			PriceMicros: 2400},
		{ID: "gantry-video", Name: "Gantry test video (animated GIF)", Type: core.ModelVideo, Image: "gantry/video",
			Description: "A CPU test model, not a video diffusion model: an animated GIF of frames painted like " +
				"gantry-image's, drifting over time. Its duration is what the GIF's frame delays add up to.",
			PriceMicros: 100000},
		{ID: "gantry-tts", Name: "espeak-ng text to speech", Type: core.ModelSpeech, Image: "gantry/speech",
			Description: "Speech from espeak-ng, a formant synthesiser (clear but robotic, not neural), as a WAV file. " +
				"The worker's machine needs Debian's espeak-ng package; without it the job fails, saying so, and is not charged.",
			PriceMicros: 15000},
		{ID: "gantry-text", Name: "Gantry test text (reversed prompt)", Type: core.ModelText, Image: "gantry/text",
			Description: "A CPU test model, not a language model: it streams the prompt's words back in reverse order, " +
				"cycling, one token (a whitespace-separated word) at a time, with spec 2.9 chunks and metrics.",
			PriceMicros: 200000},
	}
	for i := range specs {
		specs[i] = withDefaults(specs[i])
	}
	return specs
}

// Override is a `models:` entry of the config file. An entry whose id is a built-in model
// changes only the fields it gives; any other id adds a model, which must give type and image.
type Override struct {
	ID          string            `yaml:"id"`
	Disabled    bool              `yaml:"disabled"` // remove a built-in model
	Name        *string           `yaml:"name"`
	Type        *core.ModelType   `yaml:"type"`
	Description *string           `yaml:"description"`
	Image       *string           `yaml:"image"`
	Env         map[string]string `yaml:"env"`
	Pools       []string          `yaml:"pools"`
	Workers     *struct {
		Min         *int `yaml:"min"`
		Max         *int `yaml:"max"`
		IdleTimeout *int `yaml:"idleTimeout"`
	} `yaml:"workers"`
	QueueDelay *float64 `yaml:"queueDelay"`
	TimeoutMs  *int64   `yaml:"timeoutMs"`
	// Price is USD per billing unit as a decimal string ("0.0024"), exact to a millionth.
	Price *string `yaml:"price"`
}

// slugRE is the form of a model id: lower-case words joined by '-' or '.'.
var slugRE = regexp.MustCompile(`^[a-z0-9]+(?:[-.][a-z0-9]+)*$`)

// reserved are /v2/<segment> paths that are not endpoints.
var reserved = []string{"serverless", "templates", "catalog", "models", "billing"}

// MaxPriceMicros bounds a unit price ($1000).
const MaxPriceMicros = 1_000_000_000

// Catalog merges the config's overrides into the built-in models and checks the result:
// slugs, types, images, prices and worker bounds. Errors name the model.
func Catalog(builtin []Spec, overrides []Override) ([]Spec, error) {
	specs := slices.Clone(builtin)
	var errs []error
	seen := map[string]bool{}
	for i, o := range overrides {
		if seen[o.ID] {
			errs = append(errs, fmt.Errorf("models[%d]: model %q is listed twice", i, o.ID))
			continue
		}
		seen[o.ID] = true
		at := slices.IndexFunc(specs, func(s Spec) bool { return s.ID == o.ID })
		if o.Disabled {
			if at < 0 {
				errs = append(errs, fmt.Errorf("models[%d]: %q is not a built-in model to disable", i, o.ID))
			} else {
				specs = slices.Delete(specs, at, at+1)
			}
			continue
		}
		if at < 0 {
			if o.Type == nil || o.Image == nil {
				errs = append(errs, fmt.Errorf("models[%d]: new model %q needs type and image", i, o.ID))
				continue
			}
			specs = append(specs, withDefaults(Spec{ID: o.ID}))
			at = len(specs) - 1
		}
		if err := apply(&specs[at], o); err != nil {
			errs = append(errs, fmt.Errorf("models[%d] (%s): %w", i, o.ID, err))
		}
	}
	for _, s := range specs {
		if err := check(s); err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", s.ID, err))
		}
	}
	return specs, errors.Join(errs...)
}

func apply(s *Spec, o Override) error {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.Name, o.Name)
	set(&s.Description, o.Description)
	set(&s.Image, o.Image)
	if o.Type != nil {
		s.Type = *o.Type
	}
	if o.Env != nil {
		s.Env = maps.Clone(o.Env)
	}
	if o.Pools != nil {
		s.Pools = slices.Clone(o.Pools)
	}
	if w := o.Workers; w != nil {
		s.WorkersMin = deref(w.Min, s.WorkersMin)
		s.WorkersMax = deref(w.Max, s.WorkersMax)
		s.IdleTimeout = deref(w.IdleTimeout, s.IdleTimeout)
	}
	s.QueueDelay = deref(o.QueueDelay, s.QueueDelay)
	s.TimeoutMs = deref(o.TimeoutMs, s.TimeoutMs)
	if o.Price != nil {
		p, err := ParsePrice(*o.Price)
		if err != nil {
			return err
		}
		s.PriceMicros = p
	}
	return nil
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func check(s Spec) error {
	var errs []error
	switch {
	case len(s.ID) > 64 || !slugRE.MatchString(s.ID):
		errs = append(errs, fmt.Errorf("the id must be lower-case letters and digits joined by '-' or '.', at most 64"))
	case slices.Contains(reserved, s.ID):
		errs = append(errs, fmt.Errorf("the id %q is a reserved path (%s)", s.ID, strings.Join(reserved, ", ")))
	}
	if _, ok := types[s.Type]; !ok {
		errs = append(errs, fmt.Errorf("unknown type %q (%s, %s, %s or %s)", s.Type, core.ModelImage, core.ModelVideo, core.ModelSpeech, core.ModelText))
	}
	if strings.TrimSpace(s.Image) == "" {
		errs = append(errs, errors.New("image is required"))
	}
	if s.PriceMicros < 0 || s.PriceMicros > MaxPriceMicros {
		errs = append(errs, fmt.Errorf("price must be between 0 and %s USD per unit", core.FormatMicros(MaxPriceMicros)))
	}
	if s.WorkersMin < 0 || s.WorkersMin > s.WorkersMax {
		errs = append(errs, fmt.Errorf("workers: need 0 <= min <= max (got %d, %d)", s.WorkersMin, s.WorkersMax))
	}
	if s.IdleTimeout < 1 || s.IdleTimeout > 3600 {
		errs = append(errs, fmt.Errorf("workers.idleTimeout %d must be from 1 to 3600 seconds", s.IdleTimeout))
	}
	if s.QueueDelay < 0.5 {
		errs = append(errs, fmt.Errorf("queueDelay %v must be at least 0.5 seconds", s.QueueDelay))
	}
	if s.TimeoutMs < 1 {
		errs = append(errs, fmt.Errorf("timeoutMs %d must be positive", s.TimeoutMs))
	}
	return errors.Join(errs...)
}

// ParsePrice reads a USD amount given as a decimal string ("0.0024") into millionths of a
// dollar, exactly: more than six decimals is an error, never a rounding.
func ParsePrice(s string) (int64, error) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	if whole == "" || len(frac) > 6 || strings.HasPrefix(whole, "-") || strings.HasPrefix(whole, "+") {
		return 0, fmt.Errorf("price %q: want a non-negative decimal of at most 6 places, e.g. \"0.0024\"", s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > MaxPriceMicros/1_000_000 {
		return 0, fmt.Errorf("price %q: want a non-negative decimal of at most 6 places, at most %d", s, MaxPriceMicros/1_000_000)
	}
	var f int64
	if frac != "" {
		if f, err = strconv.ParseInt((frac + "000000")[:6], 10, 64); err != nil || strings.ContainsAny(frac, "+-") {
			return 0, fmt.Errorf("price %q: want a non-negative decimal of at most 6 places", s)
		}
	}
	return w*1e6 + f, nil
}

// Endpoint is the platform endpoint that serves the model. defaultPool is used when the model
// names no pools.
func (s Spec) Endpoint(defaultPool string) core.Endpoint {
	pools := s.Pools
	if len(pools) == 0 {
		pools = []string{defaultPool}
	}
	return core.Endpoint{
		ID: s.ID, Owner: core.PlatformOwner, Name: "ready-made model " + s.ID, Type: core.TypeQueue,
		Container: core.Container{Image: s.Image, Env: maps.Clone(s.Env)},
		GPU:       core.GPU{Pools: slices.Clone(pools), Count: 1},
		Workers:   core.Workers{Min: s.WorkersMin, Max: s.WorkersMax, IdleTimeout: s.IdleTimeout},
		Scaling:   core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: s.QueueDelay},
		TimeoutMs: s.TimeoutMs,
		Flashboot: core.FlashbootOff,
	}
}

// Model is the catalog entry users see.
func (s Spec) Model() core.Model {
	t := types[s.Type]
	return core.Model{ID: s.ID, Name: s.Name, Type: s.Type, Description: s.Description,
		Params: slices.Clone(t.params), Output: slices.Clone(t.output), Unit: t.unit, PriceMicros: s.PriceMicros}
}

// CoreCatalog returns the catalog users see of the specs.
func CoreCatalog(specs []Spec) *core.Models {
	ms := make([]core.Model, len(specs))
	for i, s := range specs {
		ms[i] = s.Model()
	}
	return core.NewModels(ms)
}

// typeInfo is what a model type fixes: its input parameters, output fields and billing unit.
type typeInfo struct {
	params []core.Param
	output []core.OutputField
	unit   core.Unit
}

func raw(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// Input bounds of the built-in workers (and of every model of the type).
const (
	MinSide            = 64   // image width and height, pixels
	MaxSide            = 2048 // image width and height, pixels
	SideStep           = 8    // image width and height are multiples of it
	MaxVideoSide       = 512  // clip width and height, pixels
	MaxFrames          = 120
	MaxFPS             = 50
	MaxPromptChars     = 10000
	MaxSpeechChars     = 5000
	MaxTextPromptChars = 100000
	MaxTokens          = 4096
)

var types = map[core.ModelType]typeInfo{
	core.ModelImage: {
		params: []core.Param{
			{Name: "prompt", Type: "string", Required: true, MaxLength: MaxPromptChars, Description: "What to paint; the image's colours and pattern are derived from it."},
			{Name: "width", Type: "integer", Default: raw(512), Min: MinSide, Max: MaxSide, MultipleOf: SideStep, Description: "Width in pixels."},
			{Name: "height", Type: "integer", Default: raw(512), Min: MinSide, Max: MaxSide, MultipleOf: SideStep, Description: "Height in pixels."},
		},
		output: []core.OutputField{
			{Name: "image_url", Type: "string", Description: "The PNG, at a signed URL that expires (GET, no key needed)."},
			{Name: "width", Type: "integer", Description: "Width of the PNG produced, pixels."},
			{Name: "height", Type: "integer", Description: "Height of the PNG produced, pixels."},
			{Name: "content_type", Type: "string", Description: "image/png"},
			{Name: "expires_at", Type: "string", Description: "When image_url stops working (RFC 3339)."},
		},
		unit: core.Unit{ID: "megapixel", Description: "Megapixels of the PNG produced: its width × height, read from the file, ÷ 1,000,000, " +
			"exactly (a 512×512 image is 0.262144). The cost is rounded up to a whole micro-dollar."},
	},
	core.ModelVideo: {
		params: []core.Param{
			{Name: "prompt", Type: "string", Required: true, MaxLength: MaxPromptChars, Description: "What to animate; the frames are derived from it."},
			{Name: "frames", Type: "integer", Default: raw(24), Min: 1, Max: MaxFrames, Description: "Number of frames."},
			{Name: "fps", Type: "integer", Default: raw(12), Min: 1, Max: MaxFPS, Description: "Frames per second asked for; GIF frame delays are whole hundredths of a second, so the clip's real rate may differ."},
			{Name: "width", Type: "integer", Default: raw(256), Min: MinSide, Max: MaxVideoSide, MultipleOf: SideStep, Description: "Width in pixels."},
			{Name: "height", Type: "integer", Default: raw(256), Min: MinSide, Max: MaxVideoSide, MultipleOf: SideStep, Description: "Height in pixels."},
		},
		output: []core.OutputField{
			{Name: "video_url", Type: "string", Description: "The clip, an animated GIF, at a signed URL that expires."},
			{Name: "duration_ms", Type: "integer", Description: "The clip's duration: the sum of its frame delays, milliseconds."},
			{Name: "frames", Type: "integer", Description: "Frames in the clip."},
			{Name: "fps", Type: "number", Description: "The clip's real frame rate."},
			{Name: "width", Type: "integer", Description: "Width, pixels."},
			{Name: "height", Type: "integer", Description: "Height, pixels."},
			{Name: "content_type", Type: "string", Description: "image/gif"},
			{Name: "expires_at", Type: "string", Description: "When video_url stops working (RFC 3339)."},
		},
		unit: core.Unit{ID: "5_seconds", Description: "Started 5-second units of the clip produced: its duration, summed from the GIF's frame " +
			"delays, ÷ 5 s, rounded up (a 2 s clip is 1 unit, a 5.01 s clip 2)."},
	},
	core.ModelSpeech: {
		params: []core.Param{
			{Name: "text", Type: "string", Required: true, MaxLength: MaxSpeechChars, Description: "The text to speak."},
			{Name: "voice", Type: "string", Default: raw("en"), MaxLength: 32, Description: "An espeak-ng voice such as en, en-us, de or fr (`espeak-ng --voices` lists them)."},
			{Name: "speed", Type: "integer", Default: raw(175), Min: 80, Max: 450, Description: "Words per minute."},
		},
		output: []core.OutputField{
			{Name: "audio_url", Type: "string", Description: "The speech, a WAV file, at a signed URL that expires."},
			{Name: "duration_ms", Type: "integer", Description: "Duration of the speech, milliseconds."},
			{Name: "sample_rate", Type: "integer", Description: "Samples per second."},
			{Name: "characters", Type: "integer", Description: "Characters of the text spoken (after trimming surrounding space)."},
			{Name: "content_type", Type: "string", Description: "audio/wav"},
			{Name: "expires_at", Type: "string", Description: "When audio_url stops working (RFC 3339)."},
		},
		unit: core.Unit{ID: "1k_characters", Description: "Started blocks of 1000 characters (Unicode code points) of the input text spoken, " +
			"surrounding space trimmed, rounded up (a 40-character sentence is 1 unit); charged only once the WAV exists."},
	},
	core.ModelText: {
		params: []core.Param{
			{Name: "prompt", Type: "string", Required: true, MaxLength: MaxTextPromptChars, Description: "The prompt."},
			{Name: "max_tokens", Type: "integer", Default: raw(64), Min: 1, Max: MaxTokens, Description: "Tokens to generate."},
			{Name: "token_delay_ms", Type: "integer", Default: raw(0), Min: 0, Max: 1000, Description: "Pause before each token, to watch it stream."},
		},
		output: []core.OutputField{
			{Name: "text", Type: "array of string", Description: "The generated text (one string: the stream's chunks joined)."},
			{Name: "input_tokens", Type: "integer", Description: "Tokens of the prompt."},
			{Name: "output_tokens", Type: "integer", Description: "Tokens generated."},
			{Name: "metrics", Type: "object", Description: "Throughput and token counts (spec 2.9 metrics)."},
		},
		unit: core.Unit{ID: "1m_tokens", Description: "Tokens (whitespace-separated words) of the prompt plus those of the text generated, " +
			"counted by Gantry from the input and the output, ÷ 1,000,000, exactly. The cost is rounded up to a whole micro-dollar."},
	},
}
