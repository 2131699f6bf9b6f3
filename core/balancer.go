package core

import (
	"context"
	"net/url"
	"time"
)

// Balancer hands the requests of LOAD_BALANCER endpoints to their workers; the scheduler
// implements it.
type Balancer interface {
	// Acquire returns the base URL of a ready worker of the endpoint, the one with the fewest
	// requests in flight, and the release to call when the request ends. With no ready worker
	// it starts one and waits up to hold, then fails with KindUnavailable.
	Acquire(ctx context.Context, endpoint string, hold time.Duration) (base *url.URL, release func(), err error)
}
