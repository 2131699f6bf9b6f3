package lbproxy

import "net/http"

// StatusRecorder is an http.ResponseWriter that keeps the status sent, for counting and
// observing answers: the first final (non-1xx) WriteHeader, or 200 at the first Write or
// Flush. Code is 0 while nothing was sent. Unwrap lets http.ResponseController reach the
// connection (deadlines, flushes, the hijack of an upgrade).
type StatusRecorder struct {
	http.ResponseWriter
	Code int
}

// WriteHeader keeps the first final status and sends it.
func (s *StatusRecorder) WriteHeader(code int) {
	if s.Code == 0 && code >= 200 { // 1xx are interim answers
		s.Code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write sends b; a write before any header means 200, as net/http sends.
func (s *StatusRecorder) Write(b []byte) (int, error) {
	if s.Code == 0 {
		s.Code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush sends what is buffered (stream parts), as the connection's writer does.
func (s *StatusRecorder) Flush() {
	if s.Code == 0 {
		s.Code = http.StatusOK
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the ResponseWriter it wraps.
func (s *StatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
