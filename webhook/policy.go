package webhook

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/gantryhq/gantry/core"
)

// This file is the policy: where webhooks may go, checked at submission and at every connection.

// AllowPrivateSetting names the setting that lets webhooks reach private networks, as
// the errors that refuse them say it.
const AllowPrivateSetting = "webhooks.allowPrivate: true in the config file, or gantry serve --webhook-allow-private"

// Policy is where webhooks may go. By default only public addresses: loopback,
// private, link-local (cloud metadata 169.254.169.254 included), shared (CGNAT), unspecified
// and multicast addresses are refused, at submission for an address written in the URL and
// at every connection for the address a host name resolved to.
type Policy struct {
	// AllowPrivate lets webhooks reach every address (a laptop, a closed network).
	AllowPrivate bool
	// Self are the addresses Gantry itself listens on: refused even with AllowPrivate, so
	// that a webhook cannot call Gantry's own API.
	Self []netip.AddrPort
}

// addrRange is a block of addresses webhooks do not reach by default, with the rule's name.
type addrRange struct {
	prefix netip.Prefix
	rule   string
}

// forbiddenRanges are the blocks netip's predicates do not cover by themselves.
var forbiddenRanges = []addrRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (\"this network\") address (0.0.0.0/8)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address (100.64.0.0/10)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address (192.0.0.0/24)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (198.18.0.0/15)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address (240.0.0.0/4)"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address (64:ff9b::/96), which reaches IPv4 addresses"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local NAT64 address (64:ff9b:1::/48)"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address (2002::/16), which reaches IPv4 addresses"},
}

// ForbiddenAddr returns the rule that keeps webhooks from ip by default ("a loopback address
// (127.0.0.0/8, ::1)"), or "" when ip is public. An IPv4-mapped IPv6 address is judged as its
// IPv4 address.
func ForbiddenAddr(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	switch {
	case !ip.IsValid():
		return "not an IP address"
	case ip.IsLoopback():
		return "a loopback address (127.0.0.0/8, ::1)"
	case ip.IsUnspecified():
		return "an unspecified address (0.0.0.0, ::)"
	case ip.IsPrivate():
		return "a private address (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7)"
	case ip.IsLinkLocalUnicast():
		return "a link-local address (169.254.0.0/16 with cloud metadata 169.254.169.254, fe80::/10)"
	case ip.IsMulticast():
		return "a multicast address"
	case ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	}
	for _, r := range forbiddenRanges {
		if r.prefix.Contains(ip) {
			return r.rule
		}
	}
	return ""
}

// CheckAddr returns an error naming the rule when the policy keeps webhooks from ip.
func (p Policy) CheckAddr(ip netip.Addr) error {
	if p.AllowPrivate {
		return nil
	}
	if rule := ForbiddenAddr(ip); rule != "" {
		return fmt.Errorf("%s is %s; webhooks go only to public addresses unless private networks are allowed (%s)",
			ip.Unmap().WithZone(""), rule, AllowPrivateSetting)
	}
	return nil
}

// CheckAddrPort returns an error naming the rule when the policy keeps webhooks from ap:
// Gantry's own address, or an address CheckAddr refuses.
func (p Policy) CheckAddrPort(ap netip.AddrPort) error {
	ip := ap.Addr().Unmap().WithZone("")
	for _, s := range p.Self {
		if s.Port() == ap.Port() && s.Addr().Unmap().WithZone("") == ip {
			return fmt.Errorf("%s is Gantry's own address; webhooks may not call Gantry itself", netip.AddrPortFrom(ip, ap.Port()))
		}
	}
	return p.CheckAddr(ip)
}

// CheckURL validates a job's webhook URL at submission: an http or https URL with a host,
// no user name or password, and no literal IP address the policy refuses. A host name is
// checked when a delivery connects (the address it resolves to then), so DNS cannot pass a
// name that resolves to a refused address. The error is KindInvalid, on $.webhook.
func (p Policy) CheckURL(raw string) error {
	invalid := func(format string, args ...any) error {
		return core.Invalid(core.FieldError{Path: "$.webhook", Message: fmt.Sprintf(format, args...)})
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return invalid("must be an http or https URL")
	}
	if u.User != nil {
		return invalid("must not carry a user name or password (user:password@); put a secret in the path or query instead")
	}
	host := u.Hostname()
	if host == "" {
		return invalid("must name a host")
	}
	if ip, err := netip.ParseAddr(strings.TrimSuffix(host, ".")); err == nil {
		port, err := strconv.ParseUint(u.Port(), 10, 16)
		if u.Port() == "" {
			port, err = map[string]uint64{"http": 80, "https": 443}[u.Scheme], nil
		}
		if err != nil {
			return invalid("has a bad port %q", u.Port())
		}
		if err := p.CheckAddrPort(netip.AddrPortFrom(ip, uint16(port))); err != nil {
			return invalid("%v", err)
		}
	}
	return nil
}
