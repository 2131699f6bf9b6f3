package webhook_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/webhook"
)

// The webhook URLs of the SSRF finding, as they were found: refused by default, each naming
// its rule (and, for addresses, the setting that allows them); accepted with the setting,
// except what no setting allows.
func TestWebhookPolicyCheckURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url         string
		defaultRule string // "" = accepted by default; else a piece of the 422 message
		privateRule string // with AllowPrivate
	}{
		{"https://hooks.example.com/done?k=1", "", ""},
		{"http://93.184.216.34:8080/x", "", ""},
		{"http://[2606:4700::1111]/x", "", ""},
		{"http://localhost:8080/x", "", ""}, // a host name: checked on the address dialled
		{"http://127.0.0.1:8080/v2/ep/run", "a loopback address", ""},
		{"http://127.1.2.3/", "a loopback address", ""},
		{"http://[::1]:9000/", "a loopback address", ""},
		{"http://[::ffff:127.0.0.1]/", "a loopback address", ""},
		{"http://10.0.0.5/", "a private address", ""},
		{"http://172.16.1.1/", "a private address", ""},
		{"http://192.168.1.1/", "a private address", ""},
		{"http://[fd00::1]/", "a private address", ""},
		{"http://169.254.169.254/latest/meta-data/", "link-local", ""},
		{"http://[fe80::1%25eth0]/", "link-local", ""},
		{"http://0.0.0.0:8080/", "unspecified", ""},
		{"http://[::]/", "unspecified", ""},
		{"http://100.64.0.1/", "carrier-grade NAT", ""},
		{"http://224.0.0.1/", "multicast", ""},
		{"http://[64:ff9b::7f00:1]/", "NAT64", ""},
		{"http://user:password@hooks.example.com/", "user name or password", "user name or password"},
		{"http://user@127.0.0.1/", "user name or password", "user name or password"},
		{"ftp://hooks.example.com/", "http or https", "http or https"},
		{"file:///etc/passwd", "http or https", "http or https"},
		{"http:opaque", "http or https", "http or https"},
		{"hooks.example.com/x", "http or https", "http or https"},
	}
	for _, tt := range tests {
		for _, p := range []webhook.Policy{{}, {AllowPrivate: true}} {
			want := tt.defaultRule
			if p.AllowPrivate {
				want = tt.privateRule
			}
			err := p.CheckURL(tt.url)
			if want == "" {
				if err != nil {
					t.Errorf("%+v.CheckURL(%q) = %v; want nil", p, tt.url, err)
				}
				continue
			}
			var ce *core.Error
			if !errors.As(err, &ce) || ce.Kind != core.KindInvalid || len(ce.Fields) != 1 || ce.Fields[0].Path != "$.webhook" ||
				!strings.Contains(ce.Fields[0].Message, want) {
				t.Errorf("%+v.CheckURL(%q) = %v; want a KindInvalid $.webhook error saying %q", p, tt.url, err, want)
				continue
			}
			if tt.privateRule == "" && !strings.Contains(ce.Fields[0].Message, "--webhook-allow-private") {
				t.Errorf("%+v.CheckURL(%q) = %v; want it to name the setting that allows it", p, tt.url, err)
			}
		}
	}
}

// Gantry's own address is refused even where private networks are allowed; another port of
// the same host is not.
func TestWebhookPolicyRefusesSelf(t *testing.T) {
	t.Parallel()
	p := webhook.Policy{AllowPrivate: true, Self: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080"), netip.MustParseAddrPort("192.168.1.5:80")}}
	for _, tt := range []struct {
		url     string
		refused bool
	}{
		{"http://127.0.0.1:8080/v2/ep/run", true},
		{"http://[::ffff:127.0.0.1]:8080/", true},
		{"http://192.168.1.5/", true},
		{"https://192.168.1.5/", false},
		{"http://127.0.0.1:8081/", false},
		{"http://localhost:8080/", false}, // a host name: refused when the delivery dials it
		{"http://127.0.0.1:99999/", true},
	} {
		if err := p.CheckURL(tt.url); (err != nil) != tt.refused {
			t.Errorf("CheckURL(%q) = %v; want refused %v", tt.url, err, tt.refused)
		}
	}
	if err := p.CheckAddrPort(netip.MustParseAddrPort("127.0.0.1:8080")); err == nil || !strings.Contains(err.Error(), "Gantry's own address") {
		t.Errorf("CheckAddrPort(127.0.0.1:8080) = %v; want Gantry's own address refused", err)
	}
}

func TestForbiddenAddr(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ip        string
		forbidden bool
	}{
		{"8.8.8.8", false}, {"2001:4860:4860::8888", false}, {"100.128.0.1", false},
		{"127.0.0.1", true}, {"::1", true}, {"::ffff:10.1.2.3", true}, {"169.254.169.254", true},
		{"fe80::1", true}, {"fc00::1", true}, {"0.0.0.0", true}, {"0.1.2.3", true}, {"::", true},
		{"100.100.100.200", true}, {"255.255.255.255", true}, {"ff02::1", true}, {"198.18.0.1", true},
		{"2002:7f00:1::", true},
	} {
		if got := webhook.ForbiddenAddr(netip.MustParseAddr(tt.ip)) != ""; got != tt.forbidden {
			t.Errorf("ForbiddenAddr(%s) = %q; want forbidden %v", tt.ip, webhook.ForbiddenAddr(netip.MustParseAddr(tt.ip)), tt.forbidden)
		}
	}
}
