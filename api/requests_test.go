package api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gantryhq/gantry/lbproxy"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRequestsCountByOperationAndStatus(t *testing.T) {
	t.Parallel()
	q := newRequests()
	for _, c := range []struct {
		op   string
		code int
	}{{"runJob", 200}, {"runJob", 200}, {"runJob", 401}, {"", 404}} {
		q.count(c.op, c.code)
	}
	for _, c := range []struct {
		op, code string
		want     float64
	}{{"runJob", "200", 2}, {"runJob", "401", 1}, {"none", "404", 1}} {
		if got := testutil.ToFloat64(q.vec.WithLabelValues(c.op, c.code)); got != c.want {
			t.Errorf("requests{operation=%q,status=%q} = %v; want %v", c.op, c.code, got, c.want)
		}
	}
}

func TestStatusRecorder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		do   func(w http.ResponseWriter)
		want int
	}{
		{"nothing written", func(http.ResponseWriter) {}, 200},
		{"a body", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200},
		{"a status", func(w http.ResponseWriter) { w.WriteHeader(422) }, 422},
		{"an interim answer first", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(201) }, 201},
		{"a flush", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, 200},
	} {
		rec := &lbproxy.StatusRecorder{ResponseWriter: httptest.NewRecorder()}
		c.do(rec)
		if got := answeredStatus(rec); got != c.want {
			t.Errorf("%s: status() = %d; want %d", c.name, got, c.want)
		}
	}
}

// BenchmarkRequestCount is what counting costs a request: the recorder and the counter.
func BenchmarkRequestCount(b *testing.B) {
	q := newRequests()
	w := httptest.NewRecorder()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := &lbproxy.StatusRecorder{ResponseWriter: w}
			rec.Code = 200
			q.count("runJob", answeredStatus(rec))
		}
	})
}
