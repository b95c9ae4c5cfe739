package l7proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Engine is how the proxy serves its client connections.
type Engine int

const (
	// EngineLean serves a plain HTTP/1.1 connection's requests on the
	// connection's own goroutine: each request parsed from a reused
	// buffer, written to a kept-alive member connection taken from the
	// member's small pool, and its answer relayed, with no goroutine
	// between; on a TLS listener once the handshake is done, unless it
	// agreed on h2. What it does not take (h2, a protocol upgrade, a
	// PROXY or TLS pool, a request net/http would judge differently) goes
	// to the net/http engine, on the same connection, from that request
	// on.
	EngineLean Engine = iota
	// EngineNetHTTP serves every connection with net/http's server and
	// httputil.ReverseProxy.
	EngineNetHTTP
)

// headerTimeout bounds the reading of a request's head, as the net/http
// server's ReadHeaderTimeout does.
const headerTimeout = time.Minute

// Member connections the lean engine keeps open between requests, per
// member, and for how long.
const (
	memberIdleMax     = 256
	memberIdleTimeout = 90 * time.Second
)

// Connection states, for Drain: a new connection (in its TLS handshake,
// or waiting for its first request) is given newConnGrace from its
// opening, since its client may be sending the request already and
// would see it lost; an idle one waits for a further request and may be
// closed; an active one is answered first.
const (
	connNew int32 = iota
	connIdle
	connActive
	connClosed
)

// newConnGrace is how long a drain waits for a new connection's first
// request: net/http's Server.Shutdown waits as long for its StateNew
// connections.
const newConnGrace = 5 * time.Second

// leanConn is one client connection the lean engine serves.
type leanConn struct {
	p    *Proxy
	c    net.Conn
	port uint16
	// from is the client's address and port (an IPv4-mapped address as
	// the IPv4 one), fromAddr its address as X-Forwarded-For gives it.
	from     netip.AddrPort
	fromAddr string
	br       *bufio.Reader
	w        errWriter
	bw       *bufio.Writer
	// head is the request head's buffer, mhead the member answer's;
	// out the head written to the member, reused.
	head, mhead, out []byte
	rq               reqHead
	rs               respHead
	// req is the request as net/http would have made it, built only when
	// a rule or a persistence cookie asks; reqHeaders: with its headers.
	req        *http.Request
	reqHeaders bool
	// remote is the client's address as net/http gives it.
	remote string
	// tls is the connection's TLS state once its handshake is done (nil:
	// plain HTTP); verified: the context of a request on a listener
	// that terminates TLS, with the client certificate's verification
	// result, as the net/http engine gives its rules; hsts: the
	// Strict-Transport-Security value of the request's answers ("":
	// none).
	tls      *tls.ConnectionState
	verified context.Context
	hsts     string
	// sslFor is the listener whose X-SSL-* headers sslValues holds
	// (sslFields): the connection's certificate does not change, so they
	// are made once.
	sslFor    *router
	sslValues []field
	state     atomic.Int32
	// opened is when the connection was accepted (newConnGrace).
	opened time.Time
	// deadline is the read deadline set on c (zero: none).
	deadline time.Time
}

// errWriter remembers its writer's first error, so that a failed relay
// tells which side failed.
type errWriter struct {
	w   io.Writer
	err error
}

func (w *errWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// serveLean accepts l's connections for the lean engine.
func (p *Proxy) serveLean(l net.Listener) error {
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			var ne net.Error
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) ||
				errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.As(err, &ne) && ne.Timeout() {
				// What net/http's server waits out too.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				p.log.Debug("L7 proxy: accept", "err", err, "retry in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go p.serveConn(c)
	}
}

func (p *Proxy) serveConn(c net.Conn) {
	lc := &leanConn{p: p, c: c, opened: time.Now()}
	lc.port, _ = portOf(c)
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		lc.from = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		lc.fromAddr = lc.from.Addr().String()
	}
	if !p.addLean(lc) {
		c.Close()
		return
	}
	p.m.connections.Add(1)
	if tc, ok := c.(*tls.Conn); ok {
		other, ok := lc.handshake(tc)
		if !ok || other {
			p.removeLean(lc)
			p.m.connections.Add(-1)
			if ok {
				p.handoff(c, nil)
			}
			return
		}
	}
	lc.br = readerPool.Get().(*bufio.Reader)
	lc.br.Reset(c)
	lc.w.w = c
	lc.bw = writerPool.Get().(*bufio.Writer)
	lc.bw.Reset(&lc.w)
	replay, handoff := lc.loop()
	p.removeLean(lc)
	lc.br.Reset(nil)
	readerPool.Put(lc.br)
	lc.bw.Reset(nil)
	writerPool.Put(lc.bw)
	p.m.connections.Add(-1)
	if handoff {
		if !lc.deadline.IsZero() {
			c.SetReadDeadline(time.Time{})
		}
		p.handoff(c, replay)
		return
	}
	c.Close()
}

// handshake does a TLS connection's handshake (the listener's
// tls.Config chooses the certificate by SNI, verifies the client's and
// agrees on ALPN), within the time the net/http engine allows it: its
// ReadHeaderTimeout, and the listener's timeout_client_data, which
// counts from the connection's opening there. other: the client and
// the listener agreed by ALPN on a protocol other than HTTP/1.x, which
// the net/http engine is to serve: h2 multiplexes its requests as frames
// of concurrent streams, which the lean engine, reading one request at
// a time from a byte stream, does not speak, and which net/http's HTTP/2
// server does; a connection of any other protocol net/http's server
// closes. ok false: the handshake failed and the connection is closed.
func (lc *leanConn) handshake(tc *tls.Conn) (other, ok bool) {
	until := time.Now().Add(headerTimeout)
	if r := (*lc.p.routes.Load())[lc.port]; r != nil && r.cfg.ClientTimeout > 0 && r.cfg.ClientTimeout < headerTimeout {
		until = time.Now().Add(r.cfg.ClientTimeout)
	}
	tc.SetDeadline(until)
	if err := tc.Handshake(); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && recordLooksLikeHTTP(re.RecordHeader) {
			// As net/http's server answers plain HTTP on a TLS port.
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			re.Conn.Close()
		}
		lc.p.log.Debug("L7 proxy: TLS handshake", "from", lc.c.RemoteAddr(), "err", err)
		tc.Close()
		return false, false
	}
	tc.SetDeadline(time.Time{})
	cs := tc.ConnectionState()
	switch cs.NegotiatedProtocol {
	case "", "http/1.1", "http/1.0":
	default:
		return true, true
	}
	lc.tls = &cs
	return false, true
}

// recordLooksLikeHTTP reports whether a TLS record header that is not
// one is the start of an HTTP request, as net/http's server tells.
func recordLooksLikeHTTP(h [5]byte) bool {
	switch string(h[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// setReadDeadline sets the client connection's read deadline when it
// changes.
func (lc *leanConn) setReadDeadline(t time.Time) {
	if t.Equal(lc.deadline) {
		return
	}
	lc.deadline = t
	lc.c.SetReadDeadline(t)
}

// loop serves the connection's requests until it closes, or returns
// what was read of the request the net/http engine is to take.
func (lc *leanConn) loop() (replay []byte, handoff bool) {
	p := lc.p
	first := true
	for {
		r := (*p.routes.Load())[lc.port]
		var idleUntil time.Time
		if r != nil && r.cfg.ClientTimeout > 0 {
			// timeout_client_data: before the first request and between
			// requests, as the net/http engine's idle timer.
			idleUntil = time.Now().Add(r.cfg.ClientTimeout)
		} else if first {
			idleUntil = time.Now().Add(headerTimeout)
		}
		if lc.br.Buffered() == 0 {
			lc.setReadDeadline(idleUntil)
			if _, err := lc.br.Peek(1); err != nil {
				return nil, false
			}
		}
		if !lc.state.CompareAndSwap(connIdle, connActive) && !lc.state.CompareAndSwap(connNew, connActive) {
			return nil, false
		}
		headUntil := idleUntil
		if h := time.Now().Add(headerTimeout); headUntil.IsZero() || h.Before(headUntil) {
			headUntil = h
		}
		lc.setReadDeadline(headUntil)
		head, err := readHead(lc.br, lc.head, maxHead)
		lc.head = head[:0]
		switch {
		case errors.Is(err, errBareLF):
			return lc.replay(head), true
		case errors.Is(err, errHeadTooLarge):
			lc.refuse(http.StatusRequestHeaderFieldsTooLarge)
			return nil, false
		case err != nil:
			return nil, false
		}
		lc.setReadDeadline(time.Time{})
		// The configuration the request finds when it arrives.
		r = (*p.routes.Load())[lc.port]
		// The head's text lives in lc.head until the next request: the
		// request's strings point into it and do not outlive it.
		switch parseRequest(unsafe.String(unsafe.SliceData(head), len(head)), &lc.rq) {
		case fallback:
			return lc.replay(head), true
		case refuse:
			lc.refuse(lc.rq.status)
			return nil, false
		}
		keep, handoff := lc.serveRequest(r)
		if handoff {
			return lc.replay(head), true
		}
		if !keep {
			if lc.br.Buffered() > 0 || lc.rq.hasBody() {
				// What the client sent may be unread.
				lc.closeGracefully()
			}
			return nil, false
		}
		if !lc.state.CompareAndSwap(connActive, connIdle) || p.draining.Load() {
			return nil, false
		}
		first = false
	}
}

// replay is what the net/http engine reads first: the head read and
// what the client sent after it.
func (lc *leanConn) replay(head []byte) []byte {
	out := make([]byte, 0, len(head)+lc.br.Buffered())
	out = append(out, head...)
	rest, _ := lc.br.Peek(lc.br.Buffered())
	return append(out, rest...)
}

// refuse answers a request the lean engine will not pass on, as the
// net/http server answers a malformed one, and closes the connection.
func (lc *leanConn) refuse(status int) {
	body := strconv.Itoa(status) + " " + http.StatusText(status)
	if status == http.StatusNotImplemented {
		body = "Unsupported transfer encoding"
	}
	lc.bw.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + body)
	lc.p.m.answered(status, false)
	lc.bw.Flush()
	lc.closeGracefully()
}

// closeGracefully closes the connection so that the client reads the
// last answer: its sending side first, then what it still sends is
// read and dropped for a while, or the kernel would answer it with a
// reset that can destroy the answer.
func (lc *leanConn) closeGracefully() {
	c := lc.c
	if tc, ok := c.(*tls.Conn); ok {
		// TLS's close_notify first; what the client sends after it is
		// dropped unread, below TLS.
		if tc.CloseWrite() != nil {
			return
		}
		c = tc.NetConn()
	}
	sc, ok := c.(steeredConn)
	if !ok {
		return
	}
	cw, ok := sc.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.CopyN(io.Discard, c, 256<<10)
}

// request is the request as the net/http engine makes it, for the rules
// and the persistence cookies: with its headers only when headers (the
// rules of a listener that reads none need only its host and path);
// false when net/url refuses its target (net/http's to answer).
func (lc *leanConn) request(headers bool) (*http.Request, bool) {
	if lc.req == nil {
		u, err := url.ParseRequestURI(lc.rq.uri)
		if err != nil {
			return nil, false
		}
		proto := "HTTP/1.1"
		if lc.rq.minor == 0 {
			proto = "HTTP/1.0"
		}
		if lc.remote == "" {
			lc.remote = lc.c.RemoteAddr().String()
		}
		lc.req = &http.Request{Method: lc.rq.method, URL: u, Proto: proto, ProtoMajor: 1, ProtoMinor: lc.rq.minor,
			Host: lc.rq.host, RemoteAddr: lc.remote, RequestURI: lc.rq.uri, TLS: lc.tls}
		if lc.verified != nil {
			lc.req = lc.req.WithContext(lc.verified)
		}
		lc.reqHeaders = false
	}
	if headers && !lc.reqHeaders {
		h := make(http.Header, len(lc.rq.headers))
		lc.req.Header = h
		for _, f := range lc.rq.headers {
			k := textproto.CanonicalMIMEHeaderKey(f.name)
			if k == "Host" || k == "Transfer-Encoding" {
				continue
			}
			h[k] = append(h[k], f.value)
		}
		lc.reqHeaders = true
	}
	return lc.req, true
}

// serveRequest answers one request; keep: the connection can take the
// next; handoff: the net/http engine is to answer it.
func (lc *leanConn) serveRequest(r *router) (keep, handoff bool) {
	lc.req = nil
	lc.hsts = ""
	if r == nil {
		// The listener was removed while its client kept the connection
		// open.
		lc.answer(http.StatusServiceUnavailable, "", true, nil)
		return false, false
	}
	lc.verified = nil
	if lc.tls != nil && r.tls != nil {
		// A certificate that did not verify ended the handshake.
		lc.verified = verifiedContext
		lc.hsts = r.tls.hsts
	}
	var d decision
	switch {
	case len(r.policies) > 0:
		req, ok := lc.request(r.readsHeaders)
		if !ok {
			return false, true
		}
		d = r.decide(req)
	case r.defaultPool == nil:
		d = decision{status: http.StatusServiceUnavailable}
	default:
		d = decision{pool: r.defaultPool}
	}
	if d.pool == nil {
		keep := lc.discardBody()
		lc.answer(d.status, d.location, !keep, nil)
		return keep, false
	}
	pl := d.pool
	if pl.proxyVersion != 0 || pl.tls != nil {
		return false, true
	}
	var req *http.Request
	if pl.persist != nil && pl.persist.Type != flows.PersistSourceIP {
		var ok bool
		if req, ok = lc.request(true); !ok {
			return false, true
		}
	}
	b, setCookie := pl.pick(req, lc.from)
	if b == nil {
		keep := lc.discardBody()
		lc.answer(http.StatusServiceUnavailable, "", !keep, nil)
		return keep, false
	}
	b.active.Add(1)
	defer b.active.Add(-1)
	if c := b.counters; c != nil {
		c.requests.Add(1)
	}
	return lc.forward(r, pl, b, setCookie), false
}

// discardBody reads and drops the body of a request the proxy answers
// itself, as net/http's server does with up to 256 KiB of it; false
// when the connection cannot take another request.
func (lc *leanConn) discardBody() bool {
	rq := &lc.rq
	switch {
	case lc.rq.close || lc.p.draining.Load():
		return false
	case !rq.hasBody():
		return true
	case rq.expect || rq.chunked || rq.length > 256<<10:
		return false
	}
	return copyN(nil, lc.br, rq.length, false) == nil
}

// answer writes an answer of the proxy's own: a redirect to location,
// or status with its text, as http.Error writes it; its body counted in
// n (nil: not counted). It is counted in the metrics before the client
// can read it.
func (lc *leanConn) answer(status int, location string, closeConn bool, n *atomic.Uint64) {
	b := lc.out[:0]
	if lc.rq.minor == 0 {
		b = append(b, "HTTP/1.0 "...)
	} else {
		b = append(b, "HTTP/1.1 "...)
	}
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\n"...)
	body := ""
	if location != "" {
		b = append(b, "Location: "...)
		b = append(b, location...)
		b = append(b, "\r\n"...)
	} else {
		body = http.StatusText(status) + "\n"
		b = append(b, "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"...)
	}
	if lc.hsts != "" {
		b = appendField(b, "Strict-Transport-Security", lc.hsts)
	}
	b = append(b, "Date: "...)
	b = time.Now().UTC().AppendFormat(b, http.TimeFormat)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	b = connectionHeader(b, closeConn, lc.rq.minor)
	b = append(b, "\r\n"...)
	if lc.rq.method != http.MethodHead {
		b = append(b, body...)
		if n != nil {
			n.Add(uint64(len(body)))
		}
	}
	lc.out = b
	lc.bw.Write(b)
	lc.p.m.answered(status, false)
	lc.bw.Flush()
}

func connectionHeader(b []byte, closeConn bool, minor int) []byte {
	if closeConn {
		return append(b, "Connection: close\r\n"...)
	}
	if minor == 0 {
		return append(b, "Connection: keep-alive\r\n"...)
	}
	return b
}

// memberConn is a connection to a member.
type memberConn struct {
	c         net.Conn
	w         errWriter
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

func (mc *memberConn) close() { mc.c.Close() }

// memberIdle are a member's connections open between requests, the last
// used on top.
type memberIdle struct {
	mu     sync.Mutex
	conns  []*memberConn
	closed bool
}

func (m *memberIdle) get() *memberConn {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.conns) > 0 {
		mc := m.conns[len(m.conns)-1]
		m.conns[len(m.conns)-1] = nil
		m.conns = m.conns[:len(m.conns)-1]
		if time.Since(mc.idleSince) < memberIdleTimeout {
			return mc
		}
		mc.close()
	}
	return nil
}

func (m *memberIdle) put(mc *memberConn) {
	now := time.Now()
	mc.idleSince = now
	m.mu.Lock()
	defer m.mu.Unlock()
	// The oldest are at the bottom: those idle too long go.
	drop := 0
	for drop < len(m.conns) && now.Sub(m.conns[drop].idleSince) >= memberIdleTimeout {
		m.conns[drop].close()
		drop++
	}
	if drop > 0 {
		m.conns = append(m.conns[:0], m.conns[drop:]...)
	}
	if m.closed || len(m.conns) >= memberIdleMax {
		mc.close()
		return
	}
	m.conns = append(m.conns, mc)
}

func (m *memberIdle) closeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for _, mc := range m.conns {
		mc.close()
	}
	m.conns = nil
}

// memberIdleFor is the pool of idle connections to a member's address,
// shared by every listener and pool that sends to it in plain HTTP.
func (p *Proxy) memberIdleFor(hostPort string) *memberIdle {
	p.mmu.Lock()
	defer p.mmu.Unlock()
	m := p.memberConns[hostPort]
	if m == nil {
		m = &memberIdle{}
		p.memberConns[hostPort] = m
	}
	return m
}

// dropMemberConns closes the idle member connections to the addresses
// no plain pool of routes sends to (all of them when routes is nil).
func (p *Proxy) dropMemberConns(routes map[uint16]*router) {
	used := map[string]bool{}
	for _, r := range routes {
		for _, pl := range r.pools {
			for _, b := range pl.backends {
				used[b.hostPort] = true
			}
		}
	}
	p.mmu.Lock()
	defer p.mmu.Unlock()
	for k, m := range p.memberConns {
		if !used[k] {
			m.closeAll()
			delete(p.memberConns, k)
		}
	}
}

// memberConn is a connection to b: an idle one, or a new one (fresh).
func (lc *leanConn) memberConn(b *backend, r *router, fresh bool, deadline time.Time, checkAlive bool) (*memberConn, bool, error) {
	if !fresh && b.idle != nil {
		for {
			mc := b.idle.get()
			if mc == nil {
				break
			}
			if checkAlive && !alive(mc.c) {
				mc.close()
				continue
			}
			return mc, true, nil
		}
	}
	ctx := context.Background()
	if ct := r.cfg.ConnectTimeout; ct > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ct)
		defer cancel()
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	c, err := lc.p.dialer.DialContext(ctx, "tcp", b.hostPort)
	if err != nil {
		return nil, false, err
	}
	mc := &memberConn{c: c, br: bufio.NewReaderSize(c, 8192)}
	mc.w.w = c
	mc.bw = bufio.NewWriterSize(&mc.w, 4096)
	return mc, false, nil
}

// alive reports whether an idle member connection is still open: the
// member has neither closed it nor sent anything on it.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = true
	var buf [1]byte
	raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
		return true
	})
	return ok
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// buildRequest is the head the member reads: the client's, without its
// hop-by-hop headers, with the listener's insert_headers and the
// pool's cookie handling.
func (lc *leanConn) buildRequest(r *router, pl *pool, b *backend) []byte {
	rq := &lc.rq
	out := append(lc.out[:0], rq.method...)
	out = append(out, ' ')
	out = append(out, rq.uri...)
	out = append(out, " HTTP/1.1\r\nHost: "...)
	if rq.host != "" {
		out = append(out, rq.host...)
	} else {
		out = append(out, b.hostPort...)
	}
	out = append(out, "\r\n"...)
	var xfPort, xfProto bool
	for _, h := range r.insert {
		switch {
		case strings.EqualFold(h, "X-Forwarded-Port"):
			xfPort = true
		case strings.EqualFold(h, "X-Forwarded-Proto"):
			xfProto = true
		}
	}
	httpCookie := pl.persist != nil && pl.persist.Type == flows.PersistHTTPCookie && lc.req != nil
	ssl := lc.sslFields(r)
	for _, f := range rq.headers {
		if f.hop || len(rq.dropped) > 0 && rq.dropsHeader(f.name) ||
			xfPort && strings.EqualFold(f.name, "X-Forwarded-Port") || xfProto && strings.EqualFold(f.name, "X-Forwarded-Proto") ||
			httpCookie && strings.EqualFold(f.name, "Cookie") || len(ssl) > 0 && inserted(ssl, f.name) {
			continue
		}
		out = appendField(out, f.name, f.value)
	}
	if rq.te {
		out = append(out, "Te: trailers\r\n"...)
	}
	if httpCookie && len(lc.req.Header["Cookie"]) > 0 {
		// The member never sees the proxy's cookie.
		removeCookie(lc.req, HTTPCookie)
		for _, v := range lc.req.Header["Cookie"] {
			out = appendField(out, "Cookie", v)
		}
	}
	for _, h := range r.insert {
		switch {
		case strings.EqualFold(h, "X-Forwarded-For"):
			if lc.fromAddr != "" {
				out = appendField(out, "X-Forwarded-For", lc.fromAddr)
			}
		case strings.EqualFold(h, "X-Forwarded-Port"):
			out = append(out, "X-Forwarded-Port: "...)
			out = strconv.AppendUint(out, uint64(r.vip.Port()), 10)
			out = append(out, "\r\n"...)
		case strings.EqualFold(h, "X-Forwarded-Proto"):
			if lc.tls != nil {
				out = append(out, "X-Forwarded-Proto: https\r\n"...)
			} else {
				out = append(out, "X-Forwarded-Proto: http\r\n"...)
			}
		}
	}
	for _, f := range ssl {
		if f.value != "" {
			out = appendField(out, f.name, f.value)
		}
	}
	switch {
	case rq.chunked:
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	case rq.length > 0:
		out = append(out, "Content-Length: "...)
		out = strconv.AppendInt(out, rq.length, 10)
		out = append(out, "\r\n"...)
	case rq.zero:
		out = append(out, "Content-Length: 0\r\n"...)
	}
	out = append(out, "\r\n"...)
	lc.out = out
	return out
}

// sslFields are the X-SSL-* headers r inserts on a TLS connection, by
// their canonical names as the net/http engine writes them, with their
// values ("": the header is not sent); nil on plain HTTP. The
// connection's TLS state does not change: they are made once per
// connection and listener.
func (lc *leanConn) sslFields(r *router) []field {
	if lc.tls == nil || !r.insertsSSL {
		return nil
	}
	if lc.sslFor != r {
		lc.sslFor = r
		lc.sslValues = lc.sslValues[:0]
		for _, h := range r.insert {
			k := http.CanonicalHeaderKey(h)
			if f := sslHeaders[k]; f != nil {
				lc.sslValues = append(lc.sslValues, field{name: k, value: f(lc.tls)})
			}
		}
	}
	return lc.sslValues
}

// inserted reports whether name is among fields' names.
func inserted(fields []field, name string) bool {
	for _, f := range fields {
		if strings.EqualFold(f.name, name) {
			return true
		}
	}
	return false
}

func appendField(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// memberStatus is the answer to a request its member did not answer:
// 504 when it did not in time (timeout_member_data), 503 when it could
// not be reached, 502 otherwise, as the net/http engine answers.
func memberStatus(err error, deadline time.Time, dialing bool) int {
	switch {
	case !deadline.IsZero() && !time.Now().Before(deadline) &&
		(errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)):
		return http.StatusGatewayTimeout
	case dialing:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

// forward sends the request to b and relays its answer; false when the
// client's connection cannot take another request. What is counted is
// counted before the client can read the end of the answer.
func (lc *leanConn) forward(r *router, pl *pool, b *backend, setCookie bool) bool {
	rq := &lc.rq
	var counted *memberCounters
	if b.counters != nil {
		counted = b.counters
	}
	var bytesOut *atomic.Uint64
	if counted != nil {
		bytesOut = &counted.bytesOut
	}
	out := lc.buildRequest(r, pl, b)
	var deadline time.Time
	if mt := r.cfg.MemberTimeout; mt > 0 {
		deadline = time.Now().Add(mt)
	}
	replayable := !rq.hasBody() && idempotent(rq.method)
	bodyRead := !rq.hasBody()
	var mc *memberConn
	for attempt := 0; ; attempt++ {
		var reused bool
		var err error
		mc, reused, err = lc.memberConn(b, r, attempt > 0, deadline, !replayable)
		if err != nil {
			status := memberStatus(err, deadline, true)
			lc.p.log.Debug("L7 proxy: member failed", "member", b.MemberID, "at", b.hostPort, "err", err)
			keep := bodyRead && lc.discardBody()
			lc.answer(status, "", !keep, bytesOut)
			return keep
		}
		if !deadline.IsZero() {
			mc.c.SetDeadline(deadline)
		}
		mc.w.err = nil
		mc.bw.Write(out)
		if rq.hasBody() && attempt == 0 {
			if rq.expect {
				lc.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
				if err := lc.bw.Flush(); err != nil {
					mc.close()
					return false
				}
			}
			var n int64
			if rq.chunked {
				n, err = relayChunked(mc.bw, lc.br, true, true)
			} else {
				n, err = rq.length, copyN(mc.bw, lc.br, rq.length, true)
			}
			if err == nil {
				bodyRead = true
				if counted != nil {
					counted.bytesIn.Add(uint64(n))
				}
			} else if mc.w.err == nil {
				// The client's side failed: a malformed chunked body is
				// refused, a client gone is not answered.
				mc.close()
				if errors.Is(err, errBadChunk) {
					lc.refuse(http.StatusBadRequest)
				}
				return false
			}
		}
		err = mc.bw.Flush()
		if err == nil || mc.w.err != nil {
			// A member that stopped reading may have answered already.
			var head []byte
			answered := false
			head, err = readHead(mc.br, lc.mhead, maxResponseHead)
			lc.mhead = head[:0]
			if err == nil {
				err = parseResponse(unsafe.String(unsafe.SliceData(head), len(head)), &lc.rs)
			}
			for err == nil && lc.rs.status < 200 {
				if lc.rs.status == http.StatusSwitchingProtocols {
					err = errBadResponse
					break
				}
				answered = true
				if lc.rs.status != http.StatusContinue && rq.minor == 1 {
					// Informational answers (103 Early Hints) go on.
					lc.writeResponseHead(pl, b, false, false, false, false)
					lc.bw.Flush()
				}
				head, err = readHead(mc.br, lc.mhead, maxResponseHead)
				lc.mhead = head[:0]
				if err == nil {
					err = parseResponse(unsafe.String(unsafe.SliceData(head), len(head)), &lc.rs)
				}
			}
			if err == nil {
				break
			}
			if reused && replayable && attempt == 0 && !answered && len(head) == 0 && !errors.Is(err, os.ErrDeadlineExceeded) {
				// The member closed the idle connection: once more on a
				// new one, as net/http's transport retries.
				mc.close()
				continue
			}
		}
		mc.close()
		status := memberStatus(err, deadline, false)
		lc.p.log.Debug("L7 proxy: member failed", "member", b.MemberID, "at", b.hostPort, "err", err)
		keep := bodyRead && lc.discardBody()
		lc.answer(status, "", !keep, bytesOut)
		return keep
	}
	if !deadline.IsZero() {
		mc.c.SetDeadline(time.Time{})
	}
	rs := &lc.rs
	// How the body comes, and how it goes to the client.
	const (
		none = iota
		length
		chunked  // passed on as it comes
		dechunk  // to an HTTP/1.0 client, closed after
		untilEOF // the member closes it
	)
	mode := none
	switch {
	case bodyless(rq.method, rs.status):
	case rs.chunked && rq.minor == 1:
		mode = chunked
	case rs.chunked:
		mode = dechunk
	case rs.length >= 0:
		mode = length
	default:
		mode = untilEOF
	}
	closeClient := rq.close || !bodyRead || lc.p.draining.Load() || mode == dechunk || mode == untilEOF && rq.minor == 0
	lc.writeResponseHead(pl, b, setCookie, true, closeClient, mode == chunked || mode == untilEOF && rq.minor == 1)
	var err error
	var n int64
	switch mode {
	case length:
		n, err = rs.length, copyN(lc.bw, mc.br, rs.length, true)
	case chunked, dechunk:
		n, err = relayChunked(lc.bw, mc.br, mode == chunked, true)
	case untilEOF:
		n, err = copyAll(lc.bw, mc.br, rq.minor == 1)
	}
	if bytesOut != nil {
		bytesOut.Add(uint64(n))
	}
	lc.p.m.answered(rs.status, true)
	// The member connection is free once its answer is read, before the
	// client can read the end of it.
	if err != nil || rs.close || mode == untilEOF || b.idle == nil {
		mc.close()
	} else {
		b.idle.put(mc)
	}
	if err == nil {
		err = lc.bw.Flush()
	}
	return err == nil && !closeClient
}

// copyAll copies a body the member ends by closing its connection:
// chunked to an HTTP/1.1 client.
func copyAll(dst *bufio.Writer, src *bufio.Reader, chunk bool) (int64, error) {
	var total int64
	for {
		if src.Buffered() == 0 && dst.Buffered() > 0 {
			if err := dst.Flush(); err != nil {
				return total, err
			}
		}
		if _, err := src.Peek(1); err != nil {
			if err == io.EOF {
				break
			}
			return total, err
		}
		b, _ := src.Peek(src.Buffered())
		if chunk {
			dst.WriteString(strconv.FormatInt(int64(len(b)), 16))
			dst.WriteString("\r\n")
		}
		if _, err := dst.Write(b); err != nil {
			return total, err
		}
		if chunk {
			dst.WriteString("\r\n")
		}
		total += int64(len(b))
		src.Discard(len(b))
	}
	if chunk {
		if _, err := dst.WriteString("0\r\n\r\n"); err != nil {
			return total, err
		}
	}
	return total, nil
}

// writeResponseHead writes the member's answer head to the client: its
// headers without the hop-by-hop ones, the pool's persistence cookie,
// and the framing the client is given.
func (lc *leanConn) writeResponseHead(pl *pool, b *backend, setCookie, final, closeClient, chunked bool) {
	rs := &lc.rs
	out := lc.out[:0]
	if lc.rq.minor == 0 {
		out = append(out, "HTTP/1.0 "...)
	} else {
		out = append(out, "HTTP/1.1 "...)
	}
	out = strconv.AppendInt(out, int64(rs.status), 10)
	out = append(out, ' ')
	if rs.reason != "" {
		out = append(out, rs.reason...)
	} else {
		out = append(out, http.StatusText(rs.status)...)
	}
	out = append(out, "\r\n"...)
	var cookie *http.Cookie
	private := false
	if final && pl.persist != nil {
		switch pl.persist.Type {
		case flows.PersistHTTPCookie:
			if setCookie {
				cookie = pl.memberCookie(b)
				private = true
			}
		case flows.PersistAppCookie:
			var set []string
			for _, f := range rs.headers {
				if strings.EqualFold(f.name, "Set-Cookie") {
					set = append(set, f.value)
				}
			}
			if len(set) > 0 {
				for _, c := range (&http.Response{Header: http.Header{"Set-Cookie": set}}).Cookies() {
					if c.Name == pl.persist.CookieName {
						cookie = pl.memberCookie(b)
						break
					}
				}
			}
		}
	}
	if private {
		// Cache-Control: private unless the member's answer says.
		for _, f := range rs.headers {
			if strings.EqualFold(f.name, "Cache-Control") {
				private = f.value == ""
				break
			}
		}
	}
	for _, f := range rs.headers {
		if len(rs.dropped) > 0 && dropped(rs.dropped, f.name) || !chunked && strings.EqualFold(f.name, "Trailer") ||
			private && strings.EqualFold(f.name, "Cache-Control") ||
			lc.hsts != "" && strings.EqualFold(f.name, "Strict-Transport-Security") {
			continue
		}
		out = appendField(out, f.name, f.value)
	}
	if lc.hsts != "" {
		// The listener's, in place of the member's, on every answer, as
		// the net/http engine's hstsWriter sets it.
		out = appendField(out, "Strict-Transport-Security", lc.hsts)
	}
	if cookie != nil {
		out = appendField(out, "Set-Cookie", cookie.String())
	}
	if private {
		out = append(out, "Cache-Control: private\r\n"...)
	}
	if final {
		if rs.length >= 0 && (!chunked || rs.status == http.StatusNotModified || lc.rq.method == http.MethodHead) {
			out = append(out, "Content-Length: "...)
			out = strconv.AppendInt(out, rs.length, 10)
			out = append(out, "\r\n"...)
		}
		if chunked {
			out = append(out, "Transfer-Encoding: chunked\r\n"...)
		}
		out = connectionHeader(out, closeClient, lc.rq.minor)
	}
	out = append(out, "\r\n"...)
	lc.out = out
	lc.bw.Write(out)
}

func dropped(names []string, name string) bool {
	for _, d := range names {
		if strings.EqualFold(d, name) {
			return true
		}
	}
	return false
}

// handoffListener gives the net/http server the connections the lean
// engine passes on.
type handoffListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener() *handoffListener {
	return &handoffListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return &net.TCPAddr{} }

// handoff gives c to the net/http engine, which reads replay first.
func (p *Proxy) handoff(c net.Conn, replay []byte) {
	p.m.handoffs.Inc()
	p.hoOnce.Do(func() { go p.serve(p.ho, true) })
	if len(replay) > 0 {
		rc := &replayConn{Conn: c, buf: replay}
		if tc, ok := c.(*tls.Conn); ok {
			// net/http's server knows a TLS connection only as a
			// *tls.Conn: its requests get the state from ConnContext.
			cs := tc.ConnectionState()
			rc.tls = &cs
		}
		c = rc
	}
	select {
	case p.ho.ch <- c:
	case <-p.ho.done:
		c.Close()
	}
}

// replayConn is a connection whose first bytes were read already; tls
// is its TLS state when it is a TLS connection (nil: plain).
type replayConn struct {
	net.Conn
	buf []byte
	tls *tls.ConnectionState
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(b, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// addLean registers a lean connection, unless the proxy drains or is
// closed.
func (p *Proxy) addLean(lc *leanConn) bool {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	if p.draining.Load() {
		return false
	}
	p.lean[lc] = struct{}{}
	return true
}

func (p *Proxy) removeLean(lc *leanConn) {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	delete(p.lean, lc)
}

// drainLean closes the lean connections waiting for a further request,
// and the new ones still without a request newConnGrace after their
// opening (all of them with force), and waits until none is left or ctx
// ends. A connection answers at most one more request once draining.
func (p *Proxy) drainLean(ctx context.Context, force bool) error {
	// Under lmu, so that addLean adds no connection after this.
	p.lmu.Lock()
	p.draining.Store(true)
	p.lmu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		p.lmu.Lock()
		for lc := range p.lean {
			if force || lc.state.CompareAndSwap(connIdle, connClosed) ||
				time.Since(lc.opened) >= newConnGrace && lc.state.CompareAndSwap(connNew, connClosed) {
				lc.c.Close()
			}
		}
		n := len(p.lean)
		p.lmu.Unlock()
		if n == 0 || force {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
