package nftables

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// kubeProxyStandIn is a nat table as kube-proxy's nftables mode writes
// one, at the dstnat priority: a Service address of its own and a node
// port on any local address, both to the pod 198.18.17.2:8080.
const kubeProxyStandIn = `table ip kube-proxy {
	chain nat-output {
		type nat hook output priority -100; policy accept;
		ip daddr 198.19.0.20 tcp dport 80 dnat to 198.18.17.2:8080
		fib daddr type local tcp dport 30080 dnat to 198.18.17.2:8080
	}
}
`

// TestKubeProxyBeside: with a kube-proxy-like nat table beside flowlb's,
// a connection kube-proxy translates is not masqueraded by flowlb (the pod
// sees the client's address), and a VIP whose member is a node port of
// this node reaches the pod behind that node port.
func TestKubeProxyBeside(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		lo, _ := netlink.LinkByName("lo")
		for _, a := range []string{"198.18.0.1", "198.18.0.200"} { // the node, a client outside the pod networks
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a), Mask: net.CIDRMask(32, 32)}}); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(kubeProxyStandIn)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v: %s", err, out)
		}
		// The pod answers with the address it sees the client at.
		ln, err := net.Listen("tcp", "198.18.17.2:8080")
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
				fmt.Fprintln(c, c.RemoteAddr().(*net.TCPAddr).IP)
				c.Close()
			}
		}()
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.SetPodNetworks([]netip.Prefix{netip.MustParsePrefix("198.18.16.0/20")}); err != nil {
			t.Fatal(err)
		}
		k := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
		tab := flows.Table{Services: map[flows.Key]flows.Service{k: {Key: k, Algorithm: flows.RoundRobin,
			Backends: []flows.Backend{{Address: netip.MustParseAddr("198.18.0.1"), Port: 30080, Weight: 1}}}}}
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		seen := func(dst string) string {
			d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("198.18.0.200")}}
			c, err := d.Dial("tcp", dst)
			if err != nil {
				return "error: " + err.Error()
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			return strings.TrimSpace(line)
		}
		if got := seen("198.19.0.20:80"); got != "198.18.0.200" {
			t.Errorf("kube-proxy's service: the pod sees %q, want the client 198.18.0.200 (not masqueraded by flowlb)", got)
		}
		for i := range 5 {
			if got := seen("198.19.0.10:80"); strings.HasPrefix(got, "error") || got == "" {
				t.Errorf("VIP to this node's node port, try %d: %s", i, got)
			}
		}
	})
}
