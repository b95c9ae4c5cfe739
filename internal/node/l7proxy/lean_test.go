package l7proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// countingMember is a member that counts the connections it accepted
// and the requests it served.
type countingMember struct {
	srv             *httptest.Server
	conns, requests atomic.Int64
	// lastHead is the last request's headers as the member read them.
	lastHead atomic.Value
}

func startCountingMember(t *testing.T, h http.HandlerFunc, configure ...func(*http.Server)) *countingMember {
	t.Helper()
	m := &countingMember{}
	m.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.requests.Add(1)
		var head strings.Builder
		r.Header.Write(&head)
		m.lastHead.Store(head.String())
		h(w, r)
	}))
	m.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			m.conns.Add(1)
		}
	}
	for _, f := range configure {
		f(m.srv.Config)
	}
	m.srv.Start()
	t.Cleanup(m.srv.Close)
	return m
}

func (m *countingMember) backend() flows.Backend {
	ap := netip.MustParseAddrPort(strings.TrimPrefix(m.srv.URL, "http://"))
	return flows.Backend{MemberID: "m", Address: ap.Addr(), Port: ap.Port(), Weight: 1}
}

// serveOne starts a proxy of t's engine with one listener whose default
// pool is the member at b, and returns where it listens.
func serveOne(t *testing.T, b flows.Backend, cfg flows.L7) (*Proxy, string) {
	t.Helper()
	p, lp := startProxy(t)
	cfg.DefaultPool = "p"
	cfg.Pools = append(cfg.Pools, flows.L7Pool{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{b}})
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	return p, lp.addr(1).String()
}

func dialRaw(t *testing.T, at string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// readAnswer reads one answer to method from br, its body whole.
func readAnswer(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, string(body)
}

// closedAfter reports whether the proxy closed the connection (nothing
// more comes).
func closedAfter(c net.Conn, br *bufio.Reader) bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := br.ReadByte()
	return err == io.EOF
}

// TestLeanSmuggling: a request with both a Content-Length and a
// Transfer-Encoding, two different lengths, or a malformed chunk size is
// answered 400 and its connection closed; a member sees nothing of the
// first two, and a malformed chunked body ends its member connection.
func TestLeanSmuggling(t *testing.T) {
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	p, at := serveOne(t, m.backend(), flows.L7{})
	if engineOf(t) != EngineLean {
		t.Fatal("the lean engine's test runs with another")
	}
	for _, tc := range []struct{ name, req string }{
		{"length and chunked", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"chunked and length", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"two lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabcGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"chunked in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := dialRaw(t, at)
			io.WriteString(c, tc.req)
			resp, body := readAnswer(t, br, "POST")
			if resp.StatusCode != http.StatusBadRequest || body != "400 Bad Request" {
				t.Errorf("answer %d %q, want 400", resp.StatusCode, body)
			}
			if !closedAfter(c, br) {
				t.Error("the connection stayed open")
			}
		})
	}
	if n, r := m.conns.Load(), m.requests.Load(); n != 0 || r != 0 {
		t.Errorf("the member accepted %d connections, served %d requests of refused ones", n, r)
	}

	// A chunk size that is not one: refused when the proxy reads it.
	c, br := dialRaw(t, at)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\nabc\r\n0\r\n\r\n")
	resp, _ := readAnswer(t, br, "POST")
	if resp.StatusCode != http.StatusBadRequest || !closedAfter(c, br) {
		t.Errorf("a bad chunk size: %d, want 400 and the connection closed", resp.StatusCode)
	}
	if r := m.requests.Load(); r != 0 {
		t.Errorf("the member served %d requests whose body was malformed", r)
	}
	if h := promtest.ToFloat64(p.m.handoffs); h != 0 {
		t.Errorf("%v connections went to the net/http engine", h)
	}
}

// TestLeanFraming: bodies each way with the framing they need, answers
// without a body, HTTP/1.0, Connection: close, Expect: 100-continue and
// pipelined requests, through each engine.
func TestLeanFraming(t *testing.T) { forEngines(t, testLeanFraming) }

func testLeanFraming(t *testing.T) {
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/cached":
			w.Header().Set("ETag", `"1"`)
			w.WriteHeader(http.StatusNotModified)
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "closing")
		default:
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Length", fmt.Sprint(len(r.URL.Path)+len(body)))
			io.WriteString(w, r.URL.Path)
			w.Write(body)
		}
	})
	p, at := serveOne(t, m.backend(), flows.L7{})

	c, br := dialRaw(t, at)
	io.WriteString(c, "GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readAnswer(t, br, "GET")
	if body != "part0;part1;part2;" || len(resp.TransferEncoding) != 1 {
		t.Errorf("chunked answer %q, framing %v", body, resp.TransferEncoding)
	}
	io.WriteString(c, "HEAD /len HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readAnswer(t, br, "HEAD"); resp.StatusCode != 200 || body != "" || resp.ContentLength != 4 {
		t.Errorf("HEAD: %d %q length %d", resp.StatusCode, body, resp.ContentLength)
	}
	for _, path := range []string{"/empty", "/cached"} {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, body := readAnswer(t, br, "GET"); resp.StatusCode/100 != 2 && resp.StatusCode != 304 || body != "" {
			t.Errorf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n")
	if resp, body := readAnswer(t, br, "POST"); resp.StatusCode != 200 || body != "/upabcdef" {
		t.Errorf("chunked request: %d %q", resp.StatusCode, body)
	}
	io.WriteString(c, "PUT /put HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	if resp, _ := http.ReadResponse(br, nil); resp == nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("Expect: 100-continue answered %v", resp)
	}
	io.WriteString(c, "hello")
	resp, body = readAnswer(t, br, "PUT")
	for resp.StatusCode == http.StatusContinue {
		// The net/http engine passes on the member's 100 Continue too.
		resp, body = readAnswer(t, br, "PUT")
	}
	if resp.StatusCode != 200 || body != "/puthello" {
		t.Errorf("after 100 Continue: %d %q", resp.StatusCode, body)
	}
	// Pipelined: three requests in one write, answered in order.
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nxGET /3 HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"/1", "/2x", "/3"} {
		if _, body := readAnswer(t, br, "GET"); body != want {
			t.Errorf("pipelined: %q, want %q", body, want)
		}
	}
	// A member that closes: the client's connection stays.
	io.WriteString(c, "GET /close HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readAnswer(t, br, "GET"); body != "closing" || resp.Close {
		t.Errorf("a member that closes: %q, close %v", body, resp.Close)
	}
	io.WriteString(c, "GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp, body := readAnswer(t, br, "GET"); body != "/after" || !resp.Close {
		t.Errorf("Connection: close: %q, close %v", body, resp.Close)
	}
	if !closedAfter(c, br) {
		t.Error("the connection stayed open after Connection: close")
	}

	c, br = dialRaw(t, at)
	io.WriteString(c, "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	if resp, body := readAnswer(t, br, "GET"); body != "/old" || resp.ProtoMinor != 0 || resp.Close {
		t.Errorf("HTTP/1.0 kept alive: %q, HTTP/1.%d, close %v", body, resp.ProtoMinor, resp.Close)
	}
	io.WriteString(c, "GET /chunked HTTP/1.0\r\n\r\n")
	if resp, body := readAnswer(t, br, "GET"); body != "part0;part1;part2;" || len(resp.TransferEncoding) != 0 {
		t.Errorf("HTTP/1.0, an answer of unknown length: %q, framing %v", body, resp.TransferEncoding)
	}
	if !closedAfter(c, br) {
		t.Error("an HTTP/1.0 connection stayed open after an answer of unknown length")
	}

	if engineOf(t) != EngineLean {
		// net/http's server answers 431 too, but closes without reading
		// what follows: the client may read a reset instead.
		return
	}
	// A head larger than net/http's limit: 431.
	c, br = dialRaw(t, at)
	go func() {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
		for range 300 {
			if _, err := io.WriteString(c, "X-Big: "+strings.Repeat("a", 4000)+"\r\n"); err != nil {
				return
			}
		}
		io.WriteString(c, "\r\n")
	}()
	if resp, _ := readAnswer(t, br, "GET"); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a head of 1.2 MB: %d", resp.StatusCode)
	}
	if h := promtest.ToFloat64(p.m.handoffs); h != 0 {
		t.Errorf("%v connections went to the net/http engine", h)
	}
}

// TestLeanUntilClosed: an answer a member ends by closing its connection
// reaches an HTTP/1.1 client chunked, on a connection that stays open.
func TestLeanUntilClosed(t *testing.T) { forEngines(t, testLeanUntilClosed) }

func testLeanUntilClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Old: 1\r\n\r\nuntil the end")
			}()
		}
	}()
	ap := netip.MustParseAddrPort(l.Addr().String())
	_, at := serveOne(t, flows.Backend{MemberID: "raw", Address: ap.Addr(), Port: ap.Port(), Weight: 1}, flows.L7{})
	c, br := dialRaw(t, at)
	for range 2 {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := readAnswer(t, br, "GET")
		if body != "until the end" || resp.Header.Get("X-Old") != "1" || resp.Close {
			t.Errorf("answer %q, headers %v, close %v", body, resp.Header, resp.Close)
		}
	}
}

// TestLeanMemberConnections: the lean engine keeps member connections
// open between requests and shares them between clients; a member
// connection the member closed while idle costs no request.
func TestLeanMemberConnections(t *testing.T) {
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, body)
	}, func(s *http.Server) { s.IdleTimeout = 500 * time.Millisecond })
	_, at := serveOne(t, m.backend(), flows.L7{})
	for range 3 {
		c, br := dialRaw(t, at)
		for range 5 {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := readAnswer(t, br, "GET"); body != "GET " {
				t.Fatalf("answer %q", body)
			}
		}
		c.Close()
	}
	if n := m.conns.Load(); n != 1 {
		t.Errorf("15 requests of 3 clients one after the other took %d member connections, want 1", n)
	}
	// The member closes the idle connection; the next requests, one that
	// can be sent again and one that cannot, still reach it.
	time.Sleep(time.Second)
	c, br := dialRaw(t, at)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != 200 || body != "GET " {
		t.Errorf("a GET after the member closed its idle connection: %d %q", resp.StatusCode, body)
	}
	time.Sleep(time.Second)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	if resp, body := readAnswer(t, br, "POST"); resp.StatusCode != 200 || body != "POST hi" {
		t.Errorf("a POST after the member closed its idle connection: %d %q", resp.StatusCode, body)
	}
}

// TestLeanHandoff: what the lean engine does not take, the net/http
// engine serves on the same connection, from the request it did not
// take on: a protocol upgrade, a request in absolute form; requests
// before it stay the lean engine's.
func TestLeanHandoff(t *testing.T) {
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			fmt.Fprintf(w, "plain %s", r.URL.Path)
			return
		}
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.Flush()
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo: "+line)
	})
	p, at := serveOne(t, m.backend(), flows.L7{})
	c, br := dialRaw(t, at)
	io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := readAnswer(t, br, "GET"); body != "plain /first" {
		t.Fatalf("first answer %q", body)
	}
	if h := promtest.ToFloat64(p.m.handoffs); h != 0 {
		t.Fatalf("a plain request went to the net/http engine")
	}
	io.WriteString(c, "GET http://x/absolute HTTP/1.1\r\nHost: x\r\n\r\nGET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	if _, body := readAnswer(t, br, "GET"); body != "plain /absolute" {
		t.Errorf("absolute form: %q", body)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "ping\n")
	if line, _ := br.ReadString('\n'); line != "echo: ping\n" {
		t.Errorf("after the upgrade: %q", line)
	}
	if h := promtest.ToFloat64(p.m.handoffs); h != 1 {
		t.Errorf("%v connections went to the net/http engine, want 1", h)
	}
}

// TestLeanRequestHead: the member reads the client's headers without the
// hop-by-hop ones (those the Connection header names too), with the
// listener's insert_headers in place of the client's own.
func TestLeanRequestHead(t *testing.T) { forEngines(t, testLeanRequestHead) }

func testLeanRequestHead(t *testing.T) {
	m := startCountingMember(t, func(http.ResponseWriter, *http.Request) {})
	_, at := serveOne(t, m.backend(), flows.L7{InsertHeaders: []string{"X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto"}})
	c, br := dialRaw(t, at)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\n"+
		"Proxy-Authorization: p\r\nTE: trailers\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Port: 1\r\nX-Forwarded-Proto: gopher\r\nX-Kept: yes\r\n\r\n")
	readAnswer(t, br, "GET")
	want := "Te: trailers\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Port: 80\r\nX-Forwarded-Proto: http\r\nX-Kept: yes\r\n"
	got, _ := m.lastHead.Load().(string)
	// net/http's transport asks for gzip when the client did not.
	got = strings.Replace(got, "Accept-Encoding: gzip\r\n", "", 1)
	if got != want {
		t.Errorf("the member read\n%s\nwant\n%s", got, want)
	}
}

// TestLeanLargeBodies: bodies larger than every buffer on the way reach
// the member and the client whole, with or without a length, trailers
// with them, and are counted in the member's statistics.
func TestLeanLargeBodies(t *testing.T) { forEngines(t, testLeanLargeBodies) }

func testLeanLargeBodies(t *testing.T) {
	if engineOf(t) == EngineNetHTTP {
		// net/http's server closes what is left of a request body when
		// the handler writes its answer's head; the transport, reading
		// past the body's length to check that nothing follows, then
		// fails and closes the member connection, cutting the answer
		// (seen in 3 of 8 runs with -race). A known net/http race.
		t.Skip("the net/http engine may cut an answer to a large request body")
	}
	const size = 3<<20 + 17
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/trailer" {
			w.Header().Set("Trailer", "X-Sum")
		}
		w.Header().Set("X-Got", fmt.Sprint(n))
		if r.URL.Path == "/length" {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		chunk := []byte(strings.Repeat("0123456789abcdef", 4096))
		for left := size; left > 0; left -= len(chunk) {
			w.Write(chunk[:min(left, len(chunk))])
		}
		if r.URL.Path == "/trailer" {
			w.Header().Set("X-Sum", "done")
		}
	})
	p, at := serveOne(t, m.backend(), flows.L7{})
	c, br := dialRaw(t, at)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	upload := strings.Repeat("u", size)
	for _, tc := range []struct{ path, framing string }{{"/length", "length"}, {"/chunked", "chunked"}, {"/trailer", "chunked"}} {
		go func() {
			if tc.framing == "length" {
				fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", tc.path, size, upload)
				return
			}
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", tc.path)
			for off := 0; off < size; off += 100000 {
				part := upload[off:min(off+100000, size)]
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(part), part)
			}
			io.WriteString(c, "0\r\n\r\n")
		}()
		resp, body := readAnswer(t, br, "POST")
		if resp.StatusCode != 200 || resp.Header.Get("X-Got") != fmt.Sprint(size) || len(body) != size {
			t.Errorf("%s: %d, the member got %s bytes, the client %d; want %d", tc.path, resp.StatusCode, resp.Header.Get("X-Got"), len(body), size)
		}
		if tc.path == "/trailer" && resp.Trailer.Get("X-Sum") != "done" {
			t.Errorf("trailers %v", resp.Trailer)
		}
	}
	read, err := p.ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	b := m.backend()
	got := read[flows.Key{VIP: vip.Addr(), Protocol: flows.TCP, Port: vip.Port()}].Members[netip.AddrPortFrom(b.Address, b.Port)]
	if got.Connections != 3 || got.BytesIn != 3*size || got.BytesOut != 3*size {
		t.Errorf("counted %+v, want 3 requests of %d bytes each way", got, size)
	}
}

// TestLeanDrainIdle: a drain closes the kept-alive connections that wait
// for a request, and ends without waiting for them.
func TestLeanDrainIdle(t *testing.T) { forEngines(t, testLeanDrainIdle) }

func testLeanDrainIdle(t *testing.T) {
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	p, at := serveOne(t, m.backend(), flows.L7{})
	c, br := dialRaw(t, at)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := readAnswer(t, br, "GET"); body != "ok" {
		t.Fatalf("answer %q", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := p.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the drain took %v with only an idle connection", took)
	}
	if !closedAfter(c, br) {
		t.Error("the idle connection stayed open after the drain")
	}
}

// TestLeanRuleTypes: rules reading a header or a cookie decide as with
// the net/http engine, beside one reading only the host.
func TestLeanRuleTypes(t *testing.T) { forEngines(t, testLeanRuleTypes) }

func testLeanRuleTypes(t *testing.T) {
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "member") })
	_, at := serveOne(t, m.backend(), flows.L7{Policies: []flows.L7Policy{
		{ID: "h", Action: flows.L7Reject, Rules: []flows.L7Rule{{Type: flows.RuleHeader, Key: "X-Api", Compare: flows.CompareEqualTo, Value: "v2"}}},
		{ID: "c", Action: flows.L7RedirectToURL, URL: "https://beta.example/", Rules: []flows.L7Rule{{Type: flows.RuleCookie, Key: "beta", Compare: flows.CompareStartsWith, Value: "y"}}},
		{ID: "p", Action: flows.L7RedirectPrefix, URL: "https://www.example", Code: 308, Rules: []flows.L7Rule{
			{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "EXAMPLE"}, {Type: flows.RuleFileType, Compare: flows.CompareEqualTo, Value: "jpg"}}},
	}})
	c, br := dialRaw(t, at)
	for _, tc := range []struct {
		req, location string
		status        int
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\nX-Api: v1, v2\r\n\r\n", "", 403},
		{"GET / HTTP/1.1\r\nHost: x\r\nX-Api: v1\r\nCookie: a=1; beta=yes\r\n\r\n", "https://beta.example/", 302},
		{"GET /a/b.jpg?x=1 HTTP/1.1\r\nHost: example\r\n\r\n", "https://www.example/a/b.jpg?x=1", 308},
		{"GET /a/b.png HTTP/1.1\r\nHost: example\r\nCookie: beta=no\r\n\r\n", "", 200},
	} {
		io.WriteString(c, tc.req)
		resp, _ := readAnswer(t, br, "GET")
		if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location {
			t.Errorf("%q: %d to %q, want %d to %q", tc.req, resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
		}
	}
}
