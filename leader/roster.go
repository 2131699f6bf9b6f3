package leader

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/internal/startstop"
)

// RosterPrefix begins the name of each replica's presence lease: "replica/<holder>".
const RosterPrefix = "replica/"

// Roster keeps this replica on the list of the live replicas sharing a store, and reads that
// list: the leader hands the workers it starts an address from it, so that their takes and
// results spread over every replica instead of all landing on the leader.
//
// Each replica holds a presence lease of its own, named RosterPrefix+Holder, that publishes
// its Address; it renews the lease every third of the TTL and releases it when it stops. The
// list is the store's unexpired presence leases (core.Leases.Live), read every second, so a
// replica that joins is on it within a second, one that stops leaves it at once, and one that
// dies leaves it within the TTL.
type Roster struct {
	Leases core.Leases
	Holder string // this replica's id, unique among the replicas
	// Address is where workers and the other replicas reach this replica (its peerUrl); ""
	// puts it on no list: no worker is sent here by another replica.
	Address string
	// Local is the URL that stands for this replica's own Address in URLs: where the workers
	// this replica starts reach it (its loopback listener). "" = Address.
	Local string
	TTL   time.Duration // the presence lease's length; 0 = DefaultLeaseTTL
	Log   *slog.Logger  // nil = slog.Default()

	run  startstop.Group
	mu   sync.Mutex
	urls []string // the live replicas' URLs, sorted, Local among them; nil = not read yet
	ver  uint64   // counts changes of urls
}

// URLs returns where the live replicas are reached, sorted, this replica's own (Local) among
// them, and a version that changes whenever the list does. Until the list is first read, or
// if this replica published no Address, its own URL is the whole list.
func (r *Roster) URLs() ([]string, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.urls == nil {
		return []string{r.local()}, 0
	}
	return r.urls, r.ver
}

func (r *Roster) local() string {
	if r.Local != "" {
		return r.Local
	}
	return r.Address
}

// Start keeps this replica on the roster, in a goroutine, until ctx ends or Stop.
func (r *Roster) Start(ctx context.Context) error {
	if _, err := r.run.Begin(ctx); err != nil {
		return err
	}
	r.run.Go(r.keep)
	return nil
}

// Stop takes this replica off the roster (its presence lease is released) and returns when
// that is done.
func (r *Roster) Stop() { r.run.Stop() }

// rosterRead is how often the roster is read: a replica that joins gets workers within it.
const rosterRead = time.Second

func (r *Roster) keep(ctx context.Context) {
	ttl := r.TTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	name := RosterPrefix + r.Holder
	var (
		held    core.Lease
		renewed time.Time // when the presence lease was last renewed; zero = due
	)
	t := time.NewTicker(min(rosterRead, ttl/3))
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, ttl/3)
		if r.Address != "" && time.Since(renewed) >= ttl/3 {
			started := time.Now()
			l, err := r.Leases.Acquire(cctx, name, r.Holder, r.Address, ttl)
			if err == nil {
				held, renewed = l, started
			} else if ctx.Err() == nil {
				log.Warn("renewing this replica's place on the roster; retrying", "err", err)
			}
		}
		live, err := r.Leases.Live(cctx, RosterPrefix)
		cancel()
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Warn("reading the replicas' roster; keeping the last one read", "err", err)
		default:
			r.set(live)
		}
		select {
		case <-ctx.Done():
			if held.Epoch != 0 {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl/3)
				if err := r.Leases.Release(rctx, held); err != nil {
					log.Warn("leaving the replicas' roster", "err", err)
				}
				cancel()
			}
			return
		case <-t.C:
		}
	}
}

// set records the roster read: the replicas' addresses, this one's as Local.
func (r *Roster) set(live []core.Lease) {
	urls := []string{r.local()}
	for _, l := range live {
		if l.Holder != r.Holder && l.Address != "" && !slices.Contains(urls, l.Address) {
			urls = append(urls, l.Address)
		}
	}
	slices.Sort(urls)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.urls == nil || !slices.Equal(r.urls, urls) {
		r.urls = urls
		r.ver++
	}
}
