// Package l7proxy is the node's HTTP proxy for L7 listeners: the data
// plane steers a connection to an L7 listener's VIP and port to this
// proxy on the client's own node, which applies the listener's L7
// policies and the chosen pool's algorithm and persistence, and forwards
// the request to the member directly. One proxy serves every L7
// listener of the node, told apart by the address the client connected
// to (the connection's original destination); its configuration is
// replaced whole and atomically, so a request sees one revision, and
// requests in flight finish on the one they started with.
package l7proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Options configure a Proxy.
type Options struct {
	// OriginalDst returns the address a client connected to, before the
	// data plane steered it to the proxy; nil reads it from conntrack
	// (SO_ORIGINAL_DST), falling back to the connection's local address.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Dialer connects to members; nil is a net.Dialer.
	Dialer *net.Dialer
	Log    *slog.Logger
}

// Proxy is the node's L7 proxy.
type Proxy struct {
	routes      atomic.Pointer[map[netip.AddrPort]*router]
	originalDst func(net.Conn) (netip.AddrPort, error)
	rp          *httputil.ReverseProxy
	log         *slog.Logger
}

// New returns a proxy with no listener.
func New(o Options) *Proxy {
	p := &Proxy{originalDst: o.OriginalDst, log: o.Log}
	if p.originalDst == nil {
		p.originalDst = OriginalDst
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	d := o.Dialer
	if d == nil {
		d = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if st := stateFrom(ctx); st != nil && st.route.cfg.ConnectTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, st.route.cfg.ConnectTimeout)
				defer cancel()
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		// Members speak HTTP/1.1: the amphora's HAProxy connects to them
		// the same way unless the pool asks for ALPN.
		ForceAttemptHTTP2: false,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      memberTimeout{tr},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.proxyError,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	empty := map[netip.AddrPort]*router{}
	p.routes.Store(&empty)
	return p
}

// Set replaces the proxy's whole configuration: each L7 listener by the
// VIP and port clients connect to. When one cannot be served the error
// names it and the configuration in place stays.
func (p *Proxy) Set(listeners map[netip.AddrPort]flows.L7) error {
	next := make(map[netip.AddrPort]*router, len(listeners))
	for at, cfg := range listeners {
		r, err := compile(cfg)
		if err != nil {
			return fmt.Errorf("L7 listener %s: %w", at, err)
		}
		next[at] = r
	}
	p.routes.Store(&next)
	return nil
}

// Check reports whether an L7 configuration can be served, without
// serving it: what the server's provider asks before accepting it.
func Check(cfg flows.L7) error {
	_, err := compile(cfg)
	return err
}

// Server returns an HTTP server for the proxy's listening sockets: it
// records each connection's original destination for the handler.
func (p *Proxy) Server() *http.Server {
	return &http.Server{
		Handler: p,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			at, err := p.originalDst(c)
			if err != nil {
				p.log.Debug("L7 proxy: no original destination", "client", c.RemoteAddr(), "err", err)
			}
			return context.WithValue(ctx, dstKey{}, at)
		},
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
}

type dstKey struct{}

// reqState is what the proxy decided for a request, carried to the
// reverse proxy's hooks.
type reqState struct {
	route     *router
	listener  netip.AddrPort
	client    netip.Addr
	pool      *pool
	backend   *backend
	setCookie bool
}

type stateKey struct{}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

// ServeHTTP routes one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at, _ := req.Context().Value(dstKey{}).(netip.AddrPort)
	r := (*p.routes.Load())[at]
	if r == nil {
		http.Error(w, "no L7 listener at "+at.String(), http.StatusServiceUnavailable)
		return
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
	client := clientAddr(req)
	b, setCookie := d.pool.pick(req, client)
	if b == nil {
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	st := &reqState{route: r, listener: at, client: client, pool: d.pool, backend: b, setCookie: setCookie}
	b.active.Add(1)
	defer b.active.Add(-1)
	p.rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), stateKey{}, st)))
}

func clientAddr(req *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// forwardedHeaders are the headers ReverseProxy removes before Rewrite;
// a client's own are kept unless the listener inserts its own, as HAProxy
// keeps them.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	st := stateFrom(pr.In.Context())
	pr.Out.URL.Scheme = "http"
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
			pr.Out.Header.Set("X-Forwarded-Port", strconv.Itoa(int(st.listener.Port())))
		case "X-Forwarded-Proto":
			proto := "http"
			if pr.In.TLS != nil {
				proto = "https"
			}
			pr.Out.Header.Set("X-Forwarded-Proto", proto)
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
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, syscall.ECONNREFUSED):
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
// timeout_member_data.
type memberTimeout struct{ base http.RoundTripper }

func (t memberTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	st := stateFrom(req.Context())
	if st == nil || st.route.cfg.MemberTimeout <= 0 {
		return t.base.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(st.route.cfg.MemberTimeout, func() { cancel(errMemberTimeout) })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
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
