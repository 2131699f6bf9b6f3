package scheduler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantryhq/gantry/core"
)

// This file is how the scheduler learns of an endpoint that another replica created a moment
// ago: a LOAD_BALANCER request can reach the leader before the change does (FollowEndpoints),
// and it waits for the endpoint to be known rather than being answered 503.

// EndpointLearnWait bounds how long Acquire waits to hear of an endpoint it does not know yet
// (a read from the endpoint source, or the change reaching it); the request's hold bounds it
// too.
const EndpointLearnWait = 5 * time.Second

// EndpointGetter is an EndpointSource that also reads one endpoint by id. Acquire reads an
// endpoint it has not heard of yet from the source of the last Run or Lead when it is one.
type EndpointGetter interface {
	GetEndpoint(ctx context.Context, id string) (core.Endpoint, error)
}

// learner is the scheduler's state for learn.
type learner struct {
	src   atomic.Value // sourceBox: the source of the running Run or Lead
	mu    sync.Mutex
	setCh chan struct{} // closed (and replaced) when an endpoint is Set; made by waiters
}

// sourceBox holds an EndpointSource in an atomic.Value (whose stored type must not vary).
type sourceBox struct{ src EndpointSource }

// useSource records where endpoints are read from, for learn.
func (s *Scheduler) useSource(src EndpointSource) { s.learn.src.Store(sourceBox{src}) }

// source returns the endpoint source of the running Run or Lead; nil before either.
func (s *Scheduler) source() EndpointSource {
	b, _ := s.learn.src.Load().(sourceBox)
	return b.src
}

// endpointSet wakes the Acquire calls waiting to hear of an endpoint.
func (s *Scheduler) endpointSet() {
	s.learn.mu.Lock()
	if s.learn.setCh != nil {
		close(s.learn.setCh)
		s.learn.setCh = nil
	}
	s.learn.mu.Unlock()
}

// learnEndpoint returns the state of an endpoint the scheduler has not heard of: read from the
// endpoint source when it reads single endpoints (and added unless the change arrived
// meanwhile), else once the change arrives; nil when the endpoint stays unknown for wait.
func (s *Scheduler) learnEndpoint(ctx context.Context, id string, wait time.Duration) *epState {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if g, ok := s.source().(EndpointGetter); ok {
		ep, err := g.GetEndpoint(ctx, id)
		switch {
		case err == nil:
			s.setIfAbsent(ep)
		case !errors.Is(err, core.ErrNotFound) && ctx.Err() == nil:
			s.cfg.Log.Warn("reading an endpoint the scheduler has not heard of", "endpoint", id, "err", err)
		}
		if es := s.state(id); es != nil {
			return es
		}
	}
	for {
		s.learn.mu.Lock()
		if s.learn.setCh == nil {
			s.learn.setCh = make(chan struct{})
		}
		set := s.learn.setCh
		s.learn.mu.Unlock()
		if es := s.state(id); es != nil {
			return es
		}
		select {
		case <-set:
		case <-ctx.Done():
			return nil
		}
	}
}
