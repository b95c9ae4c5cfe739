package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// metallbBenchPool is MetalLB's pool in BenchmarkMetalLBAnnounce: the top
// quarter of the lab's external range (16,384 addresses), which flowlb's
// allocator, taking the lowest free address of the range, reaches only
// beyond 16,384 load balancers.
var metallbBenchPool = netip.MustParsePrefix("198.19.192.0/18")

// BenchmarkMetalLBAnnounce: N LoadBalancer Services (FLOWLB_BENCH_VIPS,
// default 1,000), each with one ready endpoint, created through the
// Kubernetes API by 8 clients at once, for flowlb (kube-controller →
// server → agents speaking BGP) and for MetalLB (controller → speakers
// in native BGP mode) in turn, each in a fresh lab of 3 nodes with FRR
// in the router: the time from the first create until the router's
// kernel routes all N addresses via every node, and the peak resident
// memory of the node side (agent or speaker, the largest node) and of
// the control side (kube-controller plus server, or MetalLB's
// controller). The two alternate over FLOWLB_BENCH_ROUNDS rounds
// (default 1; MetalLB first in odd rounds). Only with FLOWLB_METALLB=1.
//
//	FLOWLB_METALLB=1 FLOWLB_METALLB_VERSION=v0.15.2 FLOWLB_BENCH_VIPS=10000 \
//	  go test -run '^$' -bench MetalLBAnnounce -benchtime 1x -timeout 120m ./test/e2e/
func BenchmarkMetalLBAnnounce(b *testing.B) {
	if os.Getenv("FLOWLB_METALLB") != "1" {
		b.Skip("MetalLB side by side runs only with FLOWLB_METALLB=1 (it builds MetalLB with hack/metallb-bins.sh)")
	}
	sizes, err := envInts("FLOWLB_BENCH_VIPS", "1000")
	if err != nil || len(sizes) != 1 || sizes[0] < 1 || sizes[0] > 16000 {
		b.Fatalf("FLOWLB_BENCH_VIPS: one number from 1 to 16,000 (the lab's Service range): %v %v", sizes, err)
	}
	rounds, err := envInts("FLOWLB_BENCH_ROUNDS", "1")
	if err != nil || len(rounds) != 1 {
		b.Fatalf("FLOWLB_BENCH_ROUNDS: one number (%v)", err)
	}
	n := sizes[0]
	bins := metallbBins(b)
	for r := range rounds[0] {
		order := []string{"metallb", "flowlb"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, who := range order {
			b.Run(fmt.Sprintf("round%d/%s", r+1, who), func(b *testing.B) {
				res := announceBurst(b, bins, who, n)
				b.ReportMetric(res.routed.Seconds(), "burst-s")
				fmt.Printf("announce %s: %d LoadBalancer Services, 3 nodes, FRR router: created in %s; the router routes all via every node %s after the first create; node side peak RSS %.0f MiB (largest node), control side %.0f MiB; load average %s\n",
					who, n, res.created.Round(time.Millisecond), res.routed.Round(time.Millisecond), res.nodeMiB, res.controlMiB, loadAverage())
			})
		}
	}
}

type burstResult struct {
	created, routed     time.Duration
	nodeMiB, controlMiB float64
}

// announceBurst runs one system's burst of n Services in a lab of its own.
func announceBurst(b *testing.B, bins, who string, n int) burstResult {
	const nodes = 3
	controllers := 0
	if who == "flowlb" {
		controllers = 1
	}
	e := newMetalLBEnv(b, nodes, controllers)
	l := e.lab
	class := ""
	hops := map[netip.Addr]bool{}
	in := func(a netip.Addr) bool { return lab.ExternalVIPs.Contains(a) && !metallbBenchPool.Contains(a) }
	if who == "metallb" {
		startMetalLBBGP(b, e, bins, nodes, metallbBenchPool)
		class = metallbClass
		in = metallbBenchPool.Contains
		for i := 1; i <= nodes; i++ {
			hops[metallbAddr(i)] = true
		}
	} else {
		for i := 1; i <= nodes; i++ {
			hops[lab.NodeAddr(i)] = true
		}
	}
	waitEstablished(b, l, hops)

	t0 := time.Now()
	createEndpointServices(b, e, n, class, l.Pod(1, 1).Addr)
	created := time.Since(t0)
	var routed time.Duration
	testutil.Eventually(b, 60*time.Minute, fmt.Sprintf("the router routing %d of %s's addresses via every node", n, who), func() (bool, string) {
		got, err := routedVia(l, in, hops)
		if err != nil {
			return false, err.Error()
		}
		routed = time.Since(t0)
		return got == n, fmt.Sprint(got, " routed")
	})

	res := burstResult{created: created, routed: routed}
	node, control := "agent", []string{"server", "kube-controller-1"}
	if who == "metallb" {
		node, control = "metallb-speaker", []string{"metallb-controller"}
	}
	for _, h := range l.Nodes() {
		p, err := h.Proc(node)
		if err != nil {
			b.Fatal(err)
		}
		res.nodeMiB = max(res.nodeMiB, peakRSSMiB(b, p.PID))
	}
	for _, name := range control {
		p, err := l.Fabric().Proc(name)
		if err != nil {
			b.Fatal(err)
		}
		res.controlMiB += peakRSSMiB(b, p.PID)
	}
	return res
}

// waitEstablished waits until the router's BGP sessions with every
// address of peers are established, so that a burst is timed from the
// first create with its sessions already up.
func waitEstablished(b *testing.B, l *lab.Lab, peers map[netip.Addr]bool) {
	testutil.Eventually(b, 60*time.Second, "the router's sessions with the speakers established", func() (bool, string) {
		out, err := l.Vtysh(b.Context(), lab.HostRouter, "show bgp ipv4 unicast summary json")
		if err != nil {
			return false, err.Error()
		}
		var sum struct {
			Peers map[string]struct {
				State string `json:"state"`
			} `json:"peers"`
		}
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			return false, err.Error()
		}
		up := 0
		for a := range peers {
			if sum.Peers[a.String()].State == "Established" {
				up++
			}
		}
		return up == len(peers), fmt.Sprint(sum.Peers)
	})
}

// routedVia counts the router's BGP host routes to addresses in which
// go via every address of hops and no other.
func routedVia(l *lab.Lab, in func(netip.Addr) bool, hops map[netip.Addr]bool) (int, error) {
	h, err := lab.Handle(lab.NSName(l.Name(), lab.HostRouter))
	if err != nil {
		return 0, err
	}
	defer h.Close()
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: unix.RTPROT_BGP}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return 0, err
	}
	got := 0
	for _, r := range rs {
		p, ok := lab.PrefixOf(r.Dst)
		if !ok || p.Bits() != 32 || !in(p.Addr()) {
			continue
		}
		gws := map[netip.Addr]bool{}
		if a, ok := netip.AddrFromSlice(r.Gw); ok {
			gws[a.Unmap()] = true
		}
		for _, nh := range r.MultiPath {
			if a, ok := netip.AddrFromSlice(nh.Gw); ok {
				gws[a.Unmap()] = true
			}
		}
		all := len(gws) == len(hops)
		for a := range gws {
			all = all && hops[a]
		}
		if all {
			got++
		}
	}
	return got, nil
}

// createEndpointServices creates n LoadBalancer Services of class (""
// for flowlb's default), s00000 …, without selectors, each with an
// EndpointSlice of one ready endpoint, addr:8080 on n1, 8 at a time with
// a client of its own that Kubernetes' client-side limits do not slow
// down. The Services allocate no node ports: the lab's node port range
// holds fewer than 10,000.
func createEndpointServices(b *testing.B, e *kubeEnv, n int, class string, addr netip.Addr) {
	cfg := *e.kc.Config
	cfg.QPS, cfg.Burst = 1000, 2000
	k, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	var lbClass *string
	if class != "" {
		lbClass = &class
	}
	next := make(chan int)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				name := fmt.Sprintf("s%05d", i)
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
					Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: lbClass, AllocateLoadBalancerNodePorts: ptr.To(false),
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
				slice := &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr.String()},
						Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To(lab.NodeName(1))}},
					Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}}
				_, err := k.CoreV1().Services("default").Create(e.ctx, svc, metav1.CreateOptions{})
				if err == nil {
					_, err = k.DiscoveryV1().EndpointSlices("default").Create(e.ctx, slice, metav1.CreateOptions{})
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s: %w", name, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// loadAverage is the machine's load averages over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err.Error()
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
