package api

import "time"

// SetLBPeekAfter sets how long a proxy connection may sit idle before it is checked for a
// close by the worker; call it before the API serves a request.
func SetLBPeekAfter(a *API, d time.Duration) { a.fwd.peekAfter = d }
