package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsHandler serves reg as Prometheus text (GET and HEAD /metrics). A failure to gather
// is logged as an error and the families gathered are still served. A client that hangs up
// before the end (curl /metrics | head) is no server error: the writes that then fail, one per
// metric family left, are logged once, at debug.
func metricsHandler(reg prometheus.Gatherer, log *slog.Logger) http.Handler {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: metricsErrorLog{log}, ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &hangupWriter{ResponseWriter: w}
		h.ServeHTTP(hw, r)
		if hw.err != nil {
			log.Debug("the /metrics client left before the end of the answer", "remote", r.RemoteAddr, "err", hw.err.err)
		}
	})
}

// errHungUp marks the write errors of a /metrics answer: the client is gone.
type errHungUp struct{ err error }

func (e *errHungUp) Error() string { return "the client hung up: " + e.err.Error() }
func (e *errHungUp) Unwrap() error { return e.err }

// hangupWriter is the http.ResponseWriter of one /metrics answer: after a write fails, every
// later write fails at once with the same *errHungUp, which metricsErrorLog does not log.
type hangupWriter struct {
	http.ResponseWriter
	err *errHungUp
}

func (w *hangupWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.err = &errHungUp{err}
		return n, w.err
	}
	return n, nil
}

// Unwrap is for http.ResponseController.
func (w *hangupWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// metricsErrorLog is promhttp's error log: an error, except a write to a client that hung up.
type metricsErrorLog struct{ log *slog.Logger }

// Println implements promhttp.Logger.
func (l metricsErrorLog) Println(v ...any) {
	for _, a := range v {
		var hung *errHungUp
		if err, ok := a.(error); ok && errors.As(err, &hung) {
			return
		}
	}
	l.log.Error(strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}
