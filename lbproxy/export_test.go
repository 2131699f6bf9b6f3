package lbproxy

import (
	"bufio"
	"bytes"
	"net/http"
	"time"
)

// SetPeekAfter sets how long a worker connection may sit idle before it is checked for a
// close by the worker; call it before p serves a request.
func SetPeekAfter(p *Proxy, d time.Duration) { p.pool.peekAfter = d }

// ScanHead runs the connection loop's scanner of a request head (ending with its empty
// line): whether the loop carries the request, and what it makes of it.
func ScanHead(head []byte) (ok bool, method, target, host string, length int64, close bool, fields string) {
	var q request
	ok = q.scan(head)
	return ok, q.method, q.target, q.host, q.length, q.close, string(q.fields)
}

// RelayAnswer runs the connection loop's reading and relaying of a worker's answer to a
// request (a HEAD when head is set): the bytes the caller would get, or the error that
// would make it a 502 (before the head is relayed) or cut it short (after).
func RelayAnswer(raw []byte, head bool) (out []byte, err error) {
	var a answer
	var ab answerBuf
	br := bufio.NewReader(bytes.NewReader(raw))
	if err := a.readFinal(br, &ab, head); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	c := &callerConn{bw: bufio.NewWriter(&buf), rw: rawResponse{h: http.Header{}}, p: &Proxy{}}
	c.writeAnswerHead(&a, false)
	rerr, werr := relayBody(c.bw, br, &a)
	return buf.Bytes(), cmpErr(rerr, werr)
}
