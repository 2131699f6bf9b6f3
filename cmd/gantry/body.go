package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// field is a request-body field that a flag sets: path is its place in the body, dotted
// ("gpu.pools"), and kind how the flag's text becomes JSON.
type field struct {
	flag, path string
	kind       kind
	help       string
}

type kind int

const (
	kString kind = iota
	kInt
	kNumber
	kBool
	kList   // repeatable (or comma-separated): a JSON array of strings
	kMap    // repeatable KEY=VALUE: a JSON object of strings
	kMillis // a duration (90s, 5m) or a number of milliseconds: a JSON integer of milliseconds
)

// bodyValue is one field's flag.
type bodyValue struct {
	field
	set bool
	val any
}

func (v *bodyValue) String() string {
	if v == nil || !v.set {
		return ""
	}
	return fmt.Sprint(v.val)
}

func (v *bodyValue) IsBoolFlag() bool { return v.kind == kBool }

func (v *bodyValue) Set(s string) error {
	switch v.kind {
	case kString:
		v.val = s
	case kInt:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("not a whole number")
		}
		v.val = n
	case kNumber:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return errors.New("not a number")
		}
		v.val = f
	case kBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("not true or false")
		}
		v.val = b
	case kList:
		l, _ := v.val.([]any)
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				l = append(l, part)
			}
		}
		v.val = l
	case kMap:
		k, val, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return errors.New("want KEY=VALUE")
		}
		m, _ := v.val.(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		m[k] = val
		v.val = m
	case kMillis:
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			v.val = n
			break
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("want a duration (90s, 5m) or milliseconds")
		}
		v.val = d.Milliseconds()
	}
	v.set = true
	return nil
}

// bodyFlags are the flags of a request body: one per field, and -f FILE for a whole body in
// YAML or JSON, which the flags given override.
type bodyFlags struct {
	vals []*bodyValue
	file string
}

func addBodyFlags(fs *flag.FlagSet, fields []field) *bodyFlags {
	b := &bodyFlags{}
	fs.StringVar(&b.file, "f", "", "read the request body from `FILE`, YAML or JSON (- = stdin); flags override its fields")
	for _, f := range fields {
		v := &bodyValue{field: f}
		b.vals = append(b.vals, v)
		fs.Var(v, f.flag, f.help)
	}
	return b
}

// body returns the body the file and the flags make, as JSON.
func (b *bodyFlags) body(stdin io.Reader, defaults func(m map[string]any)) ([]byte, error) {
	m := map[string]any{}
	if b.file != "" {
		var raw []byte
		var err error
		if b.file == "-" {
			raw, err = io.ReadAll(stdin)
		} else {
			raw, err = os.ReadFile(b.file)
		}
		if err != nil {
			return nil, usagef("-f: %v", err)
		}
		if err := yaml.Unmarshal(raw, &m); err != nil {
			return nil, usagef("-f %s: not a YAML or JSON object: %v", b.file, err)
		}
		if m == nil {
			m = map[string]any{}
		}
	}
	for _, v := range b.vals {
		if v.set {
			setPath(m, v.path, v.val)
		}
	}
	if defaults != nil {
		defaults(m)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, usagef("-f %s: %v", b.file, err)
	}
	return out, nil
}

// setPath sets m's field at a dotted path, making the objects on the way.
func setPath(m map[string]any, path string, val any) {
	head, rest, nested := strings.Cut(path, ".")
	if !nested {
		m[head] = val
		return
	}
	sub, ok := m[head].(map[string]any)
	if !ok {
		sub = map[string]any{}
		m[head] = sub
	}
	setPath(sub, rest, val)
}

// decodeBody decodes the JSON body into the generated request type, whose decoder names a
// missing or unknown field.
func decodeBody(body []byte, into json.Unmarshaler) error {
	if err := into.UnmarshalJSON(body); err != nil {
		return usagef("the request body: %v", err)
	}
	return nil
}

// Fields of the endpoint create and update bodies (CreateEndpointRequest in openapi.yaml).
var endpointFields = []field{
	{"name", "name", kString, "the endpoint's name"},
	{"type", "type", kString, "QUEUE (jobs) or LOAD_BALANCER (HTTP to the workers); create only (default QUEUE)"},
	{"pool", "gpu.pools", kList, "a pool id to run workers in (repeatable, tried in order; see GET /v2/catalog/gpus)"},
	{"gpu-count", "gpu.count", kInt, "GPUs per worker (default 1)"},
	{"scaling", "scaling.type", kString, "QUEUE_DELAY or REQUEST_COUNT (default QUEUE_DELAY with --queue-delay 4)"},
	{"queue-delay", "scaling.queueDelay", kNumber, "QUEUE_DELAY: seconds a job may wait before another worker starts"},
	{"request-count", "scaling.requestCount", kInt, "REQUEST_COUNT: queued jobs per worker"},
	{"template", "templateId", kString, "a template id to take the container from; create only"},
	{"image", "image", kString, "the worker image (required unless --template)"},
	{"args", "args", kString, "the container's arguments"},
	{"disk", "disk", kInt, "container disk, GB"},
	{"port", "ports", kList, "a port to expose, e.g. 8000/http (repeatable)"},
	{"env", "env", kMap, "an environment variable of the workers, KEY=VALUE (repeatable)"},
	{"registry", "registry", kString, "a registry credential id"},
	{"workers-min", "workers.min", kInt, "workers kept running"},
	{"workers-max", "workers.max", kInt, "most workers"},
	{"idle-timeout", "workers.idleTimeout", kInt, "seconds an idle worker stays"},
	{"data-center", "dataCenterIds", kList, "a data center id (repeatable)"},
	{"network-volume", "networkVolumes", kList, "a network volume id (repeatable)"},
	{"timeout", "timeout", kMillis, "a job's execution timeout: a duration (10m) or milliseconds (default 5m)"},
	{"flashboot", "flashboot", kString, "OFF, FLASHBOOT or PRIORITY_FLASHBOOT"},
	{"cuda", "allowedCudaVersions", kList, "an allowed CUDA version, e.g. 12.4 (repeatable)"},
}

// Fields of the template create and update bodies (CreateTemplateRequest).
var templateFields = []field{
	{"name", "name", kString, "the template's name"},
	{"image", "image", kString, "the container image"},
	{"args", "args", kString, "the container's arguments"},
	{"disk", "disk", kInt, "container disk, GB"},
	{"port", "ports", kList, "a port to expose, e.g. 8000/http (repeatable)"},
	{"env", "env", kMap, "an environment variable, KEY=VALUE (repeatable)"},
	{"registry", "registry", kString, "a registry credential id"},
	{"cuda", "allowedCudaVersions", kList, "an allowed CUDA version (repeatable)"},
	{"ssh", "startSsh", kBool, "start SSH in the container"},
	{"jupyter", "startJupyter", kBool, "start Jupyter in the container"},
	{"serverless", "isServerless", kBool, "a template for serverless endpoints"},
}

// without returns fields less the named flags (create-only fields on update).
func without(fields []field, flags ...string) []field {
	var out []field
	for _, f := range fields {
		keep := true
		for _, name := range flags {
			keep = keep && f.flag != name
		}
		if keep {
			out = append(out, f)
		}
	}
	return out
}
