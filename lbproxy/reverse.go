package lbproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"
)

// target is where the general proxy sends a request: the worker, and the path after
// /lb/{id}, decoded and as sent.
type target struct {
	Target
	path, raw  string
	hasRawPath bool
}

type targetKey struct{}

// newReverse is the general proxy, for the requests the loop does not carry: bodies stream
// both ways (nothing is held whole), WebSocket and other upgrades pass through, streamed
// responses (unknown length, event streams) are flushed as they come, and a failed request
// is never retried: the worker's error, or the proxy's 502, goes back as is.
func (p *Proxy) newReverse() *httputil.ReverseProxy {
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       30 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0, // a worker may think as long as it likes
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(*target)
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", t.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = t.path, ""
			if t.hasRawPath {
				pr.Out.URL.RawPath = t.raw
			}
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")                                 // the caller's key is Gantry's business, not the worker's
			pr.Out.Header.Del(ForwardedHeader)                                 // a mark between replicas
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"] // SetXForwarded appends to it
			pr.SetXForwarded()
			if pr.Out.Body == nil || pr.Out.Body == http.NoBody {
				// net/http resends a bodiless GET whose reused connection broke after it was
				// written, so a worker could get it twice: an empty body it cannot rewind
				// makes the request non-replayable (net/http still sends no body for it).
				pr.Out.Body, pr.Out.GetBody = io.NopCloser(strings.NewReader("")), nil
			}
		},
		Transport: transport,
		// FlushInterval 0: ReverseProxy flushes at once anyway for responses of unknown length
		// and text/event-stream, so streams stream; a fixed-length answer is written once.
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the caller went away
			}
			t := r.Context().Value(targetKey{}).(*target)
			p.adm.Refuse(r.Context(), w, r, &WorkerError{Endpoint: t.Endpoint, Err: err})
		},
	}
}

// serveReverse admits r and sends it through the general proxy.
func (p *Proxy) serveReverse(w http.ResponseWriter, r *http.Request) {
	var endpoint string // observed, once known
	id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, Prefix), "/")
	start := time.Now()
	if p.obs != nil {
		rec := &StatusRecorder{ResponseWriter: w}
		w = rec
		defer func() {
			p.observe(endpoint, relayedStatus(rec, r), start)
		}()
	}
	ctx := p.adm.WithWriter(r.Context(), w)
	admitted, release, err := p.adm.Admit(ctx, id, r.Header.Get("Authorization"))
	endpoint = admitted.Endpoint
	if err != nil {
		p.adm.Refuse(r.Context(), w, r, err)
		return
	}
	defer release()
	t := &target{Target: admitted}
	prefix := Prefix + id
	t.path = orRoot(strings.TrimPrefix(r.URL.Path, prefix))
	if r.URL.RawPath != "" {
		t.raw, t.hasRawPath = orRoot(strings.TrimPrefix(r.URL.RawPath, prefix)), true
	}
	p.reverse.ServeHTTP(w, r.WithContext(context.WithValue(ctx, targetKey{}, t)))
}

// orRoot is p, or "/" when p is empty.
func orRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// bufferPool recycles the general proxy's copy buffers; the loop's relays share them.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// relayedStatus is the status r's caller got through rec: 101 for an upgrade relayed on the
// hijacked connection, 0 when nothing was sent (the caller went away).
func relayedStatus(rec *StatusRecorder, r *http.Request) int {
	if rec.Code == 0 && r.Header.Get("Upgrade") != "" {
		return http.StatusSwitchingProtocols
	}
	return rec.Code
}
