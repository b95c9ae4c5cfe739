// Package l7proxy is the node's HTTP proxy for L7 listeners: the data
// plane steers a connection to an L7 listener's VIP and port to a port of
// this proxy on the client's own node (the listener's steering port, one
// per VIP and port), where the proxy applies the listener's L7 policies
// and the chosen pool's algorithm and persistence, and forwards the
// request to the member directly. One proxy, in the agent, serves every
// L7 listener of the node; its configuration is replaced whole and
// atomically, so a request sees one revision, and requests in flight
// finish on the one they started with.
package l7proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/httpserve"
)

// Options configure a Proxy.
type Options struct {
	// Listen opens the socket of a steering port; nil listens on every
	// address of the node ("[::]:port", both families).
	Listen func(port uint16) (net.Listener, error)
	// Dialer connects to members; nil is a net.Dialer.
	Dialer *net.Dialer
	Log    *slog.Logger
	// Engine serves the client connections (the zero value: the lean
	// engine, with net/http for what it does not take).
	Engine Engine
}

// Listener is an L7 listener as the node serves it at one of its
// addresses.
type Listener struct {
	// VIP is the address and port clients connect to.
	VIP    netip.AddrPort
	Config flows.L7
}

// Proxy is the node's L7 proxy.
type Proxy struct {
	// routes are the compiled listeners by steering port.
	routes atomic.Pointer[map[uint16]*router]
	listen func(uint16) (net.Listener, error)
	rp     *httputil.ReverseProxy
	srv    *http.Server
	log    *slog.Logger
	dial   func(context.Context, string, string) (net.Conn, error)
	dialer *net.Dialer
	m      *metrics
	engine Engine

	// lean are the client connections the lean engine serves; draining
	// is set when they are to close once answered. ho gives the net/http
	// server those the lean engine passes on.
	lmu      sync.Mutex
	lean     map[*leanConn]struct{}
	draining atomic.Bool
	ho       *handoffListener
	hoOnce   sync.Once
	// memberConns are the lean engine's idle member connections, by
	// member address.
	mmu         sync.Mutex
	memberConns map[string]*memberIdle

	mu     sync.Mutex // serializes Set and Close
	socks  map[uint16]net.Listener
	closed bool

	cmu      sync.Mutex
	counters map[counterKey]*memberCounters

	// transports are those of the pools that speak TLS to their
	// members, by their TLS configuration (memberTLS.key).
	tmu        sync.Mutex
	transports map[[sha256.Size]byte]*http.Transport

	// idle are the timers that close a client's connection when it has
	// been idle for its listener's timeout_client_data; clients, what
	// the proxy keeps of each client connection.
	imu     sync.Mutex
	idle    map[net.Conn]*time.Timer
	clients map[net.Conn]*clientConn
}

// New returns a proxy with no listener.
func New(o Options) *Proxy {
	p := &Proxy{listen: o.Listen, log: o.Log, socks: map[uint16]net.Listener{}, counters: map[counterKey]*memberCounters{},
		idle: map[net.Conn]*time.Timer{}, clients: map[net.Conn]*clientConn{}, m: newMetrics(),
		transports: map[[sha256.Size]byte]*http.Transport{}, engine: o.Engine, lean: map[*leanConn]struct{}{},
		ho: newHandoffListener(), memberConns: map[string]*memberIdle{}}
	if p.listen == nil {
		p.listen = func(port uint16) (net.Listener, error) { return net.Listen("tcp", ":"+strconv.Itoa(int(port))) }
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	d := o.Dialer
	if d == nil {
		d = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	p.dialer = d
	p.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if st := stateFrom(ctx); st != nil && st.route.cfg.ConnectTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, st.route.cfg.ConnectTimeout)
			defer cancel()
		}
		return d.DialContext(ctx, network, addr)
	}
	tr := &http.Transport{
		DialContext:         p.dial,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		// Members speak HTTP/1.1: the amphora's HAProxy connects to them
		// the same way unless the pool asks for ALPN.
		ForceAttemptHTTP2: false,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      memberTimeout{base: tr, dial: p.dial},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.proxyError,
		BufferPool:     copyBuffers{},
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.srv = &http.Server{
		Handler: p,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			cc := &clientConn{conn: c}
			p.imu.Lock()
			p.clients[c] = cc
			p.imu.Unlock()
			ctx = context.WithValue(ctx, clientKey{}, cc)
			if rc, ok := c.(*replayConn); ok && rc.tls != nil {
				ctx = context.WithValue(ctx, tlsStateKey{}, rc.tls)
			}
			if port, ok := portOf(c); ok {
				return context.WithValue(ctx, portKey{}, port)
			}
			return ctx
		},
		ConnState:         p.connState,
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	empty := map[uint16]*router{}
	p.routes.Store(&empty)
	return p
}

// Set replaces the proxy's whole configuration: the listeners by
// steering port. It opens the ports that are new and closes those no
// longer listed (their established connections finish what they are
// doing). When a listener cannot be served, or a port cannot be opened,
// the error names it and the configuration in place stays whole.
func (p *Proxy) Set(listeners map[uint16]Listener) error {
	next := make(map[uint16]*router, len(listeners))
	prev := *p.routes.Load()
	for port, l := range listeners {
		// A listener that did not change keeps its compiled routes, and
		// with them its rotation and its members' open requests.
		if r := prev[port]; r != nil && r.vip == l.VIP && r.cfg.Equal(&l.Config) {
			next[port] = r
			continue
		}
		r, err := compile(l.Config)
		if err != nil {
			return fmt.Errorf("L7 listener %s (port %d): %w", l.VIP, port, err)
		}
		r.vip = l.VIP
		p.attach(r)
		next[port] = r
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("L7 proxy: closed")
	}
	opened := map[uint16]net.Listener{}
	for _, port := range slices.Sorted(maps.Keys(next)) {
		if _, open := p.socks[port]; open {
			continue
		}
		l, err := p.listen(port)
		if err != nil {
			for _, o := range opened {
				o.Close()
			}
			return fmt.Errorf("L7 listener %s: steering port %d: %w", next[port].vip, port, err)
		}
		opened[port] = steeredListener{Listener: l, port: port, proxy: p}
	}
	p.routes.Store(&next)
	p.dropTransports(next)
	p.dropMemberConns(next)
	for port, l := range p.socks {
		if _, keep := next[port]; !keep {
			l.Close()
			delete(p.socks, port)
		}
	}
	for port, l := range opened {
		p.socks[port] = l
		go p.serve(l, p.engine == EngineNetHTTP)
	}
	return nil
}

// serve serves a steering port's connections, with net/http's server or
// the lean engine.
func (p *Proxy) serve(l net.Listener, netHTTP bool) {
	var err error
	if netHTTP {
		err = p.srv.Serve(l)
	} else {
		err = p.serveLean(l)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		p.log.Warn("L7 proxy: a steering port stopped", "at", l.Addr(), "err", err)
	}
}

// Ports are the steering ports open now, sorted.
func (p *Proxy) Ports() []uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.socks))
}

// Drain stops taking connections (the steering ports close, idle
// kept-alive connections with them) and waits until the requests being
// served are answered, or ctx ends; then Close ends what is left. What an
// agent does when it stops: the kernel's steering stays, so a new
// connection is refused until the next agent serves the ports, but no
// request in flight is cut.
func (p *Proxy) Drain(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	for _, l := range p.socks {
		l.Close()
	}
	p.socks = map[uint16]net.Listener{}
	p.mu.Unlock()
	p.ho.Close()
	leanErr := make(chan error, 1)
	go func() { leanErr <- p.drainLean(ctx, false) }()
	err := p.srv.Shutdown(ctx)
	return errors.Join(err, <-leanErr)
}

// Close closes every port and connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, l := range p.socks {
		l.Close()
	}
	p.socks = map[uint16]net.Listener{}
	p.dropTransports(nil)
	p.ho.Close()
	p.drainLean(context.Background(), true)
	p.dropMemberConns(nil)
	return p.srv.Close()
}

// connState closes a client's connection that waits for a request
// longer than its listener's ClientTimeout (timeout_client_data), as
// HAProxy's "timeout client" does: from its opening to the first
// request, and between requests; a request being served stops the
// clock.
func (p *Proxy) connState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		p.m.connections.Add(1)
	case http.StateClosed, http.StateHijacked:
		p.m.connections.Add(-1)
	}
	p.imu.Lock()
	defer p.imu.Unlock()
	if t := p.idle[c]; t != nil {
		t.Stop()
		delete(p.idle, c)
	}
	if state == http.StateClosed || state == http.StateHijacked {
		if cc := p.clients[c]; cc != nil {
			cc.close()
			delete(p.clients, c)
		}
	}
	if state != http.StateNew && state != http.StateIdle {
		return
	}
	port, ok := portOf(c)
	if !ok {
		return
	}
	r := (*p.routes.Load())[port]
	if r == nil || r.cfg.ClientTimeout <= 0 {
		return
	}
	p.idle[c] = time.AfterFunc(r.cfg.ClientTimeout, func() { c.Close() })
}

// Check reports whether an L7 configuration can be served, without
// serving it: what the server's provider asks before accepting it.
func Check(cfg flows.L7) error {
	_, err := compile(cfg)
	return err
}

// steeredListener marks its connections with its steering port, which
// names the listener they are for, and starts TLS on those of a listener
// that terminates it.
type steeredListener struct {
	net.Listener
	port  uint16
	proxy *Proxy
}

func (l steeredListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := steeredConn{Conn: c, port: l.port}
	if r := (*l.proxy.routes.Load())[l.port]; r != nil && r.tls != nil {
		return tls.Server(sc, r.tls.config), nil
	}
	return sc, nil
}

// portOf is the steering port a client connection came to, under its
// TLS if it has one.
func portOf(c net.Conn) (uint16, bool) {
	for {
		switch cc := c.(type) {
		case steeredConn:
			return cc.port, true
		case *tls.Conn:
			c = cc.NetConn()
		case *replayConn:
			c = cc.Conn
		default:
			return 0, false
		}
	}
}

type steeredConn struct {
	net.Conn
	port uint16
}

type portKey struct{}

// tlsStateKey holds the TLS state of a connection the lean engine handed
// over after its handshake, which net/http's server does not see.
type tlsStateKey struct{}

// reqState is what the proxy decided for a request, carried to the
// reverse proxy's hooks.
type reqState struct {
	route     *router
	client    netip.Addr
	pool      *pool
	backend   *backend
	setCookie bool
	// fromMember: the answer is the member's (ModifyResponse saw it).
	fromMember bool
}

type stateKey struct{}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

// ServeHTTP routes one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	sw := &httpserve.StatusRecorder{ResponseWriter: w}
	w = sw
	var st *reqState
	defer func() { p.m.answered(sw.Status, st != nil && st.fromMember) }()
	if cs, ok := req.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok && req.TLS == nil {
		req = req.WithContext(req.Context())
		req.TLS = cs
	}
	port, _ := req.Context().Value(portKey{}).(uint16)
	r := (*p.routes.Load())[port]
	if r == nil {
		// The listener was removed while its client kept the
		// connection open.
		w.Header().Set("Connection", "close")
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	if req.TLS != nil && r.tls != nil {
		// A certificate that did not verify ended the handshake.
		req = req.WithContext(withVerifyResult(req.Context(), 0))
		if r.tls.hsts != "" {
			w = hstsWriter{ResponseWriter: w, value: r.tls.hsts}
		}
	}
	d := r.decide(req)
	if d.pool == nil {
		if d.location != "" {
			w.Header().Set("Location", d.location)
			w.WriteHeader(d.status)
			return
		}
		http.Error(w, http.StatusText(d.status), d.status)
		return
	}
	from := clientAddrPort(req)
	client := from.Addr()
	b, setCookie := d.pool.pick(req, from)
	if b == nil {
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	st = &reqState{route: r, client: client, pool: d.pool, backend: b, setCookie: setCookie}
	b.active.Add(1)
	defer b.active.Add(-1)
	if c := b.counters; c != nil {
		c.requests.Add(1)
		if req.Body != nil && req.Body != http.NoBody {
			req.Body = countingBody{ReadCloser: req.Body, n: &c.bytesIn}
		}
		w = countingWriter{ResponseWriter: w, n: &c.bytesOut}
	}
	p.rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), stateKey{}, st)))
}

// clientAddrPort is the client's address and port, an IPv4-mapped
// address as the IPv4 one.
func clientAddrPort(req *http.Request) netip.AddrPort {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// forwardedHeaders are the headers ReverseProxy removes before Rewrite;
// a client's own are kept unless the listener inserts its own, as HAProxy
// keeps them.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	st := stateFrom(pr.In.Context())
	pr.Out.URL.Scheme = "http"
	if st.pool.tls != nil {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = st.backend.hostPort
	pr.Out.Host = pr.In.Host
	for _, h := range forwardedHeaders {
		if v := pr.In.Header.Values(h); len(v) > 0 {
			pr.Out.Header[h] = append([]string(nil), v...)
		}
	}
	for _, h := range st.route.insert {
		switch http.CanonicalHeaderKey(h) {
		case "X-Forwarded-For":
			if st.client.IsValid() {
				pr.Out.Header.Add("X-Forwarded-For", st.client.String())
			}
		case "X-Forwarded-Port":
			pr.Out.Header.Set("X-Forwarded-Port", strconv.Itoa(int(st.route.vip.Port())))
		case "X-Forwarded-Proto":
			proto := "http"
			if pr.In.TLS != nil {
				proto = "https"
			}
			pr.Out.Header.Set("X-Forwarded-Proto", proto)
		default:
			if f := sslHeaders[http.CanonicalHeaderKey(h)]; f != nil && pr.In.TLS != nil {
				// The listener's value replaces the client's, as
				// HAProxy's set-header does: a client without a
				// certificate does not name one to the member.
				if v := f(pr.In.TLS); v != "" {
					pr.Out.Header.Set(h, v)
				} else {
					pr.Out.Header.Del(h)
				}
			}
		}
	}
	if sp := st.pool.persist; sp != nil && sp.Type == flows.PersistHTTPCookie {
		removeCookie(pr.Out, HTTPCookie)
	}
}

// removeCookie drops one cookie from a request's Cookie headers (the
// amphora's "indirect": the member never sees the proxy's cookie).
func removeCookie(req *http.Request, name string) {
	cookies := req.Cookies()
	req.Header.Del("Cookie")
	for _, c := range cookies {
		if c.Name != name {
			req.AddCookie(c)
		}
	}
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	st := stateFrom(resp.Request.Context())
	if st != nil {
		st.fromMember = true
	}
	if st == nil || st.pool.persist == nil {
		return nil
	}
	switch st.pool.persist.Type {
	case flows.PersistHTTPCookie:
		if st.setCookie {
			resp.Header.Add("Set-Cookie", st.pool.memberCookie(st.backend).String())
			if resp.Header.Get("Cache-Control") == "" {
				resp.Header.Set("Cache-Control", "private")
			}
		}
	case flows.PersistAppCookie:
		for _, c := range resp.Cookies() {
			if c.Name == st.pool.persist.CookieName {
				resp.Header.Add("Set-Cookie", st.pool.memberCookie(st.backend).String())
				break
			}
		}
	}
	return nil
}

var errMemberTimeout = errors.New("member did not answer in time")

// proxyError answers a request the member did not: 504 when it did not
// answer in time, 503 when it could not be reached, 502 otherwise, as
// HAProxy does.
func (p *Proxy) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	status := http.StatusBadGateway
	var op *net.OpError
	switch {
	case errors.Is(err, errMemberTimeout) || errors.Is(context.Cause(req.Context()), errMemberTimeout):
		status = http.StatusGatewayTimeout
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, syscall.ECONNREFUSED), tlsFailure(err):
		// A member that cannot be reached, or whose TLS handshake
		// failed (HAProxy's connection error: 503 too).
		status = http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
		return
	}
	if st := stateFrom(req.Context()); st != nil {
		p.log.Debug("L7 proxy: member failed", "member", st.backend.MemberID, "at", st.backend.hostPort, "err", err)
	}
	http.Error(w, http.StatusText(status), status)
}

// memberTimeout bounds the wait for a member's answer by the listener's
// timeout_member_data, sends a request for a TLS pool on its transport,
// and one for a PROXY pool on the client's own member connections.
type memberTimeout struct {
	base http.RoundTripper
	dial func(context.Context, string, string) (net.Conn, error)
}

func (t memberTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	st := stateFrom(req.Context())
	base := t.base
	if st != nil && st.pool.transport != nil {
		base = st.pool.transport
	}
	if st != nil && st.pool.proxyVersion != 0 {
		cc := clientFrom(req.Context())
		if cc == nil {
			return nil, errors.New("a PROXY pool's request without its client connection")
		}
		tr, ok := cc.transport(st.pool.proxyVersion, st.pool.tls, st.route.vip, t.dial)
		if !ok {
			return nil, errors.New("the client's connection is closed")
		}
		base = tr
	}
	if st == nil || st.route.cfg.MemberTimeout <= 0 {
		return base.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(st.route.cfg.MemberTimeout, func() { cancel(errMemberTimeout) })
	resp, err := base.RoundTrip(req.WithContext(ctx))
	timer.Stop()
	if err != nil {
		if context.Cause(ctx) == errMemberTimeout {
			err = fmt.Errorf("%w: %w", errMemberTimeout, err)
		}
		cancel(nil)
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// copyBuffers lends the reverse proxy its buffers for copying answers:
// without a pool it allocates 32 KiB per request, most of what a
// kept-alive request allocates, and the garbage collector's work grows
// with the request rate.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// tlsFailure reports whether err is a failed TLS handshake with a
// member: its certificate refused, an alert it sent (one refusing the
// proxy's certificate comes after TLS 1.3's handshake, with the
// answer), or no TLS at all.
func tlsFailure(err error) bool {
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var op *net.OpError
	return errors.Is(err, errMemberCert) || errors.As(err, &alert) || errors.As(err, &verify) || errors.As(err, &header) ||
		errors.As(err, &op) && op.Op == "remote error"
}
