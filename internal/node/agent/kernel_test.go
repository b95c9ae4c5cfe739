package agent

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// inNamespace runs fn on a locked thread in namespace ns (nil: a fresh
// one with loopback up, removed afterwards); the thread ends with fn.
func inNamespace(t *testing.T, ns *netns.NsHandle, fn func(ns netns.NsHandle)) {
	t.Helper()
	if ns == nil {
		testutil.InNewNetns(t, fn)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies in the namespace
		if err := netns.Set(*ns); err != nil {
			t.Error(err)
			return
		}
		fn(*ns)
	}()
	<-done
}

func addAddr(t *testing.T, link string, cidr string) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		t.Fatalf("address %s on %s: %v", cidr, link, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
}

// answer serves addr: each TCP connection is told "<addr> <client>".
func answer(t *testing.T, addr string) {
	ln, err := net.Listen("tcp", addr)
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
			fmt.Fprintln(c, addr, c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
}

// dialOnce connects to dst and returns the answer's first line, or the
// error.
func dialOnce(dst string) string {
	c, err := net.DialTimeout("tcp", dst, time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// TestKernelVIPToOwnNodePort: a VIP whose member is this node's own node
// port, with flowlb serving that node port, in a real kernel (a node
// namespace, a client namespace behind a veth). Programmed as received,
// the VIP's translation to node:nodePort is the connection's only one
// and the node's stack refuses it; programmed by the agent, the member
// is the node port's endpoints, reached from the client and from the
// node, and a change of the node port's endpoints moves the VIP with it.
func TestKernelVIPToOwnNodePort(t *testing.T) {
	testutil.RequireRoot(t)
	inNamespace(t, nil, func(node netns.NsHandle) {
		// The node: 198.18.0.1 serves node ports; pods 198.18.17.2 and .3
		// (on lo); the VIP range routed locally; a client link.
		for _, a := range []string{"198.18.0.1/32", "198.18.17.2/32", "198.18.17.3/32"} {
			addAddr(t, "lo", a)
		}
		lo, _ := netlink.LinkByName("lo")
		_, vips, _ := net.ParseCIDR("198.19.0.0/17")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: vips,
			Scope: netlink.SCOPE_HOST, Type: unix.RTN_LOCAL}); err != nil {
			t.Fatal(err)
		}
		client, err := netns.New() // switches this thread to it
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		if err := netns.Set(node); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vc"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(client)}); err != nil {
			t.Fatal(err)
		}
		addAddr(t, "vc", "198.18.1.1/24")
		inNamespace(t, &client, func(netns.NsHandle) {
			addAddr(t, "eth0", "198.18.1.2/24")
			eth0, _ := netlink.LinkByName("eth0")
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP("198.18.1.1")}); err != nil {
				t.Error(err)
			}
		})
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		answer(t, "198.18.17.2:8080")
		answer(t, "198.18.17.3:8080")

		dp, err := nftables.New(int(node), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		nodeAddrs := []netip.Addr{netip.MustParseAddr("198.18.0.1")}
		if err := dp.SetNodeAddresses(nodeAddrs); err != nil {
			t.Fatal(err)
		}
		vip := flows.Service{Key: vipKey, LoadBalancerID: "cpo", Algorithm: flows.RoundRobin, ConnectionLimit: -1,
			Backends: []flows.Backend{be("198.18.0.1", 30080, 1, "")}}
		port := np(flows.TCP, 30080, false, be("198.18.17.2", 8080, 1, "n1"))
		fromClient := func(dst string) (got string) {
			inNamespace(t, &client, func(netns.NsHandle) { got = dialOnce(dst) })
			return got
		}

		// As received: the node port answers, the VIP to it is refused.
		if err := dp.Sync(t.Context(), flows.Table{Services: map[flows.Key]flows.Service{vip.Key: vip, port.Key: port}}); err != nil {
			t.Fatal(err)
		}
		// The first dial waits for the new veth to carry: once in a loaded
		// run the first SYN was lost.
		testutil.Eventually(t, 5*time.Second, "the node port from the client", func() (bool, string) {
			got := fromClient("198.18.0.1:30080")
			return strings.HasPrefix(got, "198.18.17.2:8080 "), got
		})
		if got := fromClient("198.19.0.10:80"); !strings.Contains(got, "refused") {
			t.Fatalf("the VIP to the node's own node port, programmed as received: %q, want refused (the case the agent flattens)", got)
		}

		a := New(Config{Node: "n1", NoHealth: true, Metrics: prometheus.NewRegistry()}, dp, quiet)
		if err := a.SetNodeAddresses(t.Context(), nodeAddrs); err != nil {
			t.Fatal(err)
		}
		if err := a.program(t.Context(), &agentv1.Update{Snapshot: true, Revision: 1,
			Upserts: []*agentv1.Service{flowpb.ServiceToProto(vip), flowpb.ServiceToProto(port)}}); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if got := fromClient("198.19.0.10:80"); got != "198.18.17.2:8080 198.18.1.2" {
				t.Errorf("client -> VIP, try %d: %q, want the node port's endpoint, the client's address kept", i, got)
			}
			if got := dialOnce("198.19.0.10:80"); !strings.HasPrefix(got, "198.18.17.2:8080 ") {
				t.Errorf("node -> VIP, try %d: %q", i, got)
			}
		}
		port.Backends = []flows.Backend{be("198.18.17.3", 8080, 1, "n1")}
		if err := a.program(t.Context(), &agentv1.Update{Revision: 2, Upserts: []*agentv1.Service{flowpb.ServiceToProto(port)}}); err != nil {
			t.Fatal(err)
		}
		if got := fromClient("198.19.0.10:80"); got != "198.18.17.3:8080 198.18.1.2" {
			t.Errorf("client -> VIP after the node port moved: %q, want 198.18.17.3", got)
		}
		if got := fromClient("198.18.0.1:30080"); !strings.HasPrefix(got, "198.18.17.3:8080 ") {
			t.Errorf("the node port after it moved: %q", got)
		}
	})
}

// TestKernelVIPToOwnLocalOnlyNodePort: a VIP whose member is this node's
// own node port, in a real kernel, with the pod behind a veth of its own
// (its connections forwarded, so postrouting decides the masquerade) and
// a client outside the pod networks behind another. With
// externalTrafficPolicy Local on the node port, the client reaches the
// pod through the VIP with its own address, as through the node port
// itself; with Cluster, it is masqueraded to the node, as the VIP's
// clients from outside are.
func TestKernelVIPToOwnLocalOnlyNodePort(t *testing.T) {
	testutil.RequireRoot(t)
	inNamespace(t, nil, func(node netns.NsHandle) {
		addAddr(t, "lo", "198.18.0.1/32")
		lo, _ := netlink.LinkByName("lo")
		_, vips, _ := net.ParseCIDR("198.19.0.0/17")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: vips,
			Scope: netlink.SCOPE_HOST, Type: unix.RTN_LOCAL}); err != nil {
			t.Fatal(err)
		}
		// peer makes a namespace behind a veth from the node: the node's
		// side gets gw/24, the other side addr/24 and a default route.
		peer := func(link, gw, addr string) netns.NsHandle {
			ns, err := netns.New() // switches this thread to it
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ns.Close() })
			if err := netns.Set(node); err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns)}); err != nil {
				t.Fatal(err)
			}
			addAddr(t, link, gw+"/24")
			inNamespace(t, &ns, func(netns.NsHandle) {
				addAddr(t, "lo", "127.0.0.1/8")
				addAddr(t, "eth0", addr+"/24")
				eth0, _ := netlink.LinkByName("eth0")
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
					t.Error(err)
				}
			})
			return ns
		}
		client := peer("vc", "198.18.1.1", "198.18.1.2")
		pod := peer("vp", "198.18.17.1", "198.18.17.2")
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		inNamespace(t, &pod, func(netns.NsHandle) { answer(t, "198.18.17.2:8080") })

		dp, err := nftables.New(int(node), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.SetPodNetworks([]netip.Prefix{netip.MustParsePrefix("198.18.16.0/20")}); err != nil {
			t.Fatal(err)
		}
		nodeAddrs := []netip.Addr{netip.MustParseAddr("198.18.0.1")}
		if err := dp.SetNodeAddresses(nodeAddrs); err != nil {
			t.Fatal(err)
		}
		a := New(Config{Node: "n1", NoHealth: true, Metrics: prometheus.NewRegistry()}, dp, quiet)
		if err := a.SetNodeAddresses(t.Context(), nodeAddrs); err != nil {
			t.Fatal(err)
		}
		vip := flows.Service{Key: vipKey, LoadBalancerID: "cpo", Algorithm: flows.RoundRobin, ConnectionLimit: -1,
			Backends: []flows.Backend{be("198.18.0.1", 30080, 1, "")}}
		port := np(flows.TCP, 30080, false, be("198.18.17.2", 8080, 1, "n1"))
		fromClient := func(dst string) (got string) {
			inNamespace(t, &client, func(netns.NsHandle) { got = dialOnce(dst) })
			return got
		}
		for i, tc := range []struct {
			policy    string
			localOnly bool
			want      string
		}{
			{"Local", true, "198.18.17.2:8080 198.18.1.2"},
			{"Cluster", false, "198.18.17.2:8080 198.18.17.1"},
		} {
			port.LocalOnly = tc.localOnly
			if err := a.program(t.Context(), &agentv1.Update{Snapshot: true, Revision: int64(i + 1),
				Upserts: []*agentv1.Service{flowpb.ServiceToProto(vip), flowpb.ServiceToProto(port)}}); err != nil {
				t.Fatal(err)
			}
			// The client's first connection through its veth, just made,
			// can miss dialOnce's wait on a loaded machine (neighbour
			// resolution): it is tried again on a timeout, never on a
			// wrong answer.
			var got string
			_ = testutil.Wait(10*time.Second, func() (bool, string) {
				got = fromClient("198.18.0.1:30080")
				return i > 0 || !strings.Contains(got, "timeout"), got
			})
			if got != tc.want {
				t.Errorf("externalTrafficPolicy %s: client -> node port: %q, want %q", tc.policy, got, tc.want)
			}
			for try := range 3 {
				if got := fromClient("198.19.0.10:80"); got != tc.want {
					t.Errorf("externalTrafficPolicy %s: client -> VIP, try %d: %q, want %q", tc.policy, try, got, tc.want)
				}
			}
			var kept []string
			if tc.localOnly {
				kept = []string{"198.18.17.2:8080"}
			}
			for _, d := range dp.Dump() {
				if d.Key == vipKey && !slices.Equal(d.KeepClient, kept) {
					t.Errorf("externalTrafficPolicy %s: the VIP dumped keeping the client to %v, want %v", tc.policy, d.KeepClient, kept)
				}
			}
		}
	})
}
