package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

// printer writes a command's answer: a table for people, or the API's JSON (or the same as
// YAML) for scripts.
type printer struct {
	w      io.Writer
	format string // "table", "json" or "yaml"
}

func (a *app) printer(format string) (*printer, error) {
	switch format {
	case "table", "json", "yaml", "id":
		return &printer{w: a.stdout, format: format}, nil
	}
	return nil, usagef("-o %q: want table, json, yaml or id", format)
}

// emit writes v (a generated type, which encodes as the API's JSON) as JSON or YAML, or calls
// table with a tab writer for the table.
func (p *printer) emit(v json.Marshaler, rows func(t *table)) error {
	switch p.format {
	case "json", "yaml", "id":
		b, err := v.MarshalJSON()
		if err != nil {
			return err
		}
		return p.raw(b)
	}
	t := &table{tw: tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)}
	rows(t)
	return t.tw.Flush()
}

// raw writes a JSON document in the printer's format: indented JSON, YAML, or its id (of
// each item of a list) alone on a line, for scripts.
func (p *printer) raw(b []byte) error {
	b = jsonControls(b) // what the server stored raw prints escaped
	if p.format == "id" {
		var doc struct {
			ID    string `json:"id"`
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return err
		}
		if doc.ID != "" {
			_, err := fmt.Fprintln(p.w, printable(doc.ID))
			return err
		}
		for _, it := range doc.Items {
			if _, err := fmt.Fprintln(p.w, printable(it.ID)); err != nil {
				return err
			}
		}
		return nil
	}
	if p.format == "yaml" {
		var n yaml.Node
		if err := yaml.Unmarshal(b, &n); err != nil { // JSON is YAML: the order of keys stays
			return err
		}
		blockStyle(&n)
		out, err := yaml.Marshal(&n)
		if err != nil {
			return err
		}
		_, err = p.w.Write(out)
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := p.w.Write(buf.Bytes())
	return err
}

// blockStyle makes the YAML of a JSON document read as YAML: block mappings and sequences,
// strings quoted only where they must be.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = 0
	}
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// table is a table being written: a header row, then rows.
type table struct{ tw *tabwriter.Writer }

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
		cells[i] = printable(strings.NewReplacer("\t", " ", "\n", " ").Replace(cells[i]))
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// when formats a time for a table (UTC, to the second).
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// ms formats milliseconds for a table.
func ms(v int64) string {
	d := time.Duration(v) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// compact is a JSON value on one line, for a table cell, its control characters escaped.
func compact(raw []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return printable(string(raw))
	}
	return string(jsonControls(buf.Bytes()))
}
