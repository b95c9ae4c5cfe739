package l7proxy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// scaleConfig is n HTTP listeners of members members each, with a host
// policy to a second pool of as many members, as an Ingress makes them.
func scaleConfig(n, members int) map[uint16]Listener {
	out := make(map[uint16]Listener, n)
	for i := range n {
		var web, api []flows.Backend
		for m := range members {
			web = append(web, flows.Backend{MemberID: fmt.Sprintf("w-%d-%d", i, m), Address: netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(m + 1)}), Port: 8080, Weight: 1})
			api = append(api, flows.Backend{MemberID: fmt.Sprintf("a-%d-%d", i, m), Address: netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(m + 1)}), Port: 8080, Weight: 1})
		}
		out[uint16(20000+i)] = Listener{VIP: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 200 + byte(i/250), byte(i % 250)}), 80), Config: flows.L7{
			DefaultPool: "web",
			Pools:       []flows.L7Pool{{ID: "web", Algorithm: flows.RoundRobin, Backends: web}, {ID: "api", Algorithm: flows.LeastConnections, Backends: api}},
			Policies: []flows.L7Policy{{ID: "api", Action: flows.L7RedirectToPool, Pool: "api", Rules: []flows.L7Rule{
				{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: fmt.Sprintf("api-%d.example", i)},
				{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/v1/"}}}},
			InsertHeaders: []string{"X-Forwarded-For"},
		}}
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkProxyAt1000Listeners: the proxy's heap with 1,000 HTTP
// listeners of 2 pools × 10 members each, their steering ports open on
// loopback, and the time of a Set that changes one policy of one of
// them (what an L7 change costs a node).
func BenchmarkProxyAt1000Listeners(b *testing.B) {
	const n, members = 1000, 10
	before := heapInUse()
	p := New(Options{Listen: func(uint16) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }})
	defer p.Close()
	cfg := scaleConfig(n, members)
	t0 := time.Now()
	if err := p.Set(cfg); err != nil {
		b.Fatal(err)
	}
	first := time.Since(t0)
	held := heapInUse() - before
	b.ResetTimer()
	for i := range b.N {
		l := cfg[20000]
		pol := l.Config.Policies[0]
		pol.Rules = []flows.L7Rule{{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: fmt.Sprintf("api-%d.example", i)}}
		l.Config.Policies = []flows.L7Policy{pol}
		cfg[20000] = l
		if err := p.Set(cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(held)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(first.Milliseconds()), "first-set-ms")
}

// BenchmarkProxyRequest: one kept-alive GET of a 1 KiB answer through
// the proxy to a member on loopback, with X-Forwarded-For inserted, from
// parallel clients: the proxy's CPU and allocations per request, with
// each engine.
func BenchmarkProxyRequest(b *testing.B) {
	b.Run("lean", func(b *testing.B) { benchmarkProxyRequest(b, EngineLean, false, false) })
	b.Run("nethttp", func(b *testing.B) { benchmarkProxyRequest(b, EngineNetHTTP, false, false) })
	// A host-and-path policy that does not match, as an Ingress makes
	// them: the lean engine builds the request its rules read.
	b.Run("lean-rules", func(b *testing.B) { benchmarkProxyRequest(b, EngineLean, true, false) })
}

// BenchmarkProxyRequestTLS: BenchmarkProxyRequest on a TERMINATED_HTTPS
// listener (an ECDSA P-256 certificate, HTTP/1.1 by ALPN), its
// connections kept alive, so that the handshakes are a small part: with
// each engine.
func BenchmarkProxyRequestTLS(b *testing.B) {
	b.Run("lean", func(b *testing.B) { benchmarkProxyRequest(b, EngineLean, false, true) })
	b.Run("nethttp", func(b *testing.B) { benchmarkProxyRequest(b, EngineNetHTTP, false, true) })
}

func benchmarkProxyRequest(b *testing.B, e Engine, rules, terminate bool) {
	body := strings.Repeat("x", 1024)
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	defer member.Close()
	ap := netip.MustParseAddrPort(strings.TrimPrefix(member.URL, "http://"))
	lp := &loopbackPorts{at: map[uint16]netip.AddrPort{}}
	p := New(Options{Listen: lp.listen, Engine: e})
	defer p.Close()
	cfg := flows.L7{
		DefaultPool:   "web",
		Pools:         []flows.L7Pool{{ID: "web", Algorithm: flows.RoundRobin, Backends: []flows.Backend{{MemberID: "m", Address: ap.Addr(), Port: ap.Port(), Weight: 1}}}},
		InsertHeaders: []string{"X-Forwarded-For"},
	}
	if rules {
		cfg.Policies = []flows.L7Policy{{ID: "api", Action: flows.L7Reject, Rules: []flows.L7Rule{
			{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "api.example"},
			{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/v1/"}}}}
	}
	scheme := "http"
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	if terminate {
		ca := newTestCA(b, "ca")
		cfg.TLS = &flows.L7TLS{Certificates: []flows.L7Certificate{ca.issue(b, pkix.Name{CommonName: "www.example"}, false, "www.example")},
			ALPN: []string{"h2", "http/1.1"}, HSTSMaxAge: -1}
		roots := x509.NewCertPool()
		roots.AddCert(ca.cert)
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, ServerName: "www.example", NextProtos: []string{"http/1.1"}}
		scheme = "https"
	}
	if err := p.Set(map[uint16]Listener{20000: {VIP: netip.MustParseAddrPort("198.18.0.10:80"), Config: cfg}}); err != nil {
		b.Fatal(err)
	}
	url := scheme + "://" + lp.addr(20000).String() + "/page"
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := hc.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || n != 1024 {
				b.Errorf("answer %d of %d bytes", resp.StatusCode, n)
				return
			}
		}
	})
}
