package l7proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/pires/go-proxyproto"
)

// clientConn is what the proxy keeps of one client connection: the
// member connections it opened for it to PROXY and PROXYV2 pools, whose
// header names this client, so that no other client's request goes on
// them.
type clientConn struct {
	conn       net.Conn
	mu         sync.Mutex
	transports map[proxiedKey]*http.Transport
	closed     bool
}

// proxiedKey names a client's transport: the PROXY header's version and
// the TLS spoken after it (nil: none).
type proxiedKey struct {
	version byte
	tls     *memberTLS
}

type clientKey struct{}

func clientFrom(ctx context.Context) *clientConn {
	cc, _ := ctx.Value(clientKey{}).(*clientConn)
	return cc
}

// transport is the client's transport to members that read a PROXY
// header of version v, naming the client and the listener's VIP, and
// then speak TLS as m says (nil: no TLS).
func (cc *clientConn) transport(v byte, m *memberTLS, vip netip.AddrPort, dial func(context.Context, string, string) (net.Conn, error)) (*http.Transport, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		return nil, false
	}
	k := proxiedKey{version: v, tls: m}
	if t := cc.transports[k]; t != nil {
		return t, true
	}
	src := unmapped(cc.conn.RemoteAddr())
	dst := &net.TCPAddr{IP: vip.Addr().Unmap().AsSlice(), Port: int(vip.Port())}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if _, err := proxyproto.HeaderProxyFromAddrs(v, src, dst).WriteTo(c); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	if m != nil {
		m.configure(t)
	}
	if cc.transports == nil {
		cc.transports = map[proxiedKey]*http.Transport{}
	}
	cc.transports[k] = t
	return t, true
}

// close closes the member connections the client's own transports hold.
func (cc *clientConn) close() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.closed = true
	for _, t := range cc.transports {
		t.CloseIdleConnections()
	}
}

// unmapped is a TCP address with an IPv4-mapped IPv6 address as the IPv4
// one (a dual-stack socket's view of an IPv4 client), as a PROXY header
// needs both of its addresses in one family.
func unmapped(a net.Addr) net.Addr {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return a
	}
	ap := t.AddrPort()
	return &net.TCPAddr{IP: ap.Addr().Unmap().AsSlice(), Port: int(ap.Port())}
}
