package health

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// target points at a real listener on loopback.
func target(t *testing.T, typ, addr string) Target {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return Target{Address: ap.Addr(), Port: ap.Port(), Type: typ, Timeout: time.Second}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := c.LocalAddr().String()
		c.Close()
		return addr
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestTCPAndTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer tlsSrv.Close()
	tlsAddr := strings.TrimPrefix(tlsSrv.URL, "https://")
	for _, tc := range []struct {
		name, typ, addr string
		up              bool
	}{
		{"TCP open", "TCP", ln.Addr().String(), true},
		{"TCP closed", "TCP", closedPort(t, "tcp"), false},
		{"TLS-HELLO to a TLS server", "TLS-HELLO", tlsAddr, true},
		{"TLS-HELLO to plain TCP", "TLS-HELLO", ln.Addr().String(), false},
		{"TLS-HELLO closed", "TLS-HELLO", closedPort(t, "tcp"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Probe(context.Background(), target(t, tc.typ, tc.addr))
			if (err == nil) != tc.up {
				t.Errorf("up=%v, want %v (err %v)", err == nil, tc.up, err)
			}
		})
	}
}

// request is what the HTTP test server saw.
type request struct{ line, host string }

// rawHTTP answers every request with code and records its request line
// and Host header; it speaks HTTP/1.0 and 1.1 alike.
func rawHTTP(t *testing.T, code string) (string, func() []request) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var seen []request
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				line, _ := r.ReadString('\n')
				req := request{line: strings.TrimSpace(line)}
				for {
					h, err := r.ReadString('\n')
					if err != nil || strings.TrimSpace(h) == "" {
						break
					}
					if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(k, "host") {
						req.host = strings.TrimSpace(v)
					}
				}
				mu.Lock()
				seen = append(seen, req)
				mu.Unlock()
				c.Write([]byte("HTTP/1.0 " + code + " X\r\nContent-Length: 2\r\n\r\nok"))
			}()
		}
	}()
	return ln.Addr().String(), func() []request { mu.Lock(); defer mu.Unlock(); return append([]request(nil), seen...) }
}

func TestHTTP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     string
		expected string
		method   string
		path     string
		version  string
		domain   string
		up       bool
		wantLine string
		wantHost string
	}{
		{"default 200", "200", "", "", "", "", "", true, "GET / HTTP/1.0", ""},
		{"default rejects 202", "202", "", "", "", "", "", false, "GET / HTTP/1.0", ""},
		{"list", "202", "200,202", "", "", "", "", true, "GET / HTTP/1.0", ""},
		{"list mismatch", "204", "200,202", "", "", "", "", false, "GET / HTTP/1.0", ""},
		{"range", "204", "200-204", "", "", "", "", true, "GET / HTTP/1.0", ""},
		{"range mismatch", "301", "200-204", "", "", "", "", false, "GET / HTTP/1.0", ""},
		{"method and path", "200", "", "HEAD", "/healthz", "", "", true, "HEAD /healthz HTTP/1.0", ""},
		{"1.1 with domain", "200", "", "", "/", "1.1", "app.example", true, "GET / HTTP/1.1", "app.example"},
		{"1.0 ignores domain", "200", "", "", "/", "1.0", "app.example", true, "GET / HTTP/1.0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, seen := rawHTTP(t, tc.code)
			tg := target(t, "HTTP", addr)
			tg.ExpectedCodes, tg.Method, tg.Path, tg.HTTPVersion, tg.DomainName = tc.expected, tc.method, tc.path, tc.version, tc.domain
			err := Probe(context.Background(), tg)
			if (err == nil) != tc.up {
				t.Errorf("up=%v, want %v (err %v)", err == nil, tc.up, err)
			}
			got := seen()
			if len(got) != 1 || got[0].line != tc.wantLine || got[0].host != tc.wantHost {
				t.Errorf("server saw %+v, want %q host %q", got, tc.wantLine, tc.wantHost)
			}
		})
	}
	// HTTPS against a self-signed certificate: not verified, as Octavia.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tg := target(t, "HTTPS", strings.TrimPrefix(srv.URL, "https://"))
	tg.Path = "/ok"
	if err := Probe(context.Background(), tg); err != nil {
		t.Errorf("HTTPS /ok: %v", err)
	}
	tg.Path = "/down"
	if err := Probe(context.Background(), tg); err == nil {
		t.Error("HTTPS 503 taken as up")
	}
	if err := Probe(context.Background(), target(t, "HTTP", closedPort(t, "tcp"))); err == nil {
		t.Error("HTTP to a closed port taken as up")
	}
}

func TestParseExpectedCodes(t *testing.T) {
	for _, bad := range []string{"x", "204-200", "200-", "2x0,200"} {
		if _, err := ParseExpectedCodes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestUDPConnectAndPing(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close() // a listener that never answers: up, by UDP-CONNECT's rule
	short := func(tg Target) Target { tg.Timeout = 300 * time.Millisecond; return tg }
	if err := Probe(context.Background(), short(target(t, "UDP-CONNECT", pc.LocalAddr().String()))); err != nil {
		t.Errorf("UDP-CONNECT to a silent listener: %v", err)
	}
	start := time.Now()
	if err := Probe(context.Background(), short(target(t, "UDP-CONNECT", closedPort(t, "udp")))); err == nil {
		t.Error("UDP-CONNECT to a closed port (ICMP port unreachable) taken as up")
	}
	if time.Since(start) > 250*time.Millisecond {
		t.Errorf("the ICMP unreachable was not noticed at once: %v", time.Since(start))
	}
	if err := Probe(context.Background(), Target{Address: netip.MustParseAddr("127.0.0.1"), Type: "PING", Timeout: time.Second}); err != nil {
		t.Errorf("PING 127.0.0.1: %v", err)
	}
	if err := Supported("SCTP"); err == nil {
		t.Error("SCTP monitors reported as supported")
	}
}

func TestTracker(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial string
		up, dn  int
		results string // u = up, d = down
		want    string // transitions, "-" for none
	}{
		{"first success reports ONLINE", "", 3, 3, "uuu", "O--"},
		{"unknown needs max_retries_down failures", "", 3, 2, "dd", "-E"},
		{"ONLINE to ERROR after max_retries_down", "ONLINE", 3, 3, "dddd", "--E-"},
		{"a success resets the count down", "ONLINE", 3, 2, "dudd", "---E"},
		{"ERROR to ONLINE after max_retries", "ERROR", 2, 3, "uduu", "---O"},
		{"flapping below the thresholds changes nothing", "ONLINE", 3, 3, "ddudduddu", "---------"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.up, tc.dn, tc.initial)
			var got strings.Builder
			for _, r := range tc.results {
				st, changed := tr.Observe(r == 'u')
				switch {
				case !changed:
					got.WriteByte('-')
				default:
					got.WriteByte(st[0])
				}
			}
			if got.String() != tc.want {
				t.Errorf("transitions %s, want %s", got.String(), tc.want)
			}
		})
	}
}

// TestRunner: a member whose listener closes goes ERROR, and ONLINE again
// when it reopens; transitions only, not every probe.
func TestRunner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	accept := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}
	go accept(ln)
	out := make(chan Transition, 16)
	r := NewRunner(out, NewMetrics(nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	check := Check{MemberID: "m1", Target: target(t, "TCP", addr), Delay: 30 * time.Millisecond, MaxRetries: 2, MaxRetriesDown: 2}
	r.Set(ctx, []Check{check})
	defer r.Stop()
	next := func(want string) {
		t.Helper()
		select {
		case tr := <-out:
			if tr.MemberID != "m1" || tr.Status != want {
				t.Fatalf("transition %+v, want %s", tr, want)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("no transition to %s", want)
		}
	}
	next(Online)
	ln.Close()
	next(Error)
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	go accept(ln2)
	next(Online)
	// Steady state: probes keep running, no transition is sent.
	select {
	case tr := <-out:
		t.Errorf("transition without a change: %+v", tr)
	case <-time.After(200 * time.Millisecond):
	}
	// The server thinks the member is in ERROR (a report was lost): the
	// same assignment with that Initial makes the runner say it again.
	check.Initial = Error
	r.Set(ctx, []Check{check})
	next(Online)
	r.Set(ctx, nil)
	if len(r.members) != 0 {
		t.Errorf("members left after Set(nil): %d", len(r.members))
	}
}
