package l7proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// echoMember is a member on loopback that answers with its name and what
// it received of the request.
type echoMember struct {
	name string
	srv  *httptest.Server
}

func startMember(t *testing.T, name string, extra http.HandlerFunc) *echoMember {
	t.Helper()
	m := &echoMember{name: name}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if extra != nil {
			extra(w, r)
		}
		fmt.Fprintf(w, "member=%s\nhost=%s\nuri=%s\nxff=%s\nport=%s\nproto=%s\ncookie=%s\n", name, r.Host, r.RequestURI,
			strings.Join(r.Header.Values("X-Forwarded-For"), ","), r.Header.Get("X-Forwarded-Port"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("Cookie"))
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *echoMember) backend() flows.Backend {
	ap := netip.MustParseAddrPort(strings.TrimPrefix(m.srv.URL, "http://"))
	return flows.Backend{MemberID: m.name, Address: ap.Addr(), Port: ap.Port(), Weight: 1}
}

// loopbackPorts opens each steering port as a fresh port on loopback,
// and tells where.
type loopbackPorts struct {
	mu sync.Mutex
	at map[uint16]netip.AddrPort
	// refuse makes opening this steering port fail.
	refuse uint16
}

func (lp *loopbackPorts) listen(port uint16) (net.Listener, error) {
	if port == lp.refuse {
		return nil, errors.New("address already in use")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.at[port] = netip.MustParseAddrPort(l.Addr().String())
	return l, nil
}

func (lp *loopbackPorts) addr(port uint16) netip.AddrPort {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.at[port]
}

// forEngines runs a test with each engine: subtests "lean" and
// "nethttp", in which startProxy starts a proxy of that engine.
func forEngines(t *testing.T, test func(*testing.T)) {
	t.Run("lean", test)
	t.Run("nethttp", test)
}

// engineOf is the engine of the forEngines subtest t runs in.
func engineOf(t testing.TB) Engine {
	if strings.Contains(t.Name(), "/nethttp") {
		return EngineNetHTTP
	}
	return EngineLean
}

// startProxy starts a proxy whose steering ports are on loopback, of
// the engine of the forEngines subtest t runs in.
func startProxy(t *testing.T) (*Proxy, *loopbackPorts) {
	t.Helper()
	lp := &loopbackPorts{at: map[uint16]netip.AddrPort{}}
	p := New(Options{Listen: lp.listen, Engine: engineOf(t)})
	t.Cleanup(func() { p.Close() })
	return p, lp
}

var vip = netip.MustParseAddrPort("198.18.100.1:80")

type answer struct {
	status int
	header http.Header
	fields map[string]string
}

func get(t *testing.T, c *http.Client, at netip.AddrPort, host, path string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+at.String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, fields: map[string]string{}}
	for line := range strings.SplitSeq(string(body), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			a.fields[k] = v
		}
	}
	return a
}

func noRedirects() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// TestProxyRoutes: requests through the proxy reach the pool their
// policies choose, with the headers the listener inserts; redirects and
// rejects are answered by the proxy.
func TestProxyRoutes(t *testing.T) { forEngines(t, testProxyRoutes) }

func testProxyRoutes(t *testing.T) {
	web1, web2 := startMember(t, "web1", nil), startMember(t, "web2", nil)
	api := startMember(t, "api1", nil)
	p, lp := startProxy(t)
	cfg := flows.L7{
		DefaultPool: "web",
		Pools: []flows.L7Pool{
			{ID: "web", Algorithm: flows.RoundRobin, Backends: []flows.Backend{web1.backend(), web2.backend()}},
			{ID: "api", Algorithm: flows.LeastConnections, Backends: []flows.Backend{api.backend()}},
		},
		Policies: []flows.L7Policy{
			{ID: "api", Action: flows.L7RedirectToPool, Pool: "api", Rules: []flows.L7Rule{{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "api.example"}}},
			{ID: "deny", Action: flows.L7Reject, Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/private"}}},
			{ID: "moved", Action: flows.L7RedirectPrefix, URL: "https://www.example", Code: 301, Rules: []flows.L7Rule{{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "example"}}},
		},
		InsertHeaders: []string{"X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto"},
	}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	c := noRedirects()
	at := lp.addr(1)

	seen := map[string]int{}
	for range 4 {
		a := get(t, c, at, "www.example", "/index.html?x=1")
		if a.status != 200 || a.fields["host"] != "www.example" || a.fields["uri"] != "/index.html?x=1" {
			t.Fatalf("default pool answered %+v", a)
		}
		seen[a.fields["member"]]++
	}
	if seen["web1"] != 2 || seen["web2"] != 2 {
		t.Errorf("round robin over two members: %v", seen)
	}

	a := get(t, c, at, "api.example", "/v1", "X-Forwarded-For", "203.0.113.7")
	if a.fields["member"] != "api1" {
		t.Errorf("api host went to %q", a.fields["member"])
	}
	if want := "203.0.113.7,127.0.0.1"; a.fields["xff"] != want {
		t.Errorf("X-Forwarded-For %q, want %q (the client's own kept, its address added)", a.fields["xff"], want)
	}
	if a.fields["port"] != "80" || a.fields["proto"] != "http" {
		t.Errorf("X-Forwarded-Port %q, -Proto %q; want the VIP's 80, http", a.fields["port"], a.fields["proto"])
	}

	if a := get(t, c, at, "www.example", "/private/x"); a.status != http.StatusForbidden {
		t.Errorf("reject: %d", a.status)
	}
	if a := get(t, c, at, "example", "/a?b=c"); a.status != http.StatusMovedPermanently || a.header.Get("Location") != "https://www.example/a?b=c" {
		t.Errorf("redirect: %d to %q", a.status, a.header.Get("Location"))
	}

	// Without insert_headers the member sees the client's headers only.
	cfg.InsertHeaders = nil
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	if a := get(t, c, at, "www.example", "/", "X-Forwarded-For", "203.0.113.7"); a.fields["xff"] != "203.0.113.7" || a.fields["port"] != "" || a.fields["proto"] != "" {
		t.Errorf("without insert_headers: xff %q port %q proto %q", a.fields["xff"], a.fields["port"], a.fields["proto"])
	}
}

// TestProxySet: a configuration that cannot be served, or a steering
// port that cannot be opened, is refused and the one in place keeps
// serving; a port no longer listed is closed.
func TestProxySet(t *testing.T) { forEngines(t, testProxySet) }

func testProxySet(t *testing.T) {
	m := startMember(t, "m1", nil)
	p, lp := startProxy(t)
	c := noRedirects()
	good := flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}}}}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: good}}); err != nil {
		t.Fatal(err)
	}
	at := lp.addr(1)
	bad := good
	bad.Policies = []flows.L7Policy{{ID: "x", Action: flows.L7Reject, Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareRegex, Value: "(?!a)"}}}}
	err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: bad}})
	if err == nil || !strings.Contains(err.Error(), vip.String()) {
		t.Fatalf("Set(bad) = %v, want an error naming %s", err, vip)
	}
	lp.refuse = 3
	err = p.Set(map[uint16]Listener{2: {VIP: vip, Config: good}, 3: {VIP: netip.MustParseAddrPort("198.18.100.2:80"), Config: good}})
	if err == nil || !strings.Contains(err.Error(), "steering port 3") {
		t.Fatalf("Set with a port that cannot open = %v", err)
	}
	if got := p.Ports(); !slices.Equal(got, []uint16{1}) {
		t.Errorf("ports after refused changes: %v, want [1]", got)
	}
	if a := get(t, c, at, "x", "/"); a.fields["member"] != "m1" {
		t.Errorf("after refused changes: %+v", a)
	}
	lp.refuse = 0
	if err := p.Set(map[uint16]Listener{2: {VIP: vip, Config: good}}); err != nil {
		t.Fatal(err)
	}
	if a := get(t, c, lp.addr(2), "x", "/"); a.fields["member"] != "m1" {
		t.Errorf("on the new port: %+v", a)
	}
	if _, err := net.DialTimeout("tcp", at.String(), time.Second); err == nil {
		t.Error("the removed port still accepts connections")
	}
	if got := p.Ports(); !slices.Equal(got, []uint16{2}) {
		t.Errorf("ports %v, want [2]", got)
	}
}

// TestProxyCookiePersistence: HTTP_COOKIE puts the member in a cookie the
// member never sees; APP_COOKIE adds a member cookie when the member sets
// the application's.
func TestProxyCookiePersistence(t *testing.T) { forEngines(t, testProxyCookiePersistence) }

func testProxyCookiePersistence(t *testing.T) {
	setSession := func(w http.ResponseWriter, r *http.Request) {
		if _, err := r.Cookie("sid"); err != nil {
			http.SetCookie(w, &http.Cookie{Name: "sid", Value: "s-" + r.URL.Path})
		}
	}
	m1, m2 := startMember(t, "m1", setSession), startMember(t, "m2", setSession)
	p, lp := startProxy(t)
	pools := func(typ, name string) flows.L7 {
		return flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin,
			Persistence: &flows.L7Persistence{Type: typ, CookieName: name}, Backends: []flows.Backend{m1.backend(), m2.backend()}}}}
	}
	c := noRedirects()

	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: pools(flows.PersistHTTPCookie, "")}}); err != nil {
		t.Fatal(err)
	}
	at := lp.addr(1)
	first := get(t, c, at, "x", "/")
	cookie := ""
	for _, sc := range (&http.Response{Header: first.header}).Cookies() {
		if sc.Name == HTTPCookie {
			cookie = sc.Name + "=" + sc.Value
		}
	}
	if cookie != HTTPCookie+"="+first.fields["member"] || first.header.Get("Cache-Control") != "private" {
		t.Fatalf("first answer from %s set %q, Cache-Control %q", first.fields["member"], cookie, first.header.Get("Cache-Control"))
	}
	for range 6 {
		a := get(t, c, at, "x", "/", "Cookie", cookie+"; sid=keep")
		if a.fields["member"] != first.fields["member"] || a.fields["cookie"] != "sid=keep" {
			t.Fatalf("with %s: member %s saw cookies %q", cookie, a.fields["member"], a.fields["cookie"])
		}
		if a.header.Get("Set-Cookie") != "" {
			t.Errorf("a kept member set a cookie again: %q", a.header.Get("Set-Cookie"))
		}
	}

	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: pools(flows.PersistAppCookie, "sid")}}); err != nil {
		t.Fatal(err)
	}
	first = get(t, c, at, "x", "/a")
	var jar []string
	for _, sc := range (&http.Response{Header: first.header}).Cookies() {
		jar = append(jar, sc.Name+"="+sc.Value)
	}
	want := []string{"sid=s-/a", "sid" + appCookieSuffix + "=" + first.fields["member"]}
	if strings.Join(jar, "; ") != strings.Join(want, "; ") {
		t.Fatalf("cookies set %v, want %v", jar, want)
	}
	for range 6 {
		if a := get(t, c, at, "x", "/b", "Cookie", strings.Join(jar, "; ")); a.fields["member"] != first.fields["member"] {
			t.Fatalf("with %v: member %s, want %s", jar, a.fields["member"], first.fields["member"])
		}
	}
}

// TestProxyMemberFailures: a member that refuses is 503, one that does
// not answer within the listener's member timeout is 504, and a pool with
// no member is 503.
func TestProxyMemberFailures(t *testing.T) { forEngines(t, testProxyMemberFailures) }

func testProxyMemberFailures(t *testing.T) {
	slow := startMember(t, "slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(2 * time.Second) })
	gone := startMember(t, "gone", nil)
	goneBackend := gone.backend()
	gone.srv.Close()
	p, lp := startProxy(t)
	cfg := flows.L7{
		DefaultPool: "slow",
		Pools: []flows.L7Pool{
			{ID: "slow", Algorithm: flows.RoundRobin, Backends: []flows.Backend{slow.backend()}},
			{ID: "gone", Algorithm: flows.RoundRobin, Backends: []flows.Backend{goneBackend}},
			{ID: "none", Algorithm: flows.RoundRobin},
		},
		Policies: []flows.L7Policy{
			{ID: "gone", Action: flows.L7RedirectToPool, Pool: "gone", Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareEqualTo, Value: "/gone"}}},
			{ID: "none", Action: flows.L7RedirectToPool, Pool: "none", Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareEqualTo, Value: "/none"}}},
		},
		MemberTimeout: 300 * time.Millisecond,
	}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	at := lp.addr(1)
	c := noRedirects()
	for _, tc := range []struct {
		path string
		want int
	}{{"/gone", http.StatusServiceUnavailable}, {"/none", http.StatusServiceUnavailable}, {"/", http.StatusGatewayTimeout}} {
		if a := get(t, c, at, "x", tc.path); a.status != tc.want {
			t.Errorf("%s: %d, want %d", tc.path, a.status, tc.want)
		}
	}
}

// TestProxyStats: the proxy counts, per listener and member, the requests
// it forwarded and their bodies' bytes, each read returning what came
// since the previous one; a Set loses nothing counted, and a listener no
// longer served is forgotten once read.
func TestProxyStats(t *testing.T) { forEngines(t, testProxyStats) }

func testProxyStats(t *testing.T) {
	m1, m2 := startMember(t, "m1", nil), startMember(t, "m2", nil)
	p, lp := startProxy(t)
	cfg := flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m1.backend(), m2.backend()}}}}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	c := noRedirects()
	at := lp.addr(1)
	for range 4 {
		get(t, c, at, "x", "/")
	}
	resp, err := c.Post("http://"+at.String()+"/", "text/plain", strings.NewReader("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The same listener again: what was counted stays.
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	read, err := p.ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	key := flows.Key{VIP: vip.Addr(), Protocol: flows.TCP, Port: vip.Port()}
	st := read[key]
	if len(read) != 1 || len(st.Members) != 2 {
		t.Fatalf("read %+v", read)
	}
	var requests, in, out uint64
	for _, m := range []*echoMember{m1, m2} {
		b := m.backend()
		mc := st.Members[netip.AddrPortFrom(b.Address, b.Port)]
		requests, in, out = requests+mc.Connections, in+mc.BytesIn, out+mc.BytesOut
		if mc.Connections < 2 || mc.BytesOut == 0 {
			t.Errorf("member %s: %+v", m.name, mc)
		}
	}
	if requests != 5 || in != 10 || out < 5*50 {
		t.Errorf("counted %d requests, %d bytes in, %d out; want 5, 10, at least 250", requests, in, out)
	}
	if again, _ := p.ReadStats(); len(again) != 0 {
		t.Errorf("a second read without traffic: %+v", again)
	}
	get(t, c, at, "x", "/")
	if err := p.Set(nil); err != nil {
		t.Fatal(err)
	}
	if last, _ := p.ReadStats(); last[key].Members == nil {
		t.Errorf("what was counted before the listener went is lost: %+v", last)
	}
	if len(p.counters) != 0 {
		t.Errorf("%d counters kept for a listener no longer served", len(p.counters))
	}
}

// TestProxyClientTimeout: a client that sends no request within its
// listener's timeout_client_data is disconnected, before its first
// request and between requests; a request that takes longer is not.
func TestProxyClientTimeout(t *testing.T) { forEngines(t, testProxyClientTimeout) }

func testProxyClientTimeout(t *testing.T) {
	slow := startMember(t, "slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(500 * time.Millisecond) })
	p, lp := startProxy(t)
	cfg := flows.L7{DefaultPool: "p", ClientTimeout: 200 * time.Millisecond,
		Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{slow.backend()}}}}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	at := lp.addr(1).String()
	closedWithin := func(c net.Conn, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		_, err := c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	silent, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !closedWithin(silent, 2*time.Second) {
		t.Error("a client that sent nothing stayed connected")
	}

	c, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a request slower than the client timeout: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if !closedWithin(c, 2*time.Second) {
		t.Error("an idle kept-alive client stayed connected")
	}
}

// TestProxyProtocolPools: a PROXY or PROXYV2 pool's members read a
// header naming the client and the listener's VIP before the client's
// requests, on member connections no other client's requests use.
func TestProxyProtocolPools(t *testing.T) { forEngines(t, testProxyProtocolPools) }

func testProxyProtocolPools(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprint("v", version), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var accepted atomic.Int64
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
				fmt.Fprintf(w, "member=pp\npeer=%s\nvip=%s\n", r.RemoteAddr, local)
			}), ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					accepted.Add(1)
				}
			}}
			go srv.Serve(&proxyproto.Listener{Listener: l})
			t.Cleanup(func() { srv.Close() })
			ap := netip.MustParseAddrPort(l.Addr().String())
			p, lp := startProxy(t)
			cfg := flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, ProxyProtocol: version,
				Backends: []flows.Backend{{MemberID: "pp", Address: ap.Addr(), Port: ap.Port(), Weight: 1}}}}}
			if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
				t.Fatal(err)
			}
			at := lp.addr(1).String()
			for i := range 2 {
				c, err := net.Dial("tcp", at)
				if err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(c)
				for range 3 {
					fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := fmt.Sprintf("member=pp\npeer=%s\nvip=%s\n", c.LocalAddr(), vip)
					if string(body) != want {
						t.Errorf("client %d: the member saw\n%s\nwant\n%s", i+1, body, want)
					}
				}
				c.Close()
			}
			if n := accepted.Load(); n != 2 {
				t.Errorf("the member accepted %d connections for two clients of three requests each, want 2", n)
			}
		})
	}
}

// TestProxyMetrics: answers are counted by class and by who gave them,
// and the listeners and open connections are gauged.
func TestProxyMetrics(t *testing.T) { forEngines(t, testProxyMetrics) }

func testProxyMetrics(t *testing.T) {
	m := startMember(t, "m1", nil)
	p, lp := startProxy(t)
	cfg := flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}}, {ID: "empty", Algorithm: flows.RoundRobin}},
		Policies: []flows.L7Policy{
			{ID: "deny", Action: flows.L7Reject, Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareEqualTo, Value: "/deny"}}},
			{ID: "empty", Action: flows.L7RedirectToPool, Pool: "empty", Rules: []flows.L7Rule{{Type: flows.RulePath, Compare: flows.CompareEqualTo, Value: "/empty"}}},
		}}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	c := noRedirects()
	at := lp.addr(1)
	for _, path := range []string{"/", "/", "/deny", "/empty"} {
		get(t, c, at, "x", path)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Collector())
	want := `
# HELP flowlb_agent_l7_listeners L7 listeners (VIP and port each) the node's proxy serves.
# TYPE flowlb_agent_l7_listeners gauge
flowlb_agent_l7_listeners 1
# HELP flowlb_agent_l7_requests_total Requests the node's L7 proxy answered, by status class (2xx, 3xx, 4xx, 5xx) and by who answered: a member, or the proxy itself (a policy's redirect or reject, no member, a member that failed).
# TYPE flowlb_agent_l7_requests_total counter
flowlb_agent_l7_requests_total{by="member",class="2xx"} 2
flowlb_agent_l7_requests_total{by="proxy",class="4xx"} 1
flowlb_agent_l7_requests_total{by="proxy",class="5xx"} 1
`
	if err := promtest.GatherAndCompare(reg, strings.NewReader(want), "flowlb_agent_l7_requests_total", "flowlb_agent_l7_listeners"); err != nil {
		t.Error(err)
	}
	if n := testutilGauge(t, reg, "flowlb_agent_l7_connections"); n < 1 {
		t.Errorf("open connections %v with a kept-alive client", n)
	}
}

func testutilGauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestProxySetKeepsUnchanged: a Set keeps the compiled routes of the
// listeners it does not change (their rotation and open requests with
// them) and compiles those it changes.
func TestProxySetKeepsUnchanged(t *testing.T) { forEngines(t, testProxySetKeepsUnchanged) }

func testProxySetKeepsUnchanged(t *testing.T) {
	p, _ := startProxy(t)
	cfg := scaleConfig(3, 2)
	if err := p.Set(cfg); err != nil {
		t.Fatal(err)
	}
	before := *p.routes.Load()
	changed := cfg[20001]
	changed.Config.InsertHeaders = nil
	cfg[20001] = changed
	if err := p.Set(cfg); err != nil {
		t.Fatal(err)
	}
	after := *p.routes.Load()
	if after[20000] != before[20000] || after[20002] != before[20002] {
		t.Error("an unchanged listener was compiled again")
	}
	if after[20001] == before[20001] || len(after[20001].insert) != 0 {
		t.Error("a changed listener kept its old routes")
	}
	moved := cfg[20002]
	moved.VIP = netip.MustParseAddrPort("198.18.250.1:8080")
	cfg[20002] = moved
	if err := p.Set(cfg); err != nil {
		t.Fatal(err)
	}
	if r := (*p.routes.Load())[20002]; r == after[20002] || r.vip != moved.VIP {
		t.Error("a listener given another VIP kept its old routes")
	}
}
