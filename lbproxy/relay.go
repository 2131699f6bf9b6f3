package lbproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// answer is a worker's answer head, as the loop relays it.
type answer struct {
	status     int
	statusLine []byte // "200 OK": the code and reason
	fields     []byte // the header lines the caller gets, each "Name: value\r\n"
	length     int64  // Content-Length, or -1
	chunked    bool
	noBody     bool // an answer to HEAD, 1xx, 204 or 304
	close      bool // the worker closes the connection after it
	hasDate    bool
}

var errMalformedAnswer = errors.New("it sent a malformed answer")

// answerBuf holds an answer head's bytes between answers.
type answerBuf struct{ line, status, fields []byte }

// read reads an answer head from br into a; its bytes live in ab. head says the request was
// a HEAD, whose answer has no body whatever its head says.
func (a *answer) read(br *bufio.Reader, ab *answerBuf, head bool) error {
	*a = answer{length: -1}
	line, _, err := readLine(br, &ab.line, maxAnswerHead)
	if err != nil {
		return err
	}
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return errMalformedAnswer
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 || code > 999 {
		return errMalformedAnswer
	}
	ab.status = append(ab.status[:0], line[9:]...)
	if len(line) == 12 {
		ab.status = append(append(ab.status, ' '), http.StatusText(code)...)
	}
	a.status, a.statusLine = code, ab.status
	http10 := line[7] == '0'
	var conn []byte     // the names the worker's Connection header lists (see appendNames)
	var clText [20]byte // the Content-Length value, as the worker wrote it
	clLen := 0
	fields := ab.fields[:0]
	budget := maxAnswerHead
	for {
		if line, _, err = readLine(br, &ab.line, budget); err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		budget -= len(line)
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isToken(name) || !validValue(value) {
			return errMalformedAnswer // an obs-fold among others
		}
		value = bytes.Trim(value, " \t")
		switch {
		case fold(name, "Content-Length"):
			// Repeated, it must say the same in the same digits, as net/http requires ("2" and
			// "02" are refused there); it is relayed once.
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || value[0] == '+' || len(value) > len(clText) ||
				(a.length >= 0 && !bytes.Equal(value, clText[:clLen])) {
				return errMalformedAnswer
			}
			a.length, clLen = n, copy(clText[:], value)
			continue
		case fold(name, "Transfer-Encoding"):
			if !fold(value, "chunked") {
				return errors.New("it answered with a transfer coding other than chunked")
			}
			a.chunked = true
			continue
		case fold(name, "Connection"):
			conn = appendNames(conn, value)
			continue
		case fold(name, "Trailer"): // kept: the trailers it announces come with a chunked body
		case inList(name, hopByHop):
			continue
		case fold(name, "Date"):
			a.hasDate = true
		}
		fields = append(append(append(append(fields, name...), ": "...), value...), "\r\n"...)
	}
	fields = dropNamed(fields, conn)
	ab.fields, a.fields = fields, fields
	a.close = hasName(conn, "close") || (http10 && !hasName(conn, "keep-alive"))
	if http10 && a.chunked {
		// HTTP/1.0 has no transfer codings: as net/http does, the body runs until the close.
		a.chunked, a.length, a.close = false, -1, true
	}
	if a.chunked && a.length >= 0 {
		a.length, a.close = -1, true // RFC 9112 6.3: the coding wins, and the connection is suspect
	}
	a.noBody = head || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
	return nil
}

// readFinal reads answer heads from br until the final one: 1xx informational answers (103
// Early Hints) are not relayed, and a protocol switch nobody asked for is an error.
func (a *answer) readFinal(br *bufio.Reader, ab *answerBuf, head bool) error {
	for {
		if err := a.read(br, ab, head); err != nil {
			return err
		}
		switch {
		case a.status == http.StatusSwitchingProtocols:
			return errors.New("it switched protocols on a request that asked for no upgrade")
		case a.status >= 200:
			return nil
		}
	}
}

// dropNamed removes from fields ("Name: value\r\n" lines) those whose names are in names
// (from appendNames).
func dropNamed(fields, names []byte) []byte {
	if len(names) == 0 {
		return fields
	}
	out := fields[:0]
	for len(fields) > 0 {
		i := bytes.Index(fields, []byte("\r\n")) + 2
		line := fields[:i]
		fields = fields[i:]
		if name, _, _ := bytes.Cut(line, []byte(":")); !hasName(names, name) {
			out = append(out, line...)
		}
	}
	return out
}

// readLine reads a line from br and returns it without its line ending, and whether that
// was CRLF (not a bare LF). A line that fits br's buffer is returned in place (valid until
// br's next read); a longer one is gathered in *buf, up to limit bytes.
func readLine(br *bufio.Reader, buf *[]byte, limit int) (line []byte, crlf bool, err error) {
	line, err = br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		b := append((*buf)[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(b) > limit {
				return nil, false, errors.New("its answer head is too large")
			}
			line, err = br.ReadSlice('\n')
			b = append(b, line...)
		}
		*buf, line = b, b
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, false, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line, crlf = line[:n-1], true
	}
	return line, crlf, nil
}

// The relays copy an answer's body from the worker (br) to the caller (bw). bw is flushed
// whenever br has nothing more buffered, before a read that may wait: a streamed answer
// reaches the caller as it comes, and an answer that arrived whole leaves in one write. They
// tell a failed read of the worker from a failed write to the caller.

// relayBody relays the body of the answer a and flushes bw.
func relayBody(bw *bufio.Writer, br *bufio.Reader, a *answer) (rerr, werr error) {
	switch {
	case a.noBody:
	case a.chunked:
		rerr, werr = relayChunked(bw, br)
	case a.length >= 0:
		rerr, werr = relayN(bw, br, a.length)
	default:
		rerr, werr = relayUntilEOF(bw, br)
	}
	if rerr == nil && werr == nil {
		werr = bw.Flush()
	}
	return rerr, werr
}

// relayN copies n bytes.
func relayN(bw *bufio.Writer, br *bufio.Reader, n int64) (rerr, werr error) {
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	for n > 0 {
		if br.Buffered() == 0 {
			if werr = bw.Flush(); werr != nil {
				return nil, werr
			}
		}
		k, err := br.Read((*buf)[:min(n, int64(len(*buf)))])
		if k > 0 {
			if _, werr = bw.Write((*buf)[:k]); werr != nil {
				return nil, werr
			}
			n -= int64(k)
		}
		if err != nil && n > 0 {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err, nil
		}
	}
	return nil, nil
}

// relayChunked copies a chunked body, chunk by chunk, and its trailer section.
func relayChunked(bw *bufio.Writer, br *bufio.Reader) (rerr, werr error) {
	var line, scratch []byte
	var crlf bool
	for {
		if br.Buffered() == 0 {
			if werr = bw.Flush(); werr != nil {
				return nil, werr
			}
		}
		// The lines of chunked framing, trailers included, must end with CRLF and hold no
		// other CR: net/http requires it of chunk lines, and a bare LF or CR there is a
		// classic framing ambiguity.
		if line, crlf, rerr = readLine(br, &scratch, 4<<10); rerr != nil || !crlf || bytes.IndexByte(line, '\r') >= 0 {
			return cmpErr(rerr, errMalformedAnswer), nil
		}
		hex, _, _ := bytes.Cut(bytes.TrimRight(line, " \t"), []byte(";")) // extensions are dropped
		size, ok := parseChunkSize(hex)
		if !ok {
			return errMalformedAnswer, nil
		}
		bw.WriteString(strconv.FormatUint(size, 16))
		bw.WriteString("\r\n")
		if size == 0 {
			for { // the trailer section, up to its empty line
				if br.Buffered() == 0 {
					if werr = bw.Flush(); werr != nil {
						return nil, werr
					}
				}
				if line, crlf, rerr = readLine(br, &scratch, maxAnswerHead); rerr != nil || !crlf {
					return cmpErr(rerr, errMalformedAnswer), nil
				}
				if len(line) == 0 {
					bw.WriteString("\r\n")
					return nil, nil
				}
				if name, value, ok := bytes.Cut(line, []byte(":")); !ok || !isToken(name) || !validValue(value) {
					return errMalformedAnswer, nil
				}
				bw.Write(line)
				bw.WriteString("\r\n")
			}
		}
		if rerr, werr = relayN(bw, br, int64(size)); rerr != nil || werr != nil {
			return rerr, werr
		}
		if line, crlf, rerr = readLine(br, &scratch, 0); rerr != nil || len(line) != 0 || !crlf {
			return cmpErr(rerr, errMalformedAnswer), nil
		}
		bw.WriteString("\r\n")
	}
}

// parseChunkSize parses a chunk size as net/http does: 1 to 16 hex digits, nothing else.
func parseChunkSize(hex []byte) (uint64, bool) {
	if len(hex) == 0 || len(hex) > 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(hex), 16, 64)
	return n, err == nil && n <= 1<<62
}

// relayUntilEOF copies a body that ends when the worker closes the connection, chunked, so
// that the caller's connection can carry on.
func relayUntilEOF(bw *bufio.Writer, br *bufio.Reader) (rerr, werr error) {
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	for {
		if br.Buffered() == 0 {
			if werr = bw.Flush(); werr != nil {
				return nil, werr
			}
		}
		k, err := br.Read(*buf)
		if k > 0 {
			bw.WriteString(strconv.FormatInt(int64(k), 16))
			bw.WriteString("\r\n")
			bw.Write((*buf)[:k])
			if _, werr = bw.WriteString("\r\n"); werr != nil {
				return nil, werr
			}
		}
		if errors.Is(err, io.EOF) {
			_, werr = bw.WriteString("0\r\n\r\n")
			return nil, werr
		}
		if err != nil {
			return err, nil
		}
	}
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}
