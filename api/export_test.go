package api

import "time"

// SetLBPeekAfter sets how long a proxy connection may sit idle before it is checked for a
// close by the worker; call it before the API serves a request.
func SetLBPeekAfter(a *API, d time.Duration) { a.fwd.peekAfter = d }

// ScanLBHead runs the connection loop's scanner of a request head (ending with its empty
// line): whether the loop carries the request, and what it makes of it.
func ScanLBHead(head []byte) (ok bool, method, target, host string, length int64, close bool, fields string) {
	var q lbRequest
	ok = q.scan(head)
	return ok, q.method, q.target, q.host, q.length, q.close, string(q.fields)
}
