package nftables

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	xipv4 "golang.org/x/net/ipv4"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The closed-ports kernel test: a node namespace holding a load
// balancer's VIP as a /32 of its own (as the nodes of a Neutron network
// do), a backend on its loopback, and a client namespace behind a veth:
// client 198.18.0.2, the node's side 198.18.0.1, routed to the VIPs.
const (
	closedVIP    = "198.19.0.10"
	closedClient = "198.18.0.2"
	closedNode   = "198.18.0.1"
)

// clientNetns makes the client namespace behind veth vc1 of the node's
// (the caller's, whose thread is locked in it), routed to the VIPs
// through the node. The client goes with the returned handle.
func clientNetns(t *testing.T, node netns.NsHandle) netns.NsHandle {
	t.Helper()
	client, err := netns.New() // switches this thread to it
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(node); err != nil {
		t.Fatal(err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vc1"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(client)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	vc1, err := netlink.LinkByName("vc1")
	if err == nil {
		err = netlink.AddrAdd(vc1, mustAddr(closedNode+"/24"))
	}
	if err == nil {
		err = netlink.LinkSetUp(vc1)
	}
	if err != nil {
		t.Fatal(err)
	}
	inside(t, client, func() {
		for _, name := range []string{"lo", "eth0"} {
			l, err := netlink.LinkByName(name)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err == nil && name == "eth0" {
				if err = netlink.AddrAdd(l, mustAddr(closedClient+"/24")); err == nil {
					_, vips, _ := net.ParseCIDR("198.19.0.0/17")
					err = netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: vips, Gw: net.ParseIP(closedNode)})
				}
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	return client
}

func mustAddr(s string) *netlink.Addr {
	a, err := netlink.ParseAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}

// echoTCP answers every TCP connection on addr with "hello from addr".
func echoTCP(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					fmt.Fprintf(c, "%s %s", addr, buf[:n])
				}
			}()
		}
	}()
	return ln
}

// echoUDP answers every datagram on addr.
func echoUDP(t *testing.T, addr string) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	return pc
}

// reach says what a TCP connection to addr, and a line over it, come to:
// the answer, or "timeout" (no SYN-ACK, nor a reset), or the error.
func reach(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "timeout"
		}
		return "error: " + err.Error()
	}
	defer c.Close()
	return talk(c)
}

func talk(c net.Conn) string {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi")); err != nil {
		return "error: " + err.Error()
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(buf[:n])
}

// reachUDP says whether a datagram to addr is answered.
func reachUDP(addr string) string {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		return "error: " + err.Error()
	}
	if _, err := c.Read(make([]byte, 8)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "timeout"
		}
		return "error: " + err.Error()
	}
	return "answered"
}

// pingOnce says whether addr answers an ICMP echo.
func pingOnce(addr string) string {
	c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	msg := icmp.Message{Type: xipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte("flowlb")}}
	b, _ := msg.Marshal(nil)
	if _, err := c.WriteTo(b, &net.IPAddr{IP: net.ParseIP(addr)}); err != nil {
		return "error: " + err.Error()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 256)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return "timeout"
		}
		if m, err := icmp.ParseMessage(1, buf[:n]); err == nil && m.Type == xipv4.ICMPTypeEchoReply {
			return "answered"
		}
	}
}

// TestClosedPortsKernel: with a load balancer's VIP as an address of the
// node, a client outside reaches its listener's port, and no longer a
// process of the node listening on the VIP at another port (TCP: no
// SYN-ACK; UDP: no answer), while the node itself still does, ping still
// answers, an established connection goes on, and an external IP that is
// the node's own address keeps its other ports open. The VIP opens again
// with its last service gone.
func TestClosedPortsKernel(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		client := clientNetns(t, ns)
		defer client.Close()
		lo, _ := netlink.LinkByName("lo")
		for _, a := range []string{closedVIP + "/32", "198.18.17.2/32"} {
			if err := netlink.AddrAdd(lo, mustAddr(a)); err != nil {
				t.Fatal(err)
			}
		}
		defer serve(t, "198.18.17.2").Close()
		defer echoTCP(t, closedVIP+":9999").Close()
		defer echoTCP(t, closedNode+":9999").Close()
		defer echoUDP(t, closedVIP+":9999").Close()

		// The table first: conntrack tracks the namespace's connections
		// from then on (one it never saw is new to it, mid-stream).
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		fromClient := func(fn func() string) (out string) {
			inside(t, client, func() { out = fn() })
			return out
		}
		other := closedVIP + ":9999"
		// The client's first connection through a veth just made can
		// miss reach's second on a loaded machine (its neighbour
		// resolution, the links coming up): wait for the path first.
		var got string
		_ = testutil.Wait(10*time.Second, func() (bool, string) {
			got = fromClient(func() string { return reach(other) })
			return got == other+" hi", got
		})
		if got != other+" hi" {
			t.Fatalf("before any service, the node's listener on the VIP: %q, want it to answer", got)
		}
		// An established connection from before the VIP's service, which
		// made the port closed.
		var est net.Conn
		inside(t, client, func() {
			var err error
			if est, err = net.DialTimeout("tcp4", other, time.Second); err != nil {
				t.Error(err)
			}
		})
		if est == nil {
			return
		}
		defer est.Close()

		vipSvc := flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(closedVIP), Protocol: flows.TCP, Port: 80}, Algorithm: flows.RoundRobin,
			Backends: []flows.Backend{{Address: netip.MustParseAddr("198.18.17.2"), Port: 8080, Weight: 1}}, OwnVIP: true}
		external := vipSvc
		external.Key.VIP, external.OwnVIP = netip.MustParseAddr(closedNode), false
		if err := dp.Sync(context.Background(), tableOf(vipSvc, external)); err != nil {
			t.Fatal(err)
		}

		for _, c := range []struct {
			what string
			got  func() string
			want string
		}{
			{"client to the listener's port", func() string { return fromClient(func() string { return ask(t, closedVIP+":80", "") }) }, "198.18.17.2"},
			{"client to another TCP port of the VIP", func() string { return fromClient(func() string { return reach(other) }) }, "timeout"},
			{"client to another UDP port of the VIP", func() string { return fromClient(func() string { return reachUDP(other) }) }, "timeout"},
			{"client pings the VIP", func() string { return fromClient(func() string { return pingOnce(closedVIP) }) }, "answered"},
			{"established connection", func() string { return talk(est) }, other + " hi"},
			{"the node to another port of the VIP", func() string { return reach(other) }, other + " hi"},
			{"client to the external IP's listener port", func() string { return fromClient(func() string { return ask(t, closedNode+":80", "") }) }, "198.18.17.2"},
			{"client to another port of the external IP (a node address)", func() string { return fromClient(func() string { return reach(closedNode + ":9999") }) },
				closedNode + ":9999 hi"},
		} {
			if got := c.got(); got != c.want {
				t.Errorf("%s: %q, want %q", c.what, got, c.want)
			}
		}
		if v := dp.Trace(Packet{Src: netip.MustParseAddr(closedClient), SrcPort: 40000, Dst: netip.MustParseAddr(closedVIP), Protocol: flows.TCP, DstPort: 9999}, nil); v.Action != "drop" || v.Reason != reasonNoListener {
			t.Errorf("trace of the closed port: %+v", v)
		}

		if err := dp.Sync(context.Background(), tableOf(external)); err != nil {
			t.Fatal(err)
		}
		if got := fromClient(func() string { return reach(other) }); !strings.HasPrefix(got, other) {
			t.Errorf("the VIP without a service: %q, want the node's listener to answer", got)
		}
	})
}

// TestClosedPortsIPv6Kernel: the same in the ip6 table, for a pod behind
// a veth (podNetns): the listener's port reaches a backend, another port
// of the VIP, where the node listens, gets no SYN-ACK, and the node itself
// still reaches it.
func TestClosedPortsIPv6Kernel(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup6(t)
		pod := podNetns(t, ns)
		defer pod.Close()
		defer serveAll6(t)()
		lo, _ := netlink.LinkByName("lo")
		addr6(t, lo, vip6, 128)
		other := net.JoinHostPort(vip6, "9999")
		defer echoTCP(t, other).Close()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		s := flows.Service{Key: vip6Key, Algorithm: flows.RoundRobin, OwnVIP: true,
			Backends: []flows.Backend{{Address: netip.MustParseAddr(backends6[0]), Port: 8080, Weight: 1}}}
		if err := dp.Sync(context.Background(), tableOf(s)); err != nil {
			t.Fatal(err)
		}
		var listener, closed string
		inside(t, pod, func() { listener, closed = backendOf(ask6(vip6Port, "")), reach(other) })
		if listener != backends6[0] {
			t.Errorf("pod to the listener's port: %q, want %s", listener, backends6[0])
		}
		if closed != "timeout" {
			t.Errorf("pod to another port of the VIP: %q, want a timeout", closed)
		}
		if got := reach(other); got != other+" hi" {
			t.Errorf("the node to another port of the VIP: %q, want its listener's answer", got)
		}
	})
}
