package nftables

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// BenchmarkCounterCost is what the statistics cost on the node's own
// path: new connections per second through a VIP with n services
// programmed (the node's own connections, which the acl_out chain
// counts), and the kernel memory of n services of 10 backends after the
// load and after traffic has reached every backend of every service,
// its connections reset and conntrack flushed (the counter elements a
// service and its backends cost once traffic came, and whatever of the
// connections the kernel has not given back).
// Build the test binary of each commit to compare and run them in turn:
//
//	go test -c -o /tmp/nft.test ./internal/node/dataplane/nftables/
//	/tmp/nft.test -test.run '^$' -test.bench CounterCost -test.benchtime 1x
func BenchmarkCounterCost(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("rate/%d", n), func(b *testing.B) {
			for range b.N {
				testutil.InNewNetns(b, func(ns netns.NsHandle) {
					setup(b)
					defer serveAll(b)()
					dp, err := New(int(ns), "n1")
					if err != nil {
						b.Fatal(err)
					}
					defer dp.Remove()
					tab := services(n - 1)
					for k, s := range svc(flows.RoundRobin, backendAddrs...).Services {
						tab.Services[k] = s
					}
					if err := dp.Sync(context.Background(), tab); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(loopbackRate(b, ns, "198.19.0.10:80", 4*time.Second), "conn/s")
				})
			}
		})
	}
	const n = 1000
	b.Run(fmt.Sprintf("memory/%d", n), func(b *testing.B) {
		for range b.N {
			testutil.InNewNetns(b, func(ns netns.NsHandle) {
				setup(b)
				// Ten backends that answer, shared by every service.
				lo, err := vnl.LinkByName("lo")
				if err != nil {
					b.Fatal(err)
				}
				var bes []flows.Backend
				for j := range 10 {
					a := netip.AddrFrom4([4]byte{198, 18, 30, byte(2 + j)})
					if err := vnl.AddrAdd(lo, &vnl.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
						b.Fatal(err)
					}
					ln := serve(b, a.String())
					defer ln.Close()
					bes = append(bes, flows.Backend{Address: a, Port: 8080, Weight: 1})
				}
				dp, err := New(int(ns), "n1")
				if err != nil {
					b.Fatal(err)
				}
				defer dp.Remove()
				tab := flows.Table{Services: map[flows.Key]flows.Service{}}
				for i := range n {
					k := flows.Key{VIP: netip.AddrFrom4([4]byte{198, 19, byte(1 + i>>8), byte(i)}), Protocol: flows.TCP, Port: 80}
					tab.Services[k] = flows.Service{Key: k, Algorithm: flows.RoundRobin, Backends: bes}
				}
				slab0 := testutil.UnreclaimableSlab(b)
				if err := dp.Sync(context.Background(), tab); err != nil {
					b.Fatal(err)
				}
				slab1 := testutil.UnreclaimableSlab(b)
				// Connections to each service until every backend has
				// answered one (round robin: about 29 a service).
				conns := 0
				buf := make([]byte, 64)
				for k := range tab.Services {
					seen := map[string]bool{}
					for len(seen) < len(bes) {
						c, err := net.DialTimeout("tcp", netip.AddrPortFrom(k.VIP, k.Port).String(), time.Second)
						if err != nil {
							b.Fatal(err)
						}
						_ = c.SetDeadline(time.Now().Add(time.Second))
						m, _ := c.Read(buf)
						// A reset: no socket left in TIME_WAIT.
						_ = c.(*net.TCPConn).SetLinger(0)
						c.Close()
						seen[string(buf[:m])] = true
						conns++
					}
				}
				// Nor a conntrack entry: what is left is the elements.
				h, err := vnl.NewHandleAt(ns)
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				if err := h.ConntrackTableFlush(vnl.ConntrackTable); err != nil {
					b.Fatal(err)
				}
				slab2 := testutil.UnreclaimableSlab(b)
				b.ReportMetric(float64(slab1-slab0)/(1<<20), "MiB-kernel-load")
				b.ReportMetric(float64(slab2-slab0)/(1<<20), "MiB-kernel-traffic")
				b.ReportMetric(float64(slab2-slab1)/n, "B-traffic/service")
				b.ReportMetric(float64(conns), "conns")
				// The elements of the counter sets (and, from layout 14,
				// bound), made at the load or by the traffic.
				els := 0
				p := dp.plane(ipv4)
				for _, name := range append(slices.Clone(counterSets), "bound") {
					if set := p.sets[name]; set != nil {
						got, err := dp.conn.GetSetElements(set)
						if err != nil {
							b.Fatal(err)
						}
						els += len(got)
					}
				}
				b.ReportMetric(float64(els), "counter-elements")
			})
		}
	})
}
