package echo

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want Reply
		err  bool
	}{
		{in: "pod=n1-p1 addr=198.18.17.2:8080 peer=198.18.18.2:4000\n", want: Reply{"n1-p1", "198.18.17.2:8080", "198.18.18.2:4000"}},
		{in: "unhealthy pod=a addr=1.2.3.4:1 peer=5.6.7.8:2", want: Reply{"a", "1.2.3.4:1", "5.6.7.8:2"}},
		{in: "pod=a addr=1.2.3.4:1", err: true},
		{in: "HTTP/1.1 200 OK", err: true},
	}
	for _, c := range cases {
		got, err := Parse(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.err)
		}
	}
	r := Reply{"p", "1.1.1.1:1", "2.2.2.2:2"}
	if back, err := Parse(r.String()); err != nil || back != r {
		t.Errorf("round trip %+v -> %+v, %v", r, back, err)
	}
}

func TestParsePorts(t *testing.T) {
	cases := map[string]string{"": "[]", "80": "[80]", "80, 8080": "[80 8080]", "x": "error", "70000": "error"}
	for in, want := range cases {
		p, err := ParsePorts(in)
		got := fmt.Sprint(p)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("ParsePorts(%q) = %s, want %s", in, got, want)
		}
	}
}

// startServer runs an echo server on a loopback address with
// kernel-chosen ports.
func startServer(t *testing.T, bind string) (*Server, Config) {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{Name: "unit", Bind: bind, TCP: []int{0}, UDP: []int{0}, HTTP: []int{0},
		HealthFile: filepath.Join(dir, "sick"), ReadyFile: filepath.Join(dir, "ready")}
	s := serve(t, cfg)
	testutil.Eventually(t, 2*time.Second, "the ready file", func() (bool, string) {
		_, err := os.Stat(cfg.ReadyFile)
		return err == nil, fmt.Sprint(err)
	})
	return s, cfg
}

// TestServerProtocols: each protocol on IPv4 and IPv6 loopback; UDP
// answers name the destination address from IP_PKTINFO or IPV6_PKTINFO.
func TestServerProtocols(t *testing.T) {
	for _, bind := range []string{"127.0.0.1", "::1"} {
		t.Run(bind, func(t *testing.T) { testServerProtocols(t, bind) })
	}
}

func testServerProtocols(t *testing.T, bind string) {
	s, cfg := startServer(t, bind)
	check := func(proto, line, local string, peer net.Addr) {
		t.Helper()
		r, err := Parse(line)
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		if r.Pod != "unit" || r.Addr != local || r.Peer != peer.String() {
			t.Errorf("%s: %+v, want pod unit addr %s peer %s", proto, r, local, peer)
		}
	}

	c, err := net.Dial("tcp", s.TCPAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ { // one reply per line, on the same connection
		if _, err := c.Write([]byte("x\n")); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		check("tcp", line, s.TCPAddrs()[0], c.LocalAddr())
	}
	c.Close()

	u, err := net.Dial("udp", s.UDPAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_ = u.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := u.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := u.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	// The wildcard-free socket here makes PKTINFO's destination equal to
	// the bound address; in the lab it is the pod address.
	check("udp", string(buf[:n]), s.UDPAddrs()[0], u.LocalAddr())

	get := func() (int, string) {
		resp, err := http.Get("http://" + s.HTTPAddrs()[0] + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	steps := []struct {
		name string
		sick bool
		code int
	}{
		{"healthy", false, 200},
		{"unhealthy", true, 500},
		{"healthy again", false, 200},
	}
	for _, st := range steps {
		if st.sick {
			if err := os.WriteFile(cfg.HealthFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			_ = os.Remove(cfg.HealthFile)
		}
		code, body := get()
		if code != st.code {
			t.Errorf("%s: HTTP %d, want %d", st.name, code, st.code)
		}
		if r, err := Parse(body); err != nil || r.Pod != "unit" || r.Addr != s.HTTPAddrs()[0] {
			t.Errorf("%s: body %q: %+v %v", st.name, body, r, err)
		}
	}
}

// TestBindBothFamilies: without Bind, every port is bound on the IPv4
// and then the IPv6 wildcard, the IPv6 socket on the port the IPv4 one
// got (port 0 too); with Bind, on that address alone; an IPv6 failure
// fails the server.
func TestBindBothFamilies(t *testing.T) {
	type call struct{ network, addr string }
	run := func(cfg Config, p int, fail string) ([]call, error) {
		var calls []call
		err := cfg.bind(p, func(network, addr string) (int, error) {
			calls = append(calls, call{network, addr})
			if fail != "" && network == fail {
				return 0, fmt.Errorf("no %s", network)
			}
			return 40000, nil
		})
		return calls, err
	}
	cases := []struct {
		name string
		cfg  Config
		port int
		fail string
		want []call
		err  bool
	}{
		{name: "both families", port: 8080, want: []call{{"4", "0.0.0.0:8080"}, {"6", "[::]:40000"}}},
		{name: "port 0", port: 0, want: []call{{"4", "0.0.0.0:0"}, {"6", "[::]:40000"}}},
		{name: "bound IPv4", cfg: Config{Bind: "127.0.0.1"}, port: 80, want: []call{{"", "127.0.0.1:80"}}},
		{name: "bound IPv6", cfg: Config{Bind: "2001:2:0:4001::2"}, port: 80, want: []call{{"", "[2001:2:0:4001::2]:80"}}},
		{name: "IPv6 fails", port: 80, fail: "6", want: []call{{"4", "0.0.0.0:80"}, {"6", "[::]:40000"}}, err: true},
		{name: "IPv4 fails", port: 80, fail: "4", want: []call{{"4", "0.0.0.0:80"}}, err: true},
	}
	for _, c := range cases {
		got, err := run(c.cfg, c.port, c.fail)
		if (err != nil) != c.err || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: calls %v err %v, want %v err %v", c.name, got, err, c.want, c.err)
		}
	}
}

func TestIsHTTPRequestLine(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"GET / HTTP/1.1\r\n", true},
		{"POST /a?b=c HTTP/1.0\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n", true},
		{"hello\n", false},
		{"x\n", false},
		{"get / HTTP/1.1\n", false},
		{"GET /\n", false},
		{"GET / HTTP/2\n", false},
		{"GET  / HTTP/1.1\n", false},
		{"", false},
	}
	for _, c := range cases {
		if got := IsHTTPRequestLine(c.in); got != c.want {
			t.Errorf("IsHTTPRequestLine(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestAutoPort: one port answers the line protocol and HTTP (with
// keep-alive), whichever the client speaks first.
func TestAutoPort(t *testing.T) {
	cfg := Config{Name: "auto", Bind: "127.0.0.1", Auto: []int{0}}
	s := serve(t, cfg)
	addr := s.AutoAddrs()[0]

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if r, err := Parse(line); err != nil || r.Pod != "auto" || r.Addr != addr || r.Peer != c.LocalAddr().String() {
			t.Errorf("line %d: %q: %+v %v", i, line, r, err)
		}
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i := 0; i < 2; i++ { // the second request reuses the connection
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Flowlb-Pod") != "auto" {
			t.Errorf("http %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		if r, err := Parse(string(b)); err != nil || r.Addr != addr {
			t.Errorf("http %d: body %q: %+v %v", i, b, r, err)
		}
		if got := resp.Header.Get("X-Flowlb-Forwarded-For"); got != "" {
			t.Errorf("http %d: no proxy in the path, yet X-Flowlb-Forwarded-For %q", i, got)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	req.Header.Add("X-Forwarded-For", "198.18.0.1")
	req.Header.Add("X-Forwarded-For", "198.18.0.2")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Flowlb-Forwarded-For"); got != "198.18.0.1, 198.18.0.2" {
		t.Errorf("X-Flowlb-Forwarded-For %q, want the request's X-Forwarded-For lines joined", got)
	}
	resp, err = hc.Get("http://" + addr + "/?pad=1024")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	line, pad, _ := strings.Cut(string(b), "\n")
	if _, err := Parse(line); err != nil || pad != strings.Repeat("x", 1024) {
		t.Errorf("?pad=1024: line %q (%v), then %d bytes", line, err, len(pad))
	}
}

// TestProxyHTTPPort: a ProxyHTTP port reads the PROXY header first and
// answers with the addresses it names; a client without one gets no
// echo reply.
func TestProxyHTTPPort(t *testing.T) {
	s := serve(t, Config{Name: "pp", Bind: "127.0.0.1", ProxyHTTP: []int{0}})
	addr := s.ProxyHTTPAddrs()[0]
	for _, v := range []byte{1, 2} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		src, dst := &net.TCPAddr{IP: net.ParseIP("198.18.1.2").To4(), Port: 1234}, &net.TCPAddr{IP: net.ParseIP("198.19.0.10").To4(), Port: 80}
		if _, err := proxyproto.HeaderProxyFromAddrs(v, src, dst).WriteTo(c); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if r, err := Parse(string(b)); err != nil || r.Addr != "198.19.0.10:80" || r.Peer != "198.18.1.2:1234" {
			t.Errorf("v%d: %q (%v), want the header's addresses", v, b, err)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusOK {
		t.Errorf("a client without a PROXY header was answered: %d", resp.StatusCode)
	}
}

// serve binds and serves cfg until the test ends.
func serve(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// TestHTTPSPort: an HTTPS port answers over TLS, in h2 or HTTP/1.1 as
// ALPN chose, with the client certificate's CN when one was sent.
func TestHTTPSPort(t *testing.T) {
	s := serve(t, Config{Name: "tls", Bind: "127.0.0.1", HTTPS: []int{0}})
	addr := s.HTTPSAddrs()[0]
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "a proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	client := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	for _, tc := range []struct {
		name      string
		h2        bool
		cert      bool
		proto, cn string
	}{
		{"HTTP/1.1", false, false, "HTTP/1.1", ""},
		{"h2", true, false, "HTTP/2.0", ""},
		{"a client certificate", false, true, "HTTP/1.1", "a proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{InsecureSkipVerify: true}
			if tc.cert {
				cfg.Certificates = []tls.Certificate{client}
			}
			var ps http.Protocols
			ps.SetHTTP1(!tc.h2)
			ps.SetHTTP2(tc.h2)
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &ps}}
			resp, err := c.Get("https://" + addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if r, err := Parse(string(b)); err != nil || r.Pod != "tls" || resp.Header.Get("X-Flowlb-Proto") != tc.proto ||
				resp.Header.Get("X-Flowlb-Client-CN") != tc.cn {
				t.Errorf("%q (%v), headers %v; want %s and client CN %q", b, err, resp.Header, tc.proto, tc.cn)
			}
			if len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Subject.CommonName != "tls" {
				t.Error("the server's certificate does not name it")
			}
		})
	}
}
