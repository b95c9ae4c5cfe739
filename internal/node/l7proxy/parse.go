package l7proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The lean engine's HTTP/1.1 parsing: strict where a lenient reading
// could let a request past the proxy that the member reads differently
// (request smuggling), and otherwise narrow: a request it does not
// recognise as plain HTTP/1.1 is given to the net/http engine, which
// answers it as it always did.

// maxHead bounds a request's head (request line and headers), as the
// net/http server's default MaxHeaderBytes does (1 MiB, with its 4 KiB
// of slack); a larger one is answered 431.
const maxHead = 1<<20 + 4096

// maxResponseHead bounds a member's answer's head.
const maxResponseHead = 1 << 20

// verdict is what the lean engine does with a request it parsed.
type verdict int

const (
	// serve: the lean engine takes it.
	serve verdict = iota
	// fallback: the net/http engine takes the connection, from this
	// request on.
	fallback
	// refuse: answered with the status of the head and closed.
	refuse
)

// field is one header line of a head: strings into the head's text.
type field struct {
	name, value string
	// hop: read by the parser (framing, connection, Host); the engine
	// writes what it means itself.
	hop bool
}

// reqHead is a parsed request head.
type reqHead struct {
	method, uri string
	// minor is the HTTP/1.x version's minor number.
	minor   int
	host    string
	headers []field
	// length is the body's Content-Length, -1 when it has none (no body,
	// or chunked).
	length  int64
	chunked bool
	// close: the client asked to close the connection after the answer
	// (Connection: close, or HTTP/1.0 without keep-alive).
	close bool
	// expect: Expect: 100-continue.
	expect bool
	// te: a TE header that names trailers (passed on as "Te: trailers").
	te bool
	// dropped are the headers the Connection header names: hop-by-hop,
	// not passed on.
	dropped []string
	// zero: a Content-Length of 0 was sent (passed on as such).
	zero bool
	// status is the answer to a refused request.
	status int
}

func (h *reqHead) reset() {
	*h = reqHead{headers: h.headers[:0], dropped: h.dropped[:0], length: -1}
}

// hasBody reports whether the request has a body to relay.
func (h *reqHead) hasBody() bool { return h.chunked || h.length > 0 }

// hopByHop are the headers a proxy does not pass on, in either
// direction (those httputil.ReverseProxy removes).
func hopByHop(name string) bool {
	switch len(name) {
	case 2:
		return strings.EqualFold(name, "Te")
	case 7:
		return strings.EqualFold(name, "Trailer") || strings.EqualFold(name, "Upgrade")
	case 10:
		return strings.EqualFold(name, "Connection") || strings.EqualFold(name, "Keep-Alive")
	case 16:
		return strings.EqualFold(name, "Proxy-Connection")
	case 17:
		return strings.EqualFold(name, "Transfer-Encoding")
	case 18:
		return strings.EqualFold(name, "Proxy-Authenticate")
	case 19:
		return strings.EqualFold(name, "Proxy-Authorization")
	}
	return false
}

// parseRequest parses a request head: its text up to and including the
// empty line, every line ending in CRLF (readHead makes sure of it).
func parseRequest(s string, h *reqHead) verdict {
	h.reset()
	line, rest, ok := strings.Cut(s, "\r\n")
	if !ok {
		return fallback
	}
	method, line, ok1 := strings.Cut(line, " ")
	uri, proto, ok2 := strings.Cut(line, " ")
	if !ok1 || !ok2 || method == "" || !isToken(method) || !plainURI(uri) {
		return fallback
	}
	switch proto {
	case "HTTP/1.1":
		h.minor = 1
	case "HTTP/1.0":
		h.minor = 0
	default:
		return fallback
	}
	h.method, h.uri = method, uri
	hosts, lengths, encodings := 0, 0, 0
	keepAlive := false
	for {
		var name, value string
		var more bool
		if name, value, rest, more, ok = cutField(rest); !ok || more && !validValue(value) {
			// Folded lines, spaces before the colon, a name that is no
			// token: net/http's to judge.
			return fallback
		}
		if !more {
			break
		}
		h.headers = append(h.headers, field{name: name, value: value, hop: true})
		switch {
		case strings.EqualFold(name, "Host"):
			hosts++
			if !plainHost(value) {
				return fallback
			}
			h.host = value
			continue
		case strings.EqualFold(name, "Content-Length"):
			n, ok := contentLength(value)
			if !ok || lengths > 0 && n != h.length {
				return h.refuse(http.StatusBadRequest)
			}
			h.length = n
			lengths++
			continue
		case strings.EqualFold(name, "Transfer-Encoding"):
			encodings++
			if !strings.EqualFold(value, "chunked") {
				return h.refuse(http.StatusNotImplemented)
			}
			continue
		case strings.EqualFold(name, "Connection"):
			var upgrade bool
			h.dropped, upgrade = connectionTokens(value, h.dropped, &h.close, &keepAlive)
			if upgrade {
				// A protocol switch (WebSocket): net/http's.
				return fallback
			}
			continue
		case strings.EqualFold(name, "Expect"):
			if !strings.EqualFold(value, "100-continue") {
				return fallback
			}
			h.expect = true
			continue
		case strings.EqualFold(name, "Te"):
			for tok := range strings.SplitSeq(value, ",") {
				if strings.EqualFold(strings.Trim(tok, " \t"), "trailers") {
					h.te = true
				}
			}
			continue
		}
		h.headers[len(h.headers)-1].hop = hopByHop(name)
	}
	if rest != "" {
		return fallback
	}
	switch {
	case encodings > 1:
		return h.refuse(http.StatusNotImplemented)
	case encodings == 1 && (lengths > 0 || h.minor == 0):
		// Both framings, or chunked in HTTP/1.0: which one the member
		// believes is the smuggler's bet. Refused.
		return h.refuse(http.StatusBadRequest)
	case encodings == 1:
		h.chunked = true
		h.length = -1
	}
	if hosts > 1 || hosts == 0 && h.minor == 1 {
		return fallback
	}
	if h.minor == 0 && !keepAlive {
		h.close = true
	}
	if h.length == 0 {
		h.length = -1
		// Kept for the member: a POST of nothing says so.
		h.zero = lengths > 0
	}
	if h.expect && !h.hasBody() {
		h.expect = false
	}
	return serve
}

// connectionTokens reads a Connection header's value: close and
// keep-alive set *closeConn and *keepAlive; every other token names a
// hop-by-hop header and is appended to dropped; upgrade reports whether
// one of them was "upgrade" (a protocol switch).
func connectionTokens(value string, dropped []string, closeConn, keepAlive *bool) (_ []string, upgrade bool) {
	for tok := range strings.SplitSeq(value, ",") {
		tok = strings.Trim(tok, " \t")
		switch {
		case tok == "":
		case strings.EqualFold(tok, "close"):
			*closeConn = true
		case strings.EqualFold(tok, "keep-alive"):
			*keepAlive = true
		default:
			upgrade = upgrade || strings.EqualFold(tok, "upgrade")
			dropped = append(dropped, tok)
		}
	}
	return dropped, upgrade
}

// cutField cuts a head's next header line off rest: its name and value
// (the value trimmed of spaces and tabs), or more false at the empty line
// that ends the head; ok false when the line is no "token: value" line
// ending in CRLF.
func cutField(rest string) (name, value, after string, more, ok bool) {
	line, after, ok := strings.Cut(rest, "\r\n")
	if !ok || line == "" {
		return "", "", after, false, ok
	}
	colon := strings.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		return "", "", after, false, false
	}
	return line[:colon], strings.Trim(line[colon+1:], " \t"), after, true, true
}

func (h *reqHead) refuse(status int) verdict {
	h.status = status
	return refuse
}

// dropsHeader reports whether the Connection header named name.
func (h *reqHead) dropsHeader(name string) bool {
	for _, d := range h.dropped {
		if strings.EqualFold(d, name) {
			return true
		}
	}
	return false
}

// contentLength parses a Content-Length value: digits only.
func contentLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return s != ""
}

// validValue: no control character but a tab in a header's value.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// pathChars are the bytes a path may hold that net/url leaves as the
// client sent them (with "%XX" escapes): such a path reaches the member
// unchanged by either engine.
var pathChars = func() (t [256]bool) {
	for c := range 256 {
		t[c] = tokenChars[c]
	}
	for _, c := range "!$&'()*+,;=:@[]/" {
		t[c] = true
	}
	for _, c := range "#^`|" {
		t[c] = false
	}
	return t
}()

// plainURI reports whether a request's target is a path (with a query)
// the lean engine passes on as it is: origin form, no fragment, only
// visible ASCII.
func plainURI(u string) bool {
	if u == "" || u[0] != '/' || strings.HasPrefix(u, "//") {
		return false
	}
	path, query, _ := strings.Cut(u, "?")
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' {
			if i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2]) {
				return false
			}
			i += 2
			continue
		}
		if !pathChars[c] {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// plainHost: a host name or address with its port, nothing net/http
// would question.
func plainHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("-._~:[]", c) >= 0) {
			return false
		}
	}
	return true
}

var (
	errHeadTooLarge = errors.New("head too large")
	errBareLF       = errors.New("a line ends without CR")
	errBadChunk     = errors.New("malformed chunked body")
	errBadResponse  = errors.New("malformed answer")
)

// readHead reads a head from br into buf (reused): lines up to and
// including the empty one. A line ending in a bare LF, which net/http
// tolerates, is errBareLF: what was read is in buf.
func readHead(br *bufio.Reader, buf []byte, limit int) ([]byte, error) {
	buf = buf[:0]
	start := 0
	for {
		line, err := br.ReadSlice('\n')
		buf = append(buf, line...)
		if len(buf) > limit {
			return buf, errHeadTooLarge
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return buf, err
		}
		l := buf[start:]
		if len(l) < 2 || l[len(l)-2] != '\r' {
			return buf, errBareLF
		}
		if len(l) == 2 {
			if start == 0 {
				// An empty line before the request line.
				return buf, errBareLF
			}
			return buf, nil
		}
		start = len(buf)
	}
}

// respHead is a parsed answer head from a member.
type respHead struct {
	status int
	// reason is the status line's text after the code.
	reason  string
	minor   int
	headers []field
	length  int64
	chunked bool
	// close: the member closes the connection after this answer.
	close   bool
	dropped []string
}

func (h *respHead) reset() {
	*h = respHead{headers: h.headers[:0], dropped: h.dropped[:0], length: -1}
}

// parseResponse parses a member's answer head.
func parseResponse(s string, h *respHead) error {
	h.reset()
	line, rest, ok := strings.Cut(s, "\r\n")
	if !ok {
		return errBadResponse
	}
	switch {
	case strings.HasPrefix(line, "HTTP/1.1 "):
		h.minor = 1
	case strings.HasPrefix(line, "HTTP/1.0 "):
	default:
		return errBadResponse
	}
	code, reason, _ := strings.Cut(line[len("HTTP/1.x "):], " ")
	if len(code) != 3 {
		return errBadResponse
	}
	n, err := strconv.Atoi(code)
	if err != nil || n < 100 {
		return errBadResponse
	}
	h.status, h.reason = n, reason
	lengths, keepAlive := 0, false
	for {
		var name, value string
		var more bool
		if name, value, rest, more, ok = cutField(rest); !ok {
			return errBadResponse
		}
		if !more {
			break
		}
		switch {
		case strings.EqualFold(name, "Content-Length"):
			n, ok := contentLength(value)
			if !ok || lengths > 0 && n != h.length {
				return errBadResponse
			}
			h.length = n
			lengths++
			continue
		case strings.EqualFold(name, "Transfer-Encoding"):
			if !strings.EqualFold(value, "chunked") || h.chunked {
				return errBadResponse
			}
			h.chunked = true
			continue
		case strings.EqualFold(name, "Connection"):
			h.dropped, _ = connectionTokens(value, h.dropped, &h.close, &keepAlive)
			continue
		}
		if hopByHop(name) && !strings.EqualFold(name, "Trailer") {
			continue
		}
		h.headers = append(h.headers, field{name: name, value: value})
	}
	if h.chunked {
		// Chunked wins over a length, and such a connection is not
		// trusted with another request.
		if lengths > 0 {
			h.close = true
		}
		h.length = -1
	}
	if h.minor == 0 && !keepAlive {
		h.close = true
	}
	return nil
}

// bodyless reports whether an answer of status to method has no body.
func bodyless(method string, status int) bool {
	return method == http.MethodHead || status < 200 || status == http.StatusNoContent || status == http.StatusNotModified
}

// relayChunked copies a chunked body from src: as chunked to dst when
// rechunk, else its data only (dst nil: discarded). It returns the
// data's bytes; a malformed body is errBadChunk. Trailers are passed on
// when rechunk.
func relayChunked(dst *bufio.Writer, src *bufio.Reader, rechunk bool, flush bool) (int64, error) {
	var total int64
	for {
		line, err := src.ReadSlice('\n')
		if err != nil {
			if err == bufio.ErrBufferFull {
				return total, errBadChunk
			}
			return total, err
		}
		size, ok := chunkSize(line)
		if !ok {
			return total, errBadChunk
		}
		if rechunk && dst != nil {
			if _, err := dst.Write(line); err != nil {
				return total, err
			}
		}
		if size == 0 {
			for {
				t, err := src.ReadSlice('\n')
				if err != nil {
					if err == bufio.ErrBufferFull {
						return total, errBadChunk
					}
					return total, err
				}
				if len(t) < 2 || t[len(t)-2] != '\r' {
					return total, errBadChunk
				}
				if rechunk && dst != nil {
					if _, err := dst.Write(t); err != nil {
						return total, err
					}
				}
				if len(t) == 2 {
					return total, nil
				}
			}
		}
		if err := copyN(dst, src, size, flush); err != nil {
			return total, err
		}
		total += size
		crlf, err := src.Peek(2)
		if err != nil {
			return total, err
		}
		if crlf[0] != '\r' || crlf[1] != '\n' {
			return total, errBadChunk
		}
		if rechunk && dst != nil {
			if _, err := dst.Write(crlf); err != nil {
				return total, err
			}
		}
		src.Discard(2)
	}
}

// chunkSize parses a chunk's size line ("1a;ext\r\n").
func chunkSize(line []byte) (int64, bool) {
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, false
	}
	line = line[:len(line)-2]
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		if !validValue(string(line[i+1:])) {
			return 0, false
		}
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

// copyN copies n bytes from src to dst (nil: discards them) through
// src's own buffer; with flush, what dst holds is flushed before src is
// waited for.
func copyN(dst *bufio.Writer, src *bufio.Reader, n int64, flush bool) error {
	for n > 0 {
		if src.Buffered() == 0 {
			if flush && dst != nil && dst.Buffered() > 0 {
				if err := dst.Flush(); err != nil {
					return err
				}
			}
			if _, err := src.Peek(1); err != nil {
				if err == io.EOF {
					return io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := int64(src.Buffered())
		if k > n {
			k = n
		}
		b, _ := src.Peek(int(k))
		if dst != nil {
			if _, err := dst.Write(b); err != nil {
				return err
			}
		}
		src.Discard(int(k))
		n -= k
	}
	return nil
}
