package webhook

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
)

// This file is the webhooks section of the server's config, and the deliverer it builds.

// Config is where job webhooks may go and how many are delivered at once.
type Config struct {
	// AllowPrivate lets webhooks reach loopback, private, link-local and other internal
	// addresses (a laptop, a closed network). Default false: public addresses only.
	AllowPrivate bool `yaml:"allowPrivate"`
	// Workers is how many deliveries are in flight at once; 0 = 16.
	Workers int `yaml:"workers"`
	// Queue is how many deliveries wait for a worker; past it they wait in the store (their
	// jobs stay marked for delivery) and are offered again every tick. 0 = 1024.
	Queue int `yaml:"queue"`

	// self are the addresses this server listens on (set by the server from its listener): webhooks never go there.
	self []netip.AddrPort
}

// ListensOn sets the server's own addresses from its listener's: the address itself, or,
// for an unspecified one (0.0.0.0, ::), every address of this machine's interfaces.
func (w *Config) ListensOn(addr net.Addr) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return
	}
	if !ap.Addr().IsUnspecified() {
		w.self = []netip.AddrPort{ap}
		return
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			w.self = append(w.self, netip.AddrPortFrom(p.Addr(), ap.Port()))
		}
	}
}

// Validate checks the webhooks section.
func (w Config) Validate() error {
	if w.Workers < 0 || w.Queue < 0 {
		return fmt.Errorf("webhooks: workers %d and queue %d may not be negative", w.Workers, w.Queue)
	}
	return nil
}

// Policy is where the API accepts webhook URLs to and deliveries connect.
func (w Config) Policy() Policy {
	return Policy{AllowPrivate: w.AllowPrivate, Self: w.self}
}

// New returns the webhook deliverer; Start it, and Stop it before the store closes.
func (w Config) New(log *slog.Logger) *Deliverer {
	if w.AllowPrivate {
		log.Warn("webhooks may reach private networks (webhooks.allowPrivate)")
	}
	return &Deliverer{Policy: w.Policy(), Workers: w.Workers, Queue: w.Queue, Log: log}
}
