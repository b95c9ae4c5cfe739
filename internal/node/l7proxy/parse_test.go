package l7proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		want       verdict
		status     int
		check      func(*reqHead) bool
	}{
		{name: "plain GET", head: "GET /a/b?c=d&e HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n", want: serve,
			check: func(h *reqHead) bool {
				return h.method == "GET" && h.uri == "/a/b?c=d&e" && h.host == "example" && h.minor == 1 && !h.close && !h.hasBody()
			}},
		{name: "length", head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return h.length == 12 && !h.chunked && h.hasBody() }},
		{name: "the same length twice", head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return h.length == 3 }},
		{name: "length 0", head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return !h.hasBody() && h.zero }},
		{name: "chunked", head: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return h.chunked && h.length == -1 && h.hasBody() }},
		{name: "length and chunked", head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", want: refuse, status: 400},
		{name: "chunked and length", head: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", want: refuse, status: 400},
		{name: "two different lengths", head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n", want: refuse, status: 400},
		{name: "a signed length", head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +4\r\n\r\n", want: refuse, status: 400},
		{name: "a list of lengths", head: "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4, 4\r\n\r\n", want: refuse, status: 400},
		{name: "gzip", head: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", want: refuse, status: 501},
		{name: "chunked twice", head: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", want: refuse, status: 501},
		{name: "chunked in HTTP/1.0", head: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", want: refuse, status: 400},
		{name: "HTTP/1.0", head: "GET / HTTP/1.0\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return h.minor == 0 && h.close && h.host == "" }},
		{name: "HTTP/1.0 kept alive", head: "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return !h.close }},
		{name: "close", head: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return h.close && h.dropsHeader("x-secret") }},
		{name: "hop-by-hop", head: "GET / HTTP/1.1\r\nHost: x\r\nKeep-Alive: 5\r\nProxy-Authorization: a\r\nUpgrade: h2c\r\nTE: trailers, deflate\r\nX-A: 1\r\n\r\n", want: serve,
			check: func(h *reqHead) bool {
				var passed []string
				for _, f := range h.headers {
					if !f.hop {
						passed = append(passed, f.name)
					}
				}
				return h.te && strings.Join(passed, ",") == "X-A"
			}},
		{name: "expect", head: "PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return h.expect }},
		{name: "expect without a body", head: "GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", want: serve,
			check: func(h *reqHead) bool { return !h.expect }},
		{name: "another expectation", head: "GET / HTTP/1.1\r\nHost: x\r\nExpect: later\r\n\r\n", want: fallback},
		{name: "upgrade", head: "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", want: fallback},
		{name: "absolute form", head: "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", want: fallback},
		{name: "asterisk", head: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", want: fallback},
		{name: "CONNECT", head: "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", want: fallback},
		{name: "double slash", head: "GET //x/y HTTP/1.1\r\nHost: x\r\n\r\n", want: fallback},
		{name: "fragment", head: "GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", want: fallback},
		{name: "bad escape", head: "GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", want: fallback},
		{name: "non-ASCII path", head: "GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", want: fallback},
		{name: "escapes and sub-delims", head: "GET /a%20b/!$&'()*+,;=:@[] HTTP/1.1\r\nHost: x\r\n\r\n", want: serve},
		{name: "HTTP/2", head: "PRI * HTTP/2.0\r\n\r\n", want: fallback},
		{name: "no Host", head: "GET / HTTP/1.1\r\n\r\n", want: fallback},
		{name: "two Hosts", head: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", want: fallback},
		{name: "odd Host", head: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", want: fallback},
		{name: "folded line", head: "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", want: fallback},
		{name: "space before colon", head: "GET / HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n", want: fallback},
		{name: "control in a value", head: "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\x002\r\n\r\n", want: fallback},
		{name: "lower-case method", head: "get / HTTP/1.1\r\nHost: x\r\n\r\n", want: serve},
		{name: "two spaces", head: "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", want: fallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h reqHead
			got := parseRequest(tc.head, &h)
			if got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
			if tc.want == refuse && h.status != tc.status {
				t.Errorf("status %d, want %d", h.status, tc.status)
			}
			if tc.check != nil && !tc.check(&h) {
				t.Errorf("parsed %+v", h)
			}
		})
	}
}

func TestReadHead(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		limit    int
		want     string
		err      error
	}{
		{name: "one head", in: "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next", limit: 100, want: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "bare LF", in: "GET / HTTP/1.1\nHost: x\n\n", limit: 100, err: errBareLF},
		{name: "empty first line", in: "\r\nGET / HTTP/1.1\r\n\r\n", limit: 100, err: errBareLF},
		{name: "too large", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 200) + "\r\n\r\n", limit: 100, err: errHeadTooLarge},
		{name: "a line longer than the buffer", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n", limit: 10000,
			want: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n"},
		{name: "cut short", in: "GET / HTTP/1.1\r\nHost: x\r\n", limit: 100, err: io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readHead(bufio.NewReaderSize(strings.NewReader(tc.in), 16), nil, tc.limit)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if tc.err == nil && string(got) != tc.want {
				t.Errorf("head %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRelayChunked(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		rechunk   bool
		want      string
		n         int64
		err       error
		remaining string
	}{
		{name: "passed on", in: "3\r\nabc\r\n1;ext=1\r\nd\r\n0\r\nX-T: 1\r\n\r\nNEXT", rechunk: true,
			want: "3\r\nabc\r\n1;ext=1\r\nd\r\n0\r\nX-T: 1\r\n\r\n", n: 4, remaining: "NEXT"},
		{name: "unchunked", in: "A\r\n0123456789\r\n0\r\n\r\n", want: "0123456789", n: 10},
		{name: "size with spaces after it", in: "3  \r\nabc\r\n0\r\n\r\n", want: "abc", n: 3},
		{name: "not hex", in: "g\r\nabc\r\n0\r\n\r\n", err: errBadChunk},
		{name: "negative", in: "-3\r\nabc\r\n0\r\n\r\n", err: errBadChunk},
		{name: "no size", in: "\r\nabc\r\n0\r\n\r\n", err: errBadChunk},
		{name: "too large", in: "1000000000000000\r\n", err: errBadChunk},
		{name: "bare LF after the size", in: "3\nabc\r\n0\r\n\r\n", err: errBadChunk},
		{name: "data longer than its size", in: "3\r\nabcd\r\n0\r\n\r\n", want: "abc", n: 3, err: errBadChunk},
		{name: "cut short", in: "3\r\nab", err: io.ErrUnexpectedEOF},
		{name: "control in an extension", in: "3;\x01\r\nabc\r\n0\r\n\r\n", err: errBadChunk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := bufio.NewWriter(&out)
			src := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
			n, err := relayChunked(w, src, tc.rechunk, false)
			w.Flush()
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if tc.err == nil {
				rest, _ := io.ReadAll(src)
				if out.String() != tc.want || n != tc.n || string(rest) != tc.remaining {
					t.Errorf("relayed %q (%d bytes), left %q; want %q (%d), %q", out.String(), n, rest, tc.want, tc.n, tc.remaining)
				}
			}
		})
	}
}

func TestParseResponse(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		err        bool
		check      func(*respHead) bool
	}{
		{name: "length", head: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n",
			check: func(h *respHead) bool {
				return h.status == 200 && h.reason == "OK" && h.length == 5 && !h.close && len(h.headers) == 1
			}},
		{name: "chunked", head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n",
			check: func(h *respHead) bool {
				return h.chunked && h.length == -1 && len(h.headers) == 1 && h.headers[0].name == "Trailer"
			}},
		{name: "chunked and length", head: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
			check: func(h *respHead) bool { return h.chunked && h.length == -1 && h.close }},
		{name: "until closed", head: "HTTP/1.1 200 OK\r\n\r\n", check: func(h *respHead) bool { return h.length == -1 && !h.chunked }},
		{name: "HTTP/1.0", head: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", check: func(h *respHead) bool { return h.close }},
		{name: "HTTP/1.0 kept alive", head: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
			check: func(h *respHead) bool { return !h.close && len(h.headers) == 0 }},
		{name: "close", head: "HTTP/1.1 204 No Content\r\nConnection: close, X-B\r\nX-B: 1\r\n\r\n",
			check: func(h *respHead) bool { return h.close && h.status == 204 && dropped(h.dropped, "x-b") }},
		{name: "no reason", head: "HTTP/1.1 299\r\n\r\n", check: func(h *respHead) bool { return h.status == 299 && h.reason == "" }},
		{name: "hop-by-hop", head: "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nUpgrade: x\r\nProxy-Authenticate: y\r\n\r\n",
			check: func(h *respHead) bool { return len(h.headers) == 0 }},
		{name: "two lengths", head: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", err: true},
		{name: "gzip", head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: true},
		{name: "HTTP/2", head: "HTTP/2 200 OK\r\n\r\n", err: true},
		{name: "short code", head: "HTTP/1.1 20 OK\r\n\r\n", err: true},
		{name: "bad name", head: "HTTP/1.1 200 OK\r\nX A: 1\r\n\r\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h respHead
			err := parseResponse(tc.head, &h)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want one: %v", err, tc.err)
			}
			if tc.check != nil && !tc.check(&h) {
				t.Errorf("parsed %+v", h)
			}
		})
	}
}

func TestBodyless(t *testing.T) {
	for _, tc := range []struct {
		method string
		status int
		want   bool
	}{{"GET", 200, false}, {"HEAD", 200, true}, {"GET", 204, true}, {"GET", 304, true}, {"GET", 103, true}, {"POST", 404, false}} {
		if got := bodyless(tc.method, tc.status); got != tc.want {
			t.Errorf("bodyless(%s, %d) = %v", tc.method, tc.status, got)
		}
	}
}

// FuzzParseRequest: whatever a client sends, the lean parser does not
// fail, and a request it serves is one net/http reads the same way:
// method, target, host, body framing and closing; one it refuses
// net/http refuses too, or it names a Transfer-Encoding (refused beside
// a length, or in HTTP/1.0, where net/http ignores it).
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a?b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET /%41 HTTP/1.1\r\nHost: [::1]:80\r\nCookie: a=b; SRV=m\r\nConnection: close, X\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		head, err := readHead(bufio.NewReader(bytes.NewReader(in)), nil, maxHead)
		if err != nil {
			return
		}
		var h reqHead
		v := parseRequest(string(head), &h)
		if v == fallback {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if v == refuse {
			// Stricter than net/http on purpose: a Transfer-Encoding
			// beside a length, or in HTTP/1.0, which net/http ignores.
			if err == nil && !bytes.Contains(bytes.ToLower(head), []byte("\ntransfer-encoding:")) {
				t.Fatalf("refused with %d what net/http reads: %q", h.status, head)
			}
			return
		}
		if err != nil {
			t.Fatalf("served what net/http refuses (%v): %q", err, head)
		}
		if req.Method != h.method || req.RequestURI != h.uri || req.Host != h.host || req.URL.RequestURI() != h.uri {
			t.Fatalf("net/http reads %s %s (%s) host %q, the lean parser %s %s host %q", req.Method, req.RequestURI, req.URL.RequestURI(), req.Host, h.method, h.uri, h.host)
		}
		chunked := len(req.TransferEncoding) == 1 && req.TransferEncoding[0] == "chunked"
		length := req.ContentLength
		if chunked || length == 0 {
			length = -1
		}
		if chunked != h.chunked || length != h.length {
			t.Fatalf("net/http frames the body chunked %v length %d, the lean parser %v %d: %q", chunked, req.ContentLength, h.chunked, h.length, head)
		}
		if req.Close != h.close {
			t.Fatalf("net/http reads close %v, the lean parser %v: %q", req.Close, h.close, head)
		}
	})
}
