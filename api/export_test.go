package api

import (
	"bufio"
	"bytes"
	"net/http"
	"time"
)

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

// RelayLBAnswer runs the connection loop's reading and relaying of a worker's answer to a
// request (a HEAD when head is set): the bytes the caller would get, or the error that
// would make it a 502 (before the head is relayed) or cut it short (after).
func RelayLBAnswer(raw []byte, head bool) (out []byte, err error) {
	var a answer
	var ab answerBuf
	br := bufio.NewReader(bytes.NewReader(raw))
	if err := a.readFinal(br, &ab, head); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	c := &lbConn{bw: bufio.NewWriter(&buf), rw: rawResponse{h: http.Header{}}, a: &API{}}
	c.writeAnswerHead(&a, false)
	rerr, werr := relayBody(c.bw, br, &a)
	return buf.Bytes(), cmpErr(rerr, werr)
}
