package api_test

import (
	"slices"
	"strings"
	"testing"
)

// TestNamesRefuseControlCharacters: a name (or image, or registry credential id) holding NUL,
// ESC, DEL or a C1 control is refused with 422 naming the field, at create and at update, on
// endpoints (v2 and v1) and templates; nothing is stored.
func TestNamesRefuseControlCharacters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ep := e.create(minimalQueue)
	tpl := e.as(e.alice, "POST", "/v2/templates", `{"name":"t","image":"img:1"}`)
	if tpl.status != 201 {
		t.Fatalf("template create = %d %s", tpl.status, tpl.body)
	}
	tplID := tpl.json(t)["id"].(string)
	const esc = `$.name: holds the control character U+001B at byte 1; names may not hold control characters`
	tests := []struct {
		name, method, path, body string
		err                      string
	}{
		{"endpoint create, ESC", "POST", "/v2/serverless", with(`{"name":"a\u001b[2J"}`), esc},
		{"endpoint create, NUL", "POST", "/v2/serverless", with(`{"name":"ab\u0000"}`),
			"$.name: holds the control character U+0000 at byte 2; names may not hold control characters"},
		{"endpoint create, C1 CSI", "POST", "/v2/serverless", with(`{"name":"\u009b31m"}`),
			"$.name: holds the control character U+009B at byte 0; names may not hold control characters"},
		{"endpoint create, newline", "POST", "/v2/serverless", with(`{"name":"a\nb"}`),
			"$.name: holds the control character U+000A at byte 1; names may not hold control characters"},
		{"endpoint create, image", "POST", "/v2/serverless", with(`{"image":"img\u007f"}`),
			"$.image: holds the control character U+007F at byte 3; names may not hold control characters"},
		{"endpoint update", "PATCH", "/v2/serverless/" + ep, `{"name":"a\u001b]0;pwned\u0007"}`, esc},
		{"endpoint update, registry", "PATCH", "/v2/serverless/" + ep, `{"registry":"c\u001b"}`,
			"$.registry: holds the control character U+001B at byte 1; names may not hold control characters"},
		{"v1 endpoint create", "POST", "/v1/endpoints", `{"name":"a\u001b","templateId":"tpl-pub","gpuTypeIds":["NVIDIA A100 80GB PCIe"]}`, esc},
		{"template create", "POST", "/v2/templates", `{"name":"a\u001b","image":"img:1"}`, esc},
		{"template update", "PATCH", "/v2/templates/" + tplID, `{"name":"a\u001b"}`, esc},
	}
	for _, tc := range tests {
		r := e.as(e.alice, tc.method, tc.path, tc.body)
		if r.status != 422 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") || !slices.Equal(r.errors(t), []string{tc.err}) {
			t.Errorf("%s: %s %s = %d %s %s; want 422 problem+json %q", tc.name, tc.method, tc.body, r.status, r.header.Get("Content-Type"), r.body, tc.err)
		}
	}
	// Nothing was stored: the endpoint and the template keep their names, and alice has one of each.
	if m := e.as(e.alice, "GET", "/v2/serverless/"+ep, "").json(t); m["name"] != "ep" || m["registry"] != nil {
		t.Errorf("endpoint after refused patches: %v", m)
	}
	if m := e.as(e.alice, "GET", "/v2/templates/"+tplID, "").json(t); m["name"] != "t" {
		t.Errorf("template after refused patch: %v", m)
	}
	if items := e.as(e.alice, "GET", "/v2/serverless", "").json(t)["items"].([]any); len(items) != 1 {
		t.Errorf("endpoints = %d; want 1", len(items))
	}
	// Printable Unicode stays allowed.
	if r := e.as(e.alice, "PATCH", "/v2/serverless/"+ep, `{"name":"Ünïcödé ✓ 名前"}`); r.status != 200 {
		t.Errorf("unicode name = %d %s; want 200", r.status, r.body)
	}
}
