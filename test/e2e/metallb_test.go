package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// MetalLB side by side: its controller and one speaker per node run as
// lab processes against the lab's Kubernetes API, their BGP sessions to
// the same FRR router as the agents', and one node failure is timed for
// both at once. Only with FLOWLB_METALLB=1: MetalLB is built by
// hack/metallb-bins.sh (FLOWLB_METALLB_VERSION, default v0.16.2).
const (
	metallbNamespace = "metallb-system"
	// metallbClass is the loadBalancerClass MetalLB is started for: it
	// touches no other Service.
	metallbClass = "metallb.io/lab"
	// metallbASN is the speakers' AS, apart from the agents' (NodeASN)
	// so that the router's peer groups stay apart.
	metallbASN = 64513
)

// metallbPool is MetalLB's address pool: the top of the lab's external
// range, which the test's flowlb load balancer (allocated from the
// bottom of its subnet) never reaches.
var metallbPool = netip.MustParsePrefix("198.19.255.0/28")

// metallbAddr is node i's second fabric address, MetalLB's source
// address: the router keys BGP neighbors by address, and node i's own
// (lab.NodeAddr) is its agent's session. 198.18.0.(230+i) is below the
// database's address and above the nodes' for the labs this test makes.
func metallbAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(230 + i)}) }

// metallbBins builds (or finds) MetalLB's binaries and returns their
// directory; a failed build fails the test with the script's output.
func metallbBins(t testing.TB) string {
	t.Helper()
	script, err := filepath.Abs("../../hack/metallb-bins.sh")
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(t.Context(), script)
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/metallb-bins.sh: %v\n%s", err, tail(errb.String(), 15))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := lines[len(lines)-1]
	t.Logf("MetalLB %s in %s (%s)", strings.TrimSpace(readFile(t, filepath.Join(dir, "VERSION"))), dir, time.Since(start).Round(time.Second))
	return dir
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// routeHops is how many next hops the router's kernel route to p has
// (0: none).
func routeHops(l *lab.Lab, p netip.Prefix) (int, []string, error) {
	h, err := lab.Handle(lab.NSName(l.Name(), lab.HostRouter))
	if err != nil {
		return 0, nil, err
	}
	defer h.Close()
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: unix.RTPROT_BGP}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return 0, nil, err
	}
	for _, r := range rs {
		if r.Dst == nil || r.Dst.String() != p.String() {
			continue
		}
		var gws []string
		if r.Gw != nil {
			gws = append(gws, r.Gw.String())
		}
		for _, nh := range r.MultiPath {
			gws = append(gws, nh.Gw.String())
		}
		return len(gws), gws, nil
	}
	return 0, nil, nil
}

// addMetalLBAddr puts metallbAddr(i) on node i's fabric link.
func addMetalLBAddr(t testing.TB, l *lab.Lab, i int) {
	t.Helper()
	h, err := l.Node(i).Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP.Equal(lab.NodeAddr(i).AsSlice()) {
			link, err := h.LinkByIndex(a.LinkIndex)
			if err != nil {
				t.Fatal(err)
			}
			na, _ := netlink.ParseAddr(netip.PrefixFrom(metallbAddr(i), lab.FabricCIDR.Bits()).String())
			if err := h.AddrAdd(link, na); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no link with %s in %s", lab.NodeAddr(i), lab.NodeName(i))
}

// newMetalLBEnv is a Kubernetes lab of nodes whose agents speak BGP
// (BFD, graceful restart) to FRR in the router, as TestBGPWithFRR's, with
// controllers flowlb kube-controllers.
func newMetalLBEnv(t testing.TB, nodes, controllers int) *kubeEnv {
	t.Helper()
	conf := writeAgentBGPConfig(t, "")
	ns := nodeIndices(nodes)
	return newKubeEnvOpts(t, kubeEnvOptions{nodes: nodes, controllers: controllers,
		agentArgs: []string{"--announce-cidrs", lab.ExternalVIPs.String(), "--bgp-config", conf},
		beforeServer: func(c *cluster) {
			if err := c.lab.StartRouterBGP(lab.RouterBGP{Nodes: ns, Password: bgpPassword, BFD: true}); err != nil {
				t.Fatal(err)
			}
		}})
}

// kubectl runs kubectl against the lab's API with stdin; a failure
// fails t with its output.
func (e *kubeEnv) kubectl(t testing.TB, stdin string, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is missing (Debian kubernetes-client, installed by hack/kube-bins.sh)")
	}
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"--kubeconfig", e.kc.State.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startMetalLBBGP runs MetalLB in native BGP mode on e's lab: a peer
// group in the router for the speakers' sessions, from each node's
// second address (no BFD: MetalLB's native BGP has none; the shortest
// hold time BGP allows), MetalLB's CRDs, an address pool of pool
// advertised to the router, and its controller and one speaker per node
// as lab processes, for metallbClass's Services only.
func startMetalLBBGP(t testing.TB, e *kubeEnv, bins string, nodes int, pool netip.Prefix) {
	t.Helper()
	l := e.lab
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := l.Vtysh(context.Background(), lab.HostRouter, "show bgp summary", "show bfd peers brief")
			t.Logf("--- FRR in the router\n%s", out)
			for i := 1; i <= nodes; i++ {
				b, _ := os.ReadFile(l.LogPath(lab.NodeName(i), "metallb-speaker"))
				t.Logf("--- %s metallb-speaker log\n%s", lab.NodeName(i), tail(string(b), 15))
			}
			b, _ := os.ReadFile(l.LogPath(lab.HostFabric, "metallb-controller"))
			t.Logf("--- metallb-controller log\n%s", tail(string(b), 15))
		}
	})
	vty := []string{"configure terminal", fmt.Sprintf("router bgp %d", lab.RouterASN),
		"neighbor metallb peer-group", fmt.Sprintf("neighbor metallb remote-as %d", metallbASN), "neighbor metallb timers 1 3"}
	for i := 1; i <= nodes; i++ {
		vty = append(vty, fmt.Sprintf("neighbor %s peer-group metallb", metallbAddr(i)))
	}
	vty = append(vty, "address-family ipv4 unicast", "neighbor metallb activate", "exit-address-family")
	if out, err := l.Vtysh(t.Context(), lab.HostRouter, vty...); err != nil {
		t.Fatalf("router: %v\n%s", err, out)
	}
	for i := 1; i <= nodes; i++ {
		addMetalLBAddr(t, l, i)
	}

	e.kubectl(t, "", "apply", "--server-side", "-f", filepath.Join(bins, "crd"))
	e.kubectl(t, "", "wait", "--for", "condition=Established", "--timeout", "60s", "-f", filepath.Join(bins, "crd"))
	e.kubectl(t, "", "create", "namespace", metallbNamespace)
	var y strings.Builder
	fmt.Fprintf(&y, "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: lab, namespace: %s}\nspec:\n  addresses: [%s]\n---\n", metallbNamespace, pool)
	fmt.Fprintf(&y, "apiVersion: metallb.io/v1beta1\nkind: BGPAdvertisement\nmetadata: {name: lab, namespace: %s}\nspec:\n  ipAddressPools: [lab]\n", metallbNamespace)
	for i := 1; i <= nodes; i++ {
		e.kubectl(t, "", "label", "node", lab.NodeName(i), "metallb-peer="+lab.NodeName(i))
		fmt.Fprintf(&y, "---\napiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: router-%s, namespace: %s}\nspec:\n", lab.NodeName(i), metallbNamespace)
		fmt.Fprintf(&y, "  myASN: %d\n  peerASN: %d\n  peerAddress: %s\n  sourceAddress: %s\n  routerID: %s\n  holdTime: 3s\n", metallbASN, lab.RouterASN, lab.RouterFabricAddr, metallbAddr(i), metallbAddr(i))
		fmt.Fprintf(&y, "  nodeSelectors: [{matchLabels: {metallb-peer: %s}}]\n", lab.NodeName(i))
		// The speaker reads its own Pod (the owner of its status
		// objects); it runs as a lab process, so its Pod is an object
		// only, which no node can take.
		fmt.Fprintf(&y, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: speaker-%s, namespace: %s}\n", lab.NodeName(i), metallbNamespace)
		y.WriteString("spec:\n  nodeSelector: {metallb-lab: none}\n  containers: [{name: speaker, image: registry.invalid/metallb-speaker}]\n")
	}
	e.kubectl(t, y.String(), "apply", "-f", "-")

	env := []string{"KUBECONFIG=" + e.kc.State.LabKubeconfig}
	common := []string{"--namespace", metallbNamespace, "--lb-class", metallbClass, "--port", "0"}
	if _, err := l.Fabric().Start("metallb-controller", append([]string{filepath.Join(bins, "controller"),
		"--webhook-mode", "disabled", "--disable-cert-rotation"}, common...), env...); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= nodes; i++ {
		if _, err := l.Node(i).Start("metallb-speaker", append([]string{filepath.Join(bins, "speaker"),
			"--node-name", lab.NodeName(i), "--pod-name", "speaker-" + lab.NodeName(i)}, common...), append(env, "METALLB_NODE_NAME="+lab.NodeName(i))...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMetalLBSideBySide: flowlb's agents and MetalLB's speakers (native
// BGP, its default mode) in the same lab, each with its own sessions to
// the same FRR router and a VIP every node announces; one node dies (its
// links cut, its agent and speaker killed at once) and the test reports
// how long each VIP's route at the router kept it (docs/benchmarks.md).
// The speakers have no BFD in native mode: the router finds a dead one
// by its hold time (3 s, the least BGP allows).
func TestMetalLBSideBySide(t *testing.T) {
	if os.Getenv("FLOWLB_METALLB") != "1" {
		t.Skip("MetalLB side by side runs only with FLOWLB_METALLB=1 (it builds MetalLB with hack/metallb-bins.sh)")
	}
	const nodes = 3
	bins := metallbBins(t)
	e := newMetalLBEnv(t, nodes, 0)
	l := e.lab
	startMetalLBBGP(t, e, bins, nodes, metallbPool)
	// A Service of MetalLB's class with one ready endpoint (a pod of n1;
	// without a selector, so only this EndpointSlice counts).
	var y strings.Builder
	fmt.Fprintf(&y, "apiVersion: v1\nkind: Service\nmetadata: {name: mlb, namespace: default}\nspec:\n  type: LoadBalancer\n  loadBalancerClass: %s\n  ports: [{port: 80, targetPort: 8080, protocol: TCP}]\n", metallbClass)
	fmt.Fprintf(&y, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: mlb-1, namespace: default, labels: {kubernetes.io/service-name: mlb}}\naddressType: IPv4\n")
	fmt.Fprintf(&y, "endpoints: [{addresses: [%s], conditions: {ready: true}, nodeName: n1}]\nports: [{port: 8080, protocol: TCP}]\n", l.Pod(1, 1).Addr)
	e.kubectl(t, y.String(), "apply", "-f", "-")

	// flowlb's VIP, members on n1 and n2: every node announces it.
	lb, _, _ := e.createLB(e.extSub, nil, "ROUND_ROBIN", []lab.Host{l.Pod(1, 1), l.Pod(2, 1)})
	flowVIP := host(lb["vip_address"].(string))
	var mlbVIP netip.Prefix
	testutil.Eventually(t, 60*time.Second, "MetalLB's address for its Service", func() (bool, string) {
		s, err := e.k.CoreV1().Services("default").Get(t.Context(), "mlb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, "no ingress"
		}
		mlbVIP = host(s.Status.LoadBalancer.Ingress[0].IP)
		return true, ""
	})
	if !metallbPool.Contains(mlbVIP.Addr()) {
		t.Fatalf("MetalLB gave %s, outside its pool %s", mlbVIP, metallbPool)
	}
	for _, p := range []netip.Prefix{flowVIP, mlbVIP} {
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("the router's route to %s via %d nodes", p, nodes), func() (bool, string) {
			n, gws, err := routeHops(l, p)
			if err != nil {
				return false, err.Error()
			}
			return n == nodes, fmt.Sprint(gws)
		})
	}

	// n3 dies: its links cut, the agent and the speaker killed, at once
	// for both VIPs. The times are reported, not asserted.
	w := watchRoutes(t, l, flowVIP, mlbVIP)
	h, err := l.Node(3).Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	for _, k := range links {
		if k.Attrs().Name != "lo" {
			if err := h.LinkSetDown(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range []string{"agent", "metallb-speaker"} {
		if err := l.Node(3).Kill(p, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	gone := map[netip.Prefix]time.Duration{}
	testutil.Eventually(t, 30*time.Second, "the router's routes without n3", func() (bool, string) {
		for _, p := range []netip.Prefix{flowVIP, mlbVIP} {
			if at, ok := w.firstFewer(p, nodes); ok {
				gone[p] = at.Sub(cut)
			}
		}
		return len(gone) == 2, fmt.Sprint(w.all())
	})
	for p, dead := range map[netip.Prefix]netip.Addr{flowVIP: lab.NodeAddr(3), mlbVIP: metallbAddr(3)} {
		n, gws, err := routeHops(l, p)
		if err != nil {
			t.Fatal(err)
		}
		if n != nodes-1 || slices.Contains(gws, dead.String()) {
			t.Errorf("the router's route to %s after the failure: %v, want %d next hops without %s", p, gws, nodes-1, dead)
		}
	}
	t.Logf("node failure: the router's route left n3 %v after its links were cut for flowlb's %s (BGP+BFD 300 ms x 3), %v for MetalLB's %s (native BGP, hold time 3 s)",
		gone[flowVIP].Round(time.Millisecond), flowVIP.Addr(), gone[mlbVIP].Round(time.Millisecond), mlbVIP.Addr())
}
