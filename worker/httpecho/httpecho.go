// Package httpecho is gantry/http-echo, the built-in worker of LOAD_BALANCER endpoints, for
// tests and docs: an HTTP server on HOST:PORT that echoes requests, streams, sinks large
// bodies, sleeps, fails on demand and echoes WebSocket messages, with its health on
// PORT_HEALTH at HEALTH_CHECK_PATH. It listens on HOST only (the process pool sets it to
// 127.0.0.1: it answers anyone who reaches it, without a key), on every interface when HOST is
// unset (in a pod or container of its own).
package httpecho

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// Config is what the worker reads from its environment.
type Config struct {
	Host       string        // HOST, the address to listen on; default "" = every interface
	Port       string        // PORT; default 80
	HealthPort string        // PORT_HEALTH; default Port
	HealthPath string        // HEALTH_CHECK_PATH; default /ping
	InitDelay  time.Duration // HTTPECHO_INIT_MS: health answers 204 (initializing) this long
	WorkerID   string        // RUNPOD_POD_ID, echoed back so callers see which worker answered
	Log        *slog.Logger
}

// ConfigFromEnv reads the Config from the environment.
func ConfigFromEnv() (Config, error) {
	c := Config{Host: os.Getenv("HOST"), Port: cmp.Or(os.Getenv("PORT"), "80"), HealthPath: cmp.Or(os.Getenv("HEALTH_CHECK_PATH"), "/ping"),
		WorkerID: os.Getenv("RUNPOD_POD_ID")}
	c.HealthPort = cmp.Or(os.Getenv("PORT_HEALTH"), c.Port)
	if v := os.Getenv("HTTPECHO_INIT_MS"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return c, fmt.Errorf("HTTPECHO_INIT_MS=%q: want milliseconds", v)
		}
		c.InitDelay = time.Duration(ms) * time.Millisecond
	}
	return c, nil
}

// Server is a running http-echo worker.
type Server struct {
	cfg     Config
	started time.Time
	health  atomic.Int32 // the code health answers once initialized; 0 = 200
	count   atomic.Int64 // requests served
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	s := &Server{cfg: cfg, started: time.Now()}
	main := &http.Server{Addr: net.JoinHostPort(cfg.Host, cfg.Port), Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	servers := []*http.Server{main}
	if cfg.HealthPort != cfg.Port {
		mux := http.NewServeMux()
		mux.HandleFunc(cfg.HealthPath, s.serveHealth)
		servers = append(servers, &http.Server{Addr: net.JoinHostPort(cfg.Host, cfg.HealthPort), Handler: mux, ReadHeaderTimeout: 10 * time.Second})
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			return err
		}
		cfg.Log.Info("http-echo listening", "addr", ln.Addr().String())
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(shutdown)
	}
	return nil
}

// Handler serves every route of the worker on one port (health included).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(s.cfg.HealthPath, s.serveHealth)
	mux.HandleFunc("/_control/health", s.serveSetHealth)
	mux.HandleFunc("/ws", serveWebSocket)
	mux.HandleFunc("/stream", serveStream)
	mux.HandleFunc("/sink", serveSink)
	mux.HandleFunc("/sleep", serveSleep)
	mux.HandleFunc("/status/{code}", serveStatus)
	mux.HandleFunc("/", s.serveEcho)
	return mux
}

// serveHealth answers 204 while initializing, then 200 (or the code /_control/health set).
func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if time.Since(s.started) < s.cfg.InitDelay {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(cmp.Or(int(s.health.Load()), http.StatusOK))
}

// serveSetHealth sets what health answers: POST /_control/health?code=503.
func (s *Server) serveSetHealth(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.URL.Query().Get("code"))
	if r.Method != http.MethodPost || err != nil || code < 100 || code > 599 {
		http.Error(w, "POST /_control/health?code=NNN", http.StatusBadRequest)
		return
	}
	s.health.Store(int32(code))
	w.WriteHeader(http.StatusNoContent)
}

// serveEcho answers what it got: method, path, query, headers and body (up to 1 MB).
func (s *Server) serveEcho(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Worker-Id", s.cfg.WorkerID)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"worker": s.cfg.WorkerID, "method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery,
		"headers": r.Header, "body": string(body), "n": s.count.Add(1),
	})
}

// serveStream writes ?bytes=N bytes (default 1 MB) in 64 KB chunks, flushing each.
func serveStream(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(cmp.Or(r.URL.Query().Get("bytes"), "1048576"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, "?bytes=N", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = byte('a' + i%26)
	}
	rc := http.NewResponseController(w)
	for n > 0 {
		k := min(n, int64(len(chunk)))
		if _, err := w.Write(chunk[:k]); err != nil {
			return
		}
		_ = rc.Flush()
		n -= k
	}
}

// serveSink reads the whole body without keeping it and answers its size and SHA-256.
func serveSink(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"bytes": n, "sha256": hex.EncodeToString(h.Sum(nil))})
}

// serveSleep answers after ?ms=N milliseconds (or when the client goes away).
func serveSleep(w http.ResponseWriter, r *http.Request) {
	ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"slept_ms":%d}`+"\n", ms)
}

// serveStatus answers with the status in the path: /status/503.
func serveStatus(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.PathValue("code"))
	if err != nil || code < 200 || code > 599 {
		http.Error(w, "/status/NNN", http.StatusBadRequest)
		return
	}
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "status %d from the worker\n", code)
}

// errNotWebSocket is what a plain request to /ws gets.
var errNotWebSocket = errors.New("/ws wants a WebSocket upgrade")
