package l7proxy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// tlsMember is a member on loopback that speaks TLS with cert, asks
// for a client certificate from clientCA when it is set, and answers
// with the HTTP version, the client certificate's CN and its connection.
type tlsMember struct {
	srv      *httptest.Server
	accepted atomic.Int64
}

func startTLSMember(t *testing.T, cert flows.L7Certificate, clientCA *testCA, h2 bool, proxied bool) *tlsMember {
	t.Helper()
	m := &tlsMember{}
	m.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		fmt.Fprintf(w, "member=tls\nproto=%s\ncn=%s\npeer=%s\n", r.Proto, cn, r.RemoteAddr)
	}))
	m.srv.TLS = &tls.Config{Certificates: []tls.Certificate{clientPair(t, cert)}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		m.srv.TLS.ClientAuth, m.srv.TLS.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	m.srv.EnableHTTP2 = h2
	// The refused handshakes are expected.
	m.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	m.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			m.accepted.Add(1)
		}
	}
	if proxied {
		m.srv.Listener = &proxyproto.Listener{Listener: m.srv.Listener}
	}
	m.srv.StartTLS()
	t.Cleanup(m.srv.Close)
	return m
}

func (m *tlsMember) backend() flows.Backend {
	ap := netip.MustParseAddrPort(m.srv.Listener.Addr().String())
	return flows.Backend{MemberID: "tls", Address: ap.Addr(), Port: ap.Port(), Weight: 1}
}

// TestMemberTLS: a pool's TLS to its members: verified against the
// pool's CA or not at all without one; a member certificate from
// another CA or revoked is refused (503); the pool's certificate is
// presented to a member that asks for one; h2 is spoken when ALPN
// offers it; member connections are kept alive, also to PROXY pools.
func TestMemberTLS(t *testing.T) { forEngines(t, testMemberTLS) }

func testMemberTLS(t *testing.T) {
	membersCA, otherCA, clientCA := newTestCA(t, "members CA"), newTestCA(t, "other CA"), newTestCA(t, "client CA")
	good := membersCA.issue(t, pkix.Name{CommonName: "member"}, false)
	revoked := membersCA.issue(t, pkix.Name{CommonName: "revoked member"}, false)
	revokedSerial := membersCA.serial
	client := clientCA.issue(t, pkix.Name{CommonName: "flowlb proxy"}, true)
	for _, tc := range []struct {
		name        string
		member      flows.L7Certificate
		askClientCA bool
		h2, proxied bool
		tls         flows.L7PoolTLS
		status      int
		proto, cn   string
	}{
		{name: "verified", member: good, tls: flows.L7PoolTLS{CA: membersCA.pem}, status: 200, proto: "HTTP/1.1"},
		{name: "not verified without a CA", member: otherCA.issue(t, pkix.Name{CommonName: "m"}, false), status: 200, proto: "HTTP/1.1"},
		{name: "another CA", member: otherCA.issue(t, pkix.Name{CommonName: "m"}, false), tls: flows.L7PoolTLS{CA: membersCA.pem}, status: 503},
		{name: "revoked", member: revoked, tls: flows.L7PoolTLS{CA: membersCA.pem, CRL: membersCA.crl(t, revokedSerial)}, status: 503},
		{name: "a CRL revoking another", member: good, tls: flows.L7PoolTLS{CA: membersCA.pem, CRL: membersCA.crl(t, revokedSerial)}, status: 200, proto: "HTTP/1.1"},
		{name: "client certificate presented", member: good, askClientCA: true,
			tls: flows.L7PoolTLS{CA: membersCA.pem, Certificate: &client}, status: 200, proto: "HTTP/1.1", cn: "flowlb proxy"},
		{name: "no client certificate for a member that wants one", member: good, askClientCA: true, tls: flows.L7PoolTLS{CA: membersCA.pem}, status: 503},
		{name: "h2 by ALPN", member: good, h2: true, tls: flows.L7PoolTLS{CA: membersCA.pem, ALPN: []string{"h2", "http/1.1"}}, status: 200, proto: "HTTP/2.0"},
		{name: "http/1.1 by ALPN to an h2 member", member: good, h2: true, tls: flows.L7PoolTLS{ALPN: []string{"http/1.1"}}, status: 200, proto: "HTTP/1.1"},
		{name: "no ALPN to an h2 member", member: good, h2: true, status: 200, proto: "HTTP/1.1"},
		{name: "h2 alone by ALPN", member: good, h2: true, tls: flows.L7PoolTLS{ALPN: []string{"h2"}}, status: 200, proto: "HTTP/2.0"},
		{name: "h2 alone by ALPN to an HTTP/1.1 member", member: good, tls: flows.L7PoolTLS{ALPN: []string{"h2"}}, status: 200, proto: "HTTP/1.1"},
		{name: "TLS 1.3 only", member: good, tls: flows.L7PoolTLS{Versions: []string{"TLSv1.3"}}, status: 200, proto: "HTTP/1.1"},
		{name: "PROXY header then TLS", member: good, proxied: true, tls: flows.L7PoolTLS{CA: membersCA.pem, Certificate: &client},
			askClientCA: true, status: 200, proto: "HTTP/1.1", cn: "flowlb proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ask *testCA
			if tc.askClientCA {
				ask = clientCA
			}
			m := startTLSMember(t, tc.member, ask, tc.h2, tc.proxied)
			p, lp := startProxy(t)
			pool := flows.L7Pool{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}, TLS: &tc.tls}
			if tc.proxied {
				pool.ProxyProtocol = 2
			}
			if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{pool}}}}); err != nil {
				t.Fatal(err)
			}
			c := noRedirects()
			for i := range 3 {
				a := get(t, c, lp.addr(1), "www.example", "/")
				if a.status != tc.status {
					t.Fatalf("request %d: status %d, want %d (%v)", i+1, a.status, tc.status, a.fields)
				}
				if tc.status != 200 {
					return
				}
				if a.fields["member"] != "tls" || a.fields["proto"] != tc.proto || a.fields["cn"] != tc.cn {
					t.Errorf("request %d: the member saw %v, want %s and client certificate %q", i+1, a.fields, tc.proto, tc.cn)
				}
			}
			// One, but for Go's transport dialing anew when a request
			// comes before the previous connection is back among the
			// idle ones.
			if n := m.accepted.Load(); n >= 3 {
				t.Errorf("the member accepted %d connections for three requests, want them kept alive", n)
			}
		})
	}
}

// TestMemberTLSTransports: pools with one TLS share a transport, which
// outlives a change of the listener's other fields (its member
// connections stay open); a transport no pool uses is dropped.
func TestMemberTLSTransports(t *testing.T) { forEngines(t, testMemberTLSTransports) }

func testMemberTLSTransports(t *testing.T) {
	ca := newTestCA(t, "members CA")
	m := startTLSMember(t, ca.issue(t, pkix.Name{CommonName: "member"}, false), nil, false, false)
	p, lp := startProxy(t)
	pool := func(id string, t *flows.L7PoolTLS) flows.L7Pool {
		return flows.L7Pool{ID: id, Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}, TLS: t}
	}
	same := flows.L7PoolTLS{CA: ca.pem}
	cfg := flows.L7{DefaultPool: "a", Pools: []flows.L7Pool{pool("a", &same), pool("b", &flows.L7PoolTLS{CA: ca.pem})}}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	if n := len(p.transports); n != 1 {
		t.Fatalf("%d transports for two pools of one TLS, want 1", n)
	}
	c := noRedirects()
	if a := get(t, c, lp.addr(1), "x", "/"); a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	cfg.InsertHeaders = []string{"X-Forwarded-For"}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	if a := get(t, c, lp.addr(1), "x", "/"); a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	if n := m.accepted.Load(); n != 1 {
		t.Errorf("the member accepted %d connections across a change of the listener, want 1", n)
	}
	cfg.Pools = []flows.L7Pool{pool("a", &flows.L7PoolTLS{CA: ca.pem, Versions: []string{"TLSv1.3"}})}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	if n := len(p.transports); n != 1 {
		t.Errorf("%d transports after the pools' TLS changed, want 1 (the old one dropped)", n)
	}
	if err := p.Set(nil); err != nil {
		t.Fatal(err)
	}
	if n := len(p.transports); n != 0 {
		t.Errorf("%d transports with no listener", n)
	}
}

// TestCompileMemberTLS: what a pool's TLS cannot be is refused, naming
// it.
func TestCompileMemberTLS(t *testing.T) {
	ca := newTestCA(t, "ca")
	cert := ca.issue(t, pkix.Name{CommonName: "c"}, true)
	for _, tc := range []struct {
		name string
		tls  flows.L7PoolTLS
		want string
	}{
		{"a CA that is no certificate", flows.L7PoolTLS{CA: []byte("junk")}, "the members' CA holds no certificate"},
		{"a CRL without a CA", flows.L7PoolTLS{CRL: ca.crl(t)}, "CRL without a CA"},
		{"a key of another certificate", flows.L7PoolTLS{Certificate: &flows.L7Certificate{Chain: cert.Chain, Key: ca.issue(t, pkix.Name{CommonName: "d"}, true).Key}},
			"the certificate presented to members"},
		{"SSLv3", flows.L7PoolTLS{Versions: []string{"SSLv3"}}, `TLS version "SSLv3" is not supported`},
		{"a gap", flows.L7PoolTLS{Versions: []string{"TLSv1.1", "TLSv1.3"}}, "leave a gap"},
		{"an unknown ALPN protocol", flows.L7PoolTLS{ALPN: []string{"spdy/3"}}, `ALPN protocol "spdy/3"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(flows.L7{Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, TLS: &tc.tls}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "pool p: TLS to members") {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if err := Check(flows.L7{Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, TLS: &flows.L7PoolTLS{CA: ca.pem, CRL: ca.crl(t), Certificate: &cert,
		ALPN: []string{"h2", "http/1.1", "http/1.0"}, Versions: []string{"TLSv1.2", "TLSv1.3"}}}}}); err != nil {
		t.Errorf("every field: %v", err)
	}
}

// BenchmarkProxyMembers: one request through the proxy (a kept-alive
// client connection) to a member on loopback in plain HTTP, over TLS
// (HTTP/1.1, member verified against its CA) and over TLS in h2: what
// TLS to members costs a request once its connection is open.
func BenchmarkProxyMembers(b *testing.B) {
	ca := newTestCA(b, "members CA")
	cert := ca.issue(b, pkix.Name{CommonName: "member"}, false)
	for _, bc := range []struct {
		name string
		tls  *flows.L7PoolTLS
	}{
		{"plain", nil},
		{"tls", &flows.L7PoolTLS{CA: ca.pem}},
		{"tls-h2", &flows.L7PoolTLS{CA: ca.pem, ALPN: []string{"h2"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var backend flows.Backend
			if bc.tls == nil {
				m := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
				defer m.Close()
				ap := netip.MustParseAddrPort(m.Listener.Addr().String())
				backend = flows.Backend{MemberID: "m", Address: ap.Addr(), Port: ap.Port(), Weight: 1}
			} else {
				m := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
				pair, err := tls.X509KeyPair(cert.Chain, cert.Key)
				if err != nil {
					b.Fatal(err)
				}
				m.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
				m.EnableHTTP2 = true
				m.StartTLS()
				defer m.Close()
				ap := netip.MustParseAddrPort(m.Listener.Addr().String())
				backend = flows.Backend{MemberID: "m", Address: ap.Addr(), Port: ap.Port(), Weight: 1}
			}
			lp := &loopbackPorts{at: map[uint16]netip.AddrPort{}}
			p := New(Options{Listen: lp.listen})
			defer p.Close()
			cfg := flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{backend}, TLS: bc.tls}}}
			if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
				b.Fatal(err)
			}
			c := &http.Client{Timeout: 10 * time.Second}
			url := "http://" + lp.addr(1).String() + "/"
			b.ResetTimer()
			for range b.N {
				resp, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
