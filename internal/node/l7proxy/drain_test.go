package l7proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// TestProxyDrain: a proxy that drains refuses new connections at once,
// and answers the request it was serving, which its member answers
// after the drain began; the drain returns once it has.
func TestProxyDrain(t *testing.T) { forEngines(t, testProxyDrain) }

func testProxyDrain(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	arrived := make(chan struct{}, 1)
	m := startMember(t, "slow", func(http.ResponseWriter, *http.Request) {
		arrived <- struct{}{}
		<-release
	})
	// Cleanups run last first: the member's handler is freed before the
	// member's server waits for it, also when the test fails.
	t.Cleanup(free)
	p, lp := startProxy(t)
	if err := p.Set(map[uint16]Listener{20000: {VIP: vip, Config: flows.L7{DefaultPool: "web",
		Pools: []flows.L7Pool{{ID: "web", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}}}}}}); err != nil {
		t.Fatal(err)
	}
	at := lp.addr(20000)
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + at.String() + "/slow")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the member")
	}
	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drained <- p.Drain(ctx)
	}()
	// New connections are refused once the ports are closed.
	deadline := time.Now().Add(2 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", at.String(), 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the steering port still takes connections 2 s into the drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-drained:
		t.Fatalf("the drain ended (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	free()
	r := <-done
	if r.err != nil || r.status != 200 {
		t.Fatalf("the request in flight: %d %q, %v", r.status, r.body, r.err)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the drain did not end after the last request was answered")
	}
}

// TestDrainServesNewConnections: connections accepted before a drain
// began and still without a request (one in its TLS handshake, one
// plain) are answered by the lean engine when their request comes
// during the drain, then closed; net/http's server closes them without
// an answer once its request is read (Server.Shutdown), so its engine
// is only held to closing them. One whose client sends nothing is
// closed newConnGrace after its opening, as net/http's Shutdown closes
// its new connections, and the drain ends then.
func TestDrainServesNewConnections(t *testing.T) { forEngines(t, testDrainServesNewConnections) }

func testDrainServesNewConnections(t *testing.T) {
	ca := newTestCA(t, "server CA")
	cert := ca.issue(t, pkix.Name{CommonName: "www.example"}, false, "www.example")
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served "+r.URL.Path) })
	p, lp := startProxy(t)
	pool := []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}}}
	if err := p.Set(map[uint16]Listener{
		1: {VIP: vip, Config: flows.L7{DefaultPool: "p", Pools: pool}},
		2: {VIP: netip.AddrPortFrom(vip.Addr(), 443), Config: flows.L7{DefaultPool: "p", Pools: pool,
			TLS: &flows.L7TLS{Certificates: []flows.L7Certificate{cert}, ALPN: []string{"http/1.1"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	plainAt, tlsAt := lp.addr(1).String(), lp.addr(2).String()
	plain, plainR := dialRaw(t, plainAt)
	silent, _ := dialRaw(t, plainAt)
	opened := time.Now()
	raw, _ := dialRaw(t, tlsAt)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	tc := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "www.example", NextProtos: []string{"http/1.1"}})
	// The proxy accepts the three before its ports close.
	time.Sleep(200 * time.Millisecond)

	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		drained <- p.Drain(ctx)
	}()
	for _, at := range []string{plainAt, tlsAt} {
		deadline := time.Now().Add(2 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", at, 200*time.Millisecond)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatalf("%s still takes connections 2 s into the drain", at)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ask := func(name string, c net.Conn, r *bufio.Reader) {
		t.Helper()
		if _, err := io.WriteString(c, "GET /"+name+" HTTP/1.1\r\nHost: www.example\r\n\r\n"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp, err := http.ReadResponse(r, nil)
		if engineOf(t) == EngineNetHTTP {
			if err == nil {
				resp.Body.Close()
				t.Logf("%s: net/http's server answered %d during its shutdown", name, resp.StatusCode)
			}
			if n, err := r.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("%s: still open during the drain (%d, %v)", name, n, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: no answer during the drain: %v", name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "served /"+name {
			t.Fatalf("%s: %d %q, %v", name, resp.StatusCode, body, err)
		}
		// Its one request answered, the draining proxy closes it.
		if n, err := r.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Errorf("%s: still open after its answer (%d, %v)", name, n, err)
		}
	}
	ask("plain", plain, plainR)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("a handshake begun before the drain: %v", err)
	}
	ask("tls", tc, bufio.NewReader(tc))

	// The silent one is closed at newConnGrace, and the drain ends.
	silent.SetReadDeadline(time.Now().Add(newConnGrace + 3*time.Second))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the silent connection read %d, %v", n, err)
	}
	if after := time.Since(opened); after < newConnGrace-time.Second || after > newConnGrace+2*time.Second {
		t.Errorf("the silent connection closed %v after its opening, want about %v", after, newConnGrace)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the drain did not end after the last connection closed")
	}
}
