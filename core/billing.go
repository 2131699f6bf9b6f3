package core

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ready-made models (spec 1, 4.4): the catalog users see, what a model job costs, and the usage
// ledger. The models package supplies the catalog and measures outputs; core applies the charge
// exactly once, when a model job completes, and answers usage reports.

// ModelType is the kind of a ready-made model. It fixes the model's input, its output and the
// unit it is billed in (spec 1).
type ModelType string

// Model types.
const (
	ModelImage  ModelType = "IMAGE_GENERATION" // billed per megapixel of output
	ModelVideo  ModelType = "VIDEO_GENERATION" // billed per 5 seconds of output
	ModelSpeech ModelType = "TEXT_TO_SPEECH"   // billed per 1000 characters spoken
	ModelText   ModelType = "TEXT_GENERATION"  // billed per 1M tokens
)

// Param is one input parameter of a model. Integer bounds apply to "integer" parameters;
// MaxLength (characters) to "string" ones.
type Param struct {
	Name        string
	Type        string // "string", "integer" or "boolean"
	Required    bool
	Default     json.RawMessage // nil = none
	Min, Max    int64           // integers: bounds, both inclusive; Max 0 = unbounded
	MultipleOf  int64           // integers: 0 = any
	MaxLength   int             // strings: 0 = unbounded
	Description string
}

// OutputField describes one field of a model's output.
type OutputField struct {
	Name, Type, Description string
}

// Unit is a billing unit.
type Unit struct {
	ID          string // "megapixel", "5_seconds", "1k_characters", "1m_tokens"
	Description string // what is measured and how it is rounded
}

// Model is a ready-made model as users see it in the catalog: `POST /v2/{ID}/run` runs it on a
// platform endpoint of the same id.
type Model struct {
	ID          string
	Name        string
	Type        ModelType
	Description string
	Params      []Param
	Output      []OutputField
	Unit        Unit
	PriceMicros int64 // price of one Unit, in millionths of a US dollar
}

// CheckInput checks a job's input against the model's parameters: known names, types, bounds.
// The failures are reported together, as `$.input.<name>: <message>`.
func (m *Model) CheckInput(input []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(input, &fields); err != nil {
		return Invalid(FieldError{"$.input", "must be a JSON object"})
	}
	var errs []FieldError
	add := func(name, format string, args ...any) {
		errs = append(errs, FieldError{"$.input." + name, fmt.Sprintf(format, args...)})
	}
	known := map[string]bool{}
	for _, p := range m.Params {
		known[p.Name] = true
		raw, ok := fields[p.Name]
		if !ok || string(raw) == "null" {
			if p.Required {
				add(p.Name, "is required")
			}
			continue
		}
		switch p.Type {
		case "string":
			var s string
			if json.Unmarshal(raw, &s) != nil {
				add(p.Name, "must be a string")
			} else if n := len([]rune(s)); p.MaxLength > 0 && n > p.MaxLength {
				add(p.Name, "must have at most %d characters (got %d)", p.MaxLength, n)
			} else if p.Required && strings.TrimSpace(s) == "" {
				add(p.Name, "must not be empty")
			}
		case "integer":
			n, err := strconv.ParseInt(string(raw), 10, 64)
			switch {
			case err != nil:
				add(p.Name, "must be an integer")
			case n < p.Min:
				add(p.Name, "must be at least %d (got %d)", p.Min, n)
			case p.Max != 0 && n > p.Max:
				add(p.Name, "must be at most %d (got %d)", p.Max, n)
			case p.MultipleOf > 0 && n%p.MultipleOf != 0:
				add(p.Name, "must be a multiple of %d (got %d)", p.MultipleOf, n)
			}
		case "boolean":
			if string(raw) != "true" && string(raw) != "false" {
				add(p.Name, "must be true or false")
			}
		}
	}
	for name := range fields {
		if !known[name] {
			add(name, "unknown parameter of model %s (see GET /v2/models)", m.ID)
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b FieldError) int { return strings.Compare(a.Path, b.Path) })
		return Invalid(errs...)
	}
	return nil
}

// Models is the catalog of ready-made models, in the order given.
type Models struct {
	list []Model
	byID map[string]int
}

// NewModels returns a catalog of the given models.
func NewModels(list []Model) *Models {
	m := &Models{list: list, byID: map[string]int{}}
	for i, x := range list {
		m.byID[x.ID] = i
	}
	return m
}

// List returns every model.
func (m *Models) List() []Model {
	if m == nil {
		return nil
	}
	return m.list
}

// Get returns the model with the id.
func (m *Models) Get(id string) (Model, bool) {
	if m == nil {
		return Model{}, false
	}
	i, ok := m.byID[id]
	if !ok {
		return Model{}, false
	}
	return m.list[i], true
}

// Charge is what one model job costs: how much it produced (Quantity of Measure), the billing
// units that makes (in millionths of a unit), the unit price and the cost. Money is in
// millionths of a US dollar ("micros"); nothing here is a float.
type Charge struct {
	Model       string `json:"model"`
	Unit        string `json:"unit"`
	Measure     string `json:"measure"`  // "pixels", "milliseconds", "characters" or "tokens"
	Quantity    int64  `json:"quantity"` // of Measure, as produced
	UnitsMicros int64  `json:"unitsMicros"`
	PriceMicros int64  `json:"priceMicros"` // per unit
	CostMicros  int64  `json:"costMicros"`
}

// CostMicros prices unitsMicros millionths of a unit at priceMicros per unit: the exact
// product, rounded up to a whole micro-dollar. It saturates rather than overflow.
func CostMicros(unitsMicros, priceMicros int64) int64 {
	if unitsMicros <= 0 || priceMicros <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(unitsMicros), uint64(priceMicros))
	if hi >= 1e6 {
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, 1e6)
	if r > 0 {
		q++
	}
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}

// FormatMicros renders millionths as a decimal: 2517 -> "0.002517", 3000000 -> "3". Trailing
// zeros are dropped.
func FormatMicros(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	s := strconv.FormatInt(n/1e6, 10)
	if frac := n % 1e6; frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
	}
	return sign + s
}

// Usage is one entry of the usage ledger: the charge of one completed model job.
type Usage struct {
	Charge
	JobID string    `json:"jobId"`
	Owner string    `json:"owner"`
	At    time.Time `json:"at"` // when the job completed
}

// UsageStore keeps the usage ledger: at most one record per job. A call whose ctx is done
// returns an error that wraps ctx.Err() and, if it writes, writes nothing.
type UsageStore interface {
	// AddUsage stores u unless a record of u.JobID exists, and returns the record kept (u, or
	// the earlier one) and whether u was added. The record is durable when AddUsage returns.
	AddUsage(ctx context.Context, u Usage) (kept Usage, added bool, err error)
	// ScanUsage calls fn with the owner's records whose At is in [from, to) (zero times:
	// unbounded), ordered by At then JobID, until fn returns false.
	ScanUsage(ctx context.Context, owner string, from, to time.Time, fn func(Usage) bool) error
}

// MeterJob is what a Meter measures: a job that is completing, with its input and final output.
type MeterJob struct {
	ID       string
	Endpoint string
	Input    json.RawMessage
	Output   json.RawMessage
}

// Meter prices the output of the jobs of metered endpoints (the ready-made models').
type Meter interface {
	// Metered reports whether the endpoint's jobs are charged.
	Metered(endpoint string) bool
	// Measure prices what a job produced, from the output itself (the files it names are read
	// and measured), never from what the input asked for. An error means the output cannot be
	// measured: the job fails and nothing is charged.
	Measure(ctx context.Context, j MeterJob) (Charge, error)
}

// UsageFilter selects usage records: by model (""= all), completion time in [From, To) (zero:
// unbounded), and a page after Cursor of at most Limit records.
type UsageFilter struct {
	Model    string
	From, To time.Time
	Cursor   string
	Limit    int
}

// UsageTotal sums a model's records in a report.
type UsageTotal struct {
	Model       string
	Unit        string
	Jobs        int64
	UnitsMicros int64
	CostMicros  int64
}

// UsageReport is a page of a user's usage records with the totals of every record the filter
// selects (not only the page's).
type UsageReport struct {
	Items      []Usage
	Totals     []UsageTotal // one per model, in catalog order
	CostMicros int64        // sum of the totals
	NextCursor string       // "" = last page
}

// MaxUsagePage bounds UsageFilter.Limit.
const MaxUsagePage = 1000

// UsageQuery is a usage request's parameters as given: the bounds are RFC 3339 date-times or
// dates (see ParseUsageTime); "" = unbounded.
type UsageQuery struct {
	Model, From, To, Cursor string
	Limit                   int
}

// Query parses and checks a usage request, reporting every bad parameter at once, and
// answers it with Report. The filter it applied comes back with the report.
func (b *Billing) Query(ctx context.Context, owner string, q UsageQuery) (UsageReport, UsageFilter, error) {
	f := UsageFilter{Model: q.Model, Cursor: q.Cursor, Limit: q.Limit}
	from, ferr := ParseUsageTime("query.from", q.From, false)
	to, terr := ParseUsageTime("query.to", q.To, true)
	f.From, f.To = from, to
	if err := b.check(f); ferr != nil || terr != nil || err != nil {
		var fields []FieldError
		for _, e := range []error{ferr, terr, err} {
			if ce, ok := e.(*Error); ok {
				fields = append(fields, ce.Fields...)
			}
		}
		if ferr != nil || terr != nil { // the range check compared zero times: drop it
			fields = slices.DeleteFunc(fields, func(f FieldError) bool { return f.Message == "must be after from" })
		}
		return UsageReport{}, f, Invalid(fields...)
	}
	rep, err := b.Report(ctx, owner, f)
	return rep, f, err
}

// usageCursor is a decoded report cursor: the last record handed out.
type usageCursor struct {
	at time.Time
	id string
}

func parseUsageCursor(c string) (usageCursor, bool) {
	ns, id, ok := strings.Cut(c, "_")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return usageCursor{}, false
	}
	return usageCursor{time.Unix(0, n).UTC(), id}, true
}

// check validates a filter: a known model, from before to, a cursor a report returned.
func (b *Billing) check(f UsageFilter) error {
	var errs []FieldError
	if f.Model != "" {
		if _, ok := b.Models.Get(f.Model); !ok {
			ids := []string{}
			for _, m := range b.Models.List() {
				ids = append(ids, m.ID)
			}
			errs = append(errs, FieldError{"query.model", fmt.Sprintf("unknown model %q (models: %s)", f.Model, strings.Join(ids, ", "))})
		}
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		errs = append(errs, FieldError{"query.to", "must be after from"})
	}
	if _, ok := parseUsageCursor(f.Cursor); f.Cursor != "" && !ok {
		errs = append(errs, FieldError{"query.cursor", fmt.Sprintf("%q is not a cursor this report returned", f.Cursor)})
	}
	if len(errs) > 0 {
		return Invalid(errs...)
	}
	return nil
}

// Billing answers usage reports.
type Billing struct {
	Usage  UsageStore
	Models *Models
}

// Report returns a page of the user's usage and the totals of everything the filter selects.
func (b *Billing) Report(ctx context.Context, owner string, f UsageFilter) (UsageReport, error) {
	if err := b.check(f); err != nil {
		return UsageReport{}, err
	}
	after, _ := parseUsageCursor(f.Cursor)
	if f.Limit <= 0 || f.Limit > MaxUsagePage {
		f.Limit = MaxUsagePage
	}
	rep := UsageReport{Items: []Usage{}}
	totals := map[string]*UsageTotal{}
	err := b.Usage.ScanUsage(ctx, owner, f.From, f.To, func(u Usage) bool {
		if f.Model != "" && u.Model != f.Model {
			return true
		}
		t := totals[u.Model]
		if t == nil {
			t = &UsageTotal{Model: u.Model, Unit: u.Unit}
			totals[u.Model] = t
		}
		t.Jobs++
		t.UnitsMicros += u.UnitsMicros
		t.CostMicros += u.CostMicros
		rep.CostMicros += u.CostMicros
		if f.Cursor != "" && (u.At.Before(after.at) || u.At.Equal(after.at) && u.JobID <= after.id) {
			return true
		}
		switch {
		case len(rep.Items) < f.Limit:
			rep.Items = append(rep.Items, u)
		case rep.NextCursor == "":
			last := rep.Items[len(rep.Items)-1]
			rep.NextCursor = strconv.FormatInt(last.At.UnixNano(), 10) + "_" + last.JobID
		}
		return true
	})
	if err != nil {
		return UsageReport{}, Internal("reading usage", err)
	}
	for _, m := range b.Models.List() {
		if t, ok := totals[m.ID]; ok {
			rep.Totals = append(rep.Totals, *t)
			delete(totals, m.ID)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(totals)) { // models since removed from the catalog
		rep.Totals = append(rep.Totals, *totals[id])
	}
	return rep, nil
}

// ParseUsageTime reads a usage filter bound: an RFC 3339 date-time, or a date (YYYY-MM-DD,
// UTC). A date as the upper bound means the end of that day, so from=2026-11-01&to=2026-11-30
// covers all of November. param names the parameter in errors ("query.from").
func ParseUsageTime(param, s string, upper bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if upper {
			d = d.AddDate(0, 0, 1)
		}
		return d, nil
	}
	return time.Time{}, Invalid(FieldError{param, fmt.Sprintf("%q is neither an RFC 3339 date-time (2026-11-21T10:00:00Z) nor a date (2026-11-21)", s)})
}
