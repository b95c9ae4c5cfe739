package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// listen6 listens on ::1 and answers each connection with reply (nil:
// closes it at once).
func listen6(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if reply != nil {
				buf := make([]byte, 4096)
				_, _ = c.Read(buf) // the request, in one read on loopback
				_, _ = c.Write(reply)
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// closed6 is a port on ::1 nothing listens on.
func closed6(t *testing.T, network string) string {
	t.Helper()
	if network == "udp6" {
		c, err := net.ListenPacket(network, "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	ln, err := net.Listen(network, "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestEveryTypeOverIPv6: each monitor type probes an IPv6 member (::1)
// as it does an IPv4 one: up when it answers as the type wants, down
// otherwise.
func TestEveryTypeOverIPv6(t *testing.T) {
	tcp := listen6(t, nil)
	http200 := listen6(t, []byte("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"))
	http503 := listen6(t, []byte("HTTP/1.0 503 X\r\nContent-Length: 0\r\n\r\n"))
	var mu sync.Mutex
	var host string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		host = r.Host
		mu.Unlock()
	}))
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.StartTLS()
	defer srv.Close()
	tlsAddr := strings.TrimPrefix(srv.URL, "https://")
	silent, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	for _, tc := range []struct {
		name, typ, addr, path, version string
		up                             bool
	}{
		{"TCP open", "TCP", tcp, "", "", true},
		{"TCP closed", "TCP", closed6(t, "tcp6"), "", "", false},
		{"TLS-HELLO to a TLS server", "TLS-HELLO", tlsAddr, "", "", true},
		{"TLS-HELLO to plain TCP", "TLS-HELLO", tcp, "", "", false},
		{"HTTP 200", "HTTP", http200, "", "", true},
		{"HTTP 503", "HTTP", http503, "", "", false},
		{"HTTP/1.1 200", "HTTP", http200, "", "1.1", true},
		{"HTTP closed", "HTTP", closed6(t, "tcp6"), "", "", false},
		{"HTTPS up", "HTTPS", tlsAddr, "/ok", "1.1", true},
		{"HTTPS 503", "HTTPS", tlsAddr, "/down", "", false},
		{"UDP-CONNECT to a silent listener", "UDP-CONNECT", silent.LocalAddr().String(), "", "", true},
		{"UDP-CONNECT closed (ICMPv6 port unreachable)", "UDP-CONNECT", closed6(t, "udp6"), "", "", false},
		{"PING ::1", "PING", "[::1]:0", "", "", true},
		{"PING an address with no route", "PING", "[2001:2:0:ffff::1]:0", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := target(t, tc.typ, tc.addr)
			tg.Path, tg.HTTPVersion, tg.Timeout = tc.path, tc.version, 500*time.Millisecond
			start := time.Now()
			err := Probe(context.Background(), tg)
			if (err == nil) != tc.up {
				t.Errorf("up=%v, want %v (err %v)", err == nil, tc.up, err)
			}
			if !tc.up && tc.typ == "UDP-CONNECT" && time.Since(start) > 400*time.Millisecond {
				t.Errorf("the ICMPv6 unreachable was not noticed at once: %v", time.Since(start))
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if host != tlsAddr {
		t.Errorf("HTTP/1.1 Host %q, want the bracketed member address %q", host, tlsAddr)
	}
}

// TestPingIPv6Sockets: PING over ICMPv6 answers on both kinds of socket,
// datagram (allowed here by ping_group_range) and raw, in a namespace of
// the test's own; an address of it nobody holds gets no reply.
func TestPingIPv6Sockets(t *testing.T) {
	testutil.RequireRoot(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the thread dies with its namespace
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err == nil {
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(net.ParseIP("2001:2:0:2::1")), Flags: unix.IFA_F_NODAD})
		}
		if err == nil {
			err = os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644)
		}
		if err != nil {
			t.Error(err)
			return
		}
		// The address's local route comes a moment after the address.
		if err := testutil.Wait(2*time.Second, func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			return probePing(ctx, netip.MustParseAddr("2001:2:0:2::1")) == nil, "no reply yet"
		}); err != nil {
			t.Error(err)
			return
		}
		for _, tc := range []struct {
			network string
			dgram   bool
		}{{ping6.dgram, true}, {ping6.raw, false}} {
			c, err := icmp.ListenPacket(tc.network, ping6.any)
			if err != nil {
				t.Errorf("%s: %v", tc.network, err)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			if err := ping(ctx, c, tc.dgram, netip.MustParseAddr("2001:2:0:2::1"), ping6); err != nil {
				t.Errorf("%s: ping 2001:2:0:2::1: %v", tc.network, err)
			}
			// Held by nobody, and no route: no reply.
			if err := ping(ctx, c, tc.dgram, netip.MustParseAddr("2001:2:0:2::2"), ping6); err == nil {
				t.Errorf("%s: ping 2001:2:0:2::2 answered", tc.network)
			}
			cancel()
			c.Close()
		}
	}()
	<-done
}
