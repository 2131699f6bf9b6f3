package server

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// configError is a config file problem: the file, the line (0 = unknown), the key path in
// YAML terms (e.g. quota.minute, pools[0].docker.host) and what is wrong.
type configError struct {
	file string
	line int
	path string
	msg  string
}

func (e *configError) Error() string {
	var b strings.Builder
	b.WriteString(e.file)
	if e.line > 0 {
		fmt.Fprintf(&b, ":%d", e.line)
	}
	b.WriteString(": ")
	if e.path != "" {
		b.WriteString(e.path + ": ")
	}
	b.WriteString(e.msg)
	return b.String()
}

// decodeConfig decodes one YAML document into c. Before decoding, it checks every key
// against the fields' yaml names and every scalar against its field's type, so that a
// mistake is reported with the file, the line and the key path rather than a Go type name.
// The lines of the keys it saw are kept in c.lines, for Validate's messages.
func decodeConfig(file string, b []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil // an empty file: the defaults
	} else if err != nil {
		return syntaxError(file, err)
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil {
		return &configError{file: file, line: second.Line, msg: "a second YAML document (after ---); a config file holds one"}
	} else if !errors.Is(err, io.EOF) {
		return syntaxError(file, err)
	}
	w := walker{file: file, lines: map[string]int{}}
	if err := w.check(&doc, reflect.TypeOf(c).Elem(), ""); err != nil {
		return err
	}
	c.lines = w.lines
	if err := doc.Decode(c); err != nil {
		return &configError{file: file, msg: err.Error()} // not expected once check passed
	}
	return nil
}

// syntaxError turns the YAML parser's "yaml: line N: msg" into file:N: msg.
func syntaxError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				return &configError{file: file, line: line, msg: tail}
			}
		}
	}
	return &configError{file: file, msg: msg}
}

// walker checks a YAML node tree against a Go type.
type walker struct {
	file  string
	lines map[string]int // key path -> line of its key
}

func (w *walker) fail(n *yaml.Node, path, format string, args ...any) error {
	return &configError{file: w.file, line: n.Line, path: path, msg: fmt.Sprintf(format, args...)}
}

var (
	durationType    = reflect.TypeOf(time.Duration(0))
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
)

func (w *walker) check(n *yaml.Node, t reflect.Type, path string) error {
	for n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode {
		if n.Kind == yaml.DocumentNode {
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		} else {
			n = n.Alias
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // the default
	}
	switch {
	case reflect.PointerTo(t).Implements(unmarshalerType):
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return w.fail(n, path, "%v", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil
	case t.Kind() == reflect.Struct && t != reflect.TypeOf(time.Time{}):
		if n.Kind != yaml.MappingNode {
			return w.fail(n, path, "want a mapping of %s, not %s", strings.Join(yamlKeys(t), ", "), describe(n))
		}
		return w.mapping(n, t, path)
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return w.fail(n, path, "want a mapping, not %s", describe(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := fmt.Sprintf("%s[%q]", path, k.Value)
			w.lines[p] = k.Line
			if err := w.check(k, t.Key(), p); err != nil {
				return err
			}
			if err := w.check(v, t.Elem(), p); err != nil {
				return err
			}
		}
		return nil
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return w.fail(n, path, "want a list, not %s", describe(n))
		}
		for i, v := range n.Content {
			if err := w.check(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	// A scalar field: decode it alone, so that the error is this key's.
	if n.Kind != yaml.ScalarNode {
		return w.fail(n, path, "want %s, not %s", typeWord(t), describe(n))
	}
	isInt := t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64
	if isInt && t != durationType && n.ShortTag() != "!!int" {
		return w.fail(n, path, "%q is not %s", n.Value, typeWord(t))
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		return w.fail(n, path, "%q is not %s", n.Value, typeWord(t))
	}
	return nil
}

// mapping checks a mapping node against struct type t.
func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string) error {
	fields := map[string]reflect.Type{}
	var known []string
	yamlFields(t, fields, &known)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" { // <<: *anchor
			if err := w.check(v, t, path); err != nil {
				return err
			}
			continue
		}
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		ft, ok := fields[k.Value]
		if !ok {
			return w.fail(k, p, "unknown key (known here: %s)", strings.Join(known, ", "))
		}
		if line, dup := w.lines[p]; dup && line != k.Line {
			return w.fail(k, p, "given twice (first at line %d)", line)
		}
		w.lines[p] = k.Line
		if err := w.check(v, ft, p); err != nil {
			return err
		}
	}
	return nil
}

// yamlFields collects the yaml names of t's fields (inline structs flattened) in
// declaration order.
func yamlFields(t reflect.Type, into map[string]reflect.Type, order *[]string) {
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case !f.IsExported() || name == "-":
		case strings.Contains(opts, "inline"):
			yamlFields(f.Type, into, order)
		default:
			if name == "" {
				name = strings.ToLower(f.Name) // yaml.v3's default
			}
			if _, dup := into[name]; !dup {
				*order = append(*order, name)
			}
			into[name] = f.Type
		}
	}
}

// yamlKeys lists t's yaml keys in declaration order.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	yamlFields(t, map[string]reflect.Type{}, &keys)
	return keys
}

// describe names what a node is, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// typeWord says in words what a scalar type takes.
func typeWord(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration (e.g. 90s, 5m, 1h)"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	}
	return "a " + t.Kind().String()
}

// errAt is a config error at the key path (its line when the file gave it).
func (c *Config) errAt(path, format string, args ...any) error {
	return &configError{file: cmp.Or(c.file, "config"), line: c.lines[path], path: path, msg: fmt.Sprintf(format, args...)}
}

// validateNumbers refuses negative quotas and autoscaler seconds, naming the key.
func (c *Config) validateNumbers() error {
	if q := c.Quota; q != nil {
		for _, w := range []struct {
			key string
			v   int
		}{{"quota.minute", q.Minute}, {"quota.hour", q.Hour}, {"quota.day", q.Day}} {
			if w.v < 0 {
				return c.errAt(w.key, "%d is negative: give a number of requests, or 0 for unlimited", w.v)
			}
		}
	}
	a := c.Autoscaler
	for _, s := range []struct {
		key string
		v   int
	}{{"autoscaler.stableWindow", a.StableWindow}, {"autoscaler.panicWindow", a.PanicWindow},
		{"autoscaler.initTimeout", a.InitTimeout}, {"autoscaler.lbHold", a.LBHold}} {
		if s.v < 0 {
			return c.errAt(s.key, "%d is negative: give seconds, or 0 for the default", s.v)
		}
	}
	return nil
}
