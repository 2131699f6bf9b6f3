package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/webhook"
)

// Webhook URLs that reach internal addresses, as the SSRF finding found them, are refused
// with a 422 naming the rule (and the setting that allows private networks) on run and
// runsync; with the setting, addresses are accepted, but never a user:password@ URL.
func TestWebhookURLRules(t *testing.T) {
	t.Parallel()
	strict, open := setup(t), setup(t, setupOpts{quota: core.Quota{Minute: 1000}, webhooks: webhook.Policy{AllowPrivate: true}})
	strictEP, openEP := strict.create(minimalQueue), open.create(minimalQueue)
	tests := []struct {
		webhook          string
		strict, allowing string // "" = accepted (200); else a piece of the 422 detail
	}{
		{"https://hooks.example.com/done", "", ""},
		{"http://localhost:9/x", "", ""}, // a host name: the delivery checks the address it dials
		{"http://127.0.0.1:8080/v2/x/run", "a loopback address", ""},
		{"http://[::1]:8080/", "a loopback address", ""},
		{"http://10.1.2.3/", "a private address", ""},
		{"http://169.254.169.254/latest/meta-data/", "a link-local address", ""},
		{"http://0.0.0.0:8080/", "an unspecified address", ""},
		{"http://user:password@hooks.example.com/", "user name or password", "user name or password"},
		{"http://admin@127.0.0.1:8080/", "user name or password", "user name or password"},
		{"gopher://hooks.example.com/", "must be an http or https URL", "must be an http or https URL"},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			e    *env
			ep   string
			want string
		}{{strict, strictEP, tt.strict}, {open, openEP, tt.allowing}} {
			body := `{"input":{"a":1},"webhook":` + strconvQuote(tt.webhook) + `}`
			paths := []string{"/v2/" + c.ep + "/run"}
			if c.want != "" {
				paths = append(paths, "/v2/"+c.ep+"/runsync?wait=1000") // refused before it would wait
			}
			for _, path := range paths {
				r := c.e.doRaw("POST", path, c.e.alice, "application/json", body)
				if c.want == "" {
					if r.status != 200 {
						t.Errorf("POST %s webhook %q = %d %s; want 200", path, tt.webhook, r.status, r.body)
					}
					continue
				}
				var p struct {
					Detail string   `json:"detail"`
					Errors []string `json:"errors"`
				}
				err := json.Unmarshal([]byte(r.body), &p)
				if r.status != 422 || err != nil || r.header.Get("Content-Type") != "application/problem+json" ||
					len(p.Errors) != 1 || !strings.HasPrefix(p.Errors[0], "$.webhook: ") || !strings.Contains(p.Detail, c.want) {
					t.Errorf("POST %s webhook %q = %d %s; want 422 problem+json on $.webhook saying %q", path, tt.webhook, r.status, r.body, c.want)
				}
				if c.e == strict && strings.Contains(c.want, "address") && !strings.Contains(p.Detail, "webhooks.allowPrivate") {
					t.Errorf("POST %s webhook %q = %s; want the detail to name webhooks.allowPrivate", path, tt.webhook, r.body)
				}
			}
		}
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
