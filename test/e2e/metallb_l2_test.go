package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// MetalLB's L2 mode beside flowlb's: the router, on the nodes' segment,
// routes metallbL2Segment on-link; flowlb answers for the VIPs of its
// lower half (--l2-cidrs), MetalLB's speakers for the addresses of
// metallbL2Pool (an L2Advertisement on eth0). flowlb's data plane serves
// both: MetalLB's Service lists its address as an external IP, which the
// kube-controller serves as kube-proxy would, so only the announcement
// differs.
var (
	metallbL2Segment = netip.MustParsePrefix("198.19.250.0/24")
	flowlbL2Range    = netip.MustParsePrefix("198.19.250.0/25")
	metallbL2Pool    = netip.MustParsePrefix("198.19.250.240/28")
)

// metallbL2Owner is the node MetalLB's layer 2 mode gives ip to among
// nodes (speaker/layer2_controller.go, ShouldAnnounce in v0.15.2): the
// lowest SHA-256 of "<node>#<ip>".
func metallbL2Owner(ip netip.Addr, nodes []string) string {
	s := slices.Clone(nodes)
	slices.SortFunc(s, func(a, b string) int {
		ha, hb := sha256.Sum256([]byte(a+"#"+ip.String())), sha256.Sum256([]byte(b+"#"+ip.String()))
		return bytes.Compare(ha[:], hb[:])
	})
	return s[0]
}

// TestMetalLBL2SideBySide: flowlb's L2 announcements and MetalLB's
// speakers in L2 mode (memberlist on, as its manifests run it) in one
// lab, each answering ARP for one VIP; MetalLB's address is chosen so
// that the node answering for flowlb's VIP answers for it too. That node
// dies (links cut, agent and speaker killed at once) and the test
// reports how long the router's connections to each VIP took to succeed
// again (docs/benchmarks.md); the times are reported, not asserted.
func TestMetalLBL2SideBySide(t *testing.T) {
	if os.Getenv("FLOWLB_METALLB") != "1" {
		t.Skip("MetalLB side by side runs only with FLOWLB_METALLB=1 (it builds MetalLB with hack/metallb-bins.sh)")
	}
	const nodes = 3
	bins := metallbBins(t)
	e := newKubeEnvOpts(t, kubeEnvOptions{nodes: nodes, controllers: 1,
		serverArgs: []string{"--l2-cidrs", flowlbL2Range.String()},
		agentArgs:  []string{"--l2-interface", "eth0"}})
	l := e.lab
	t.Cleanup(func() {
		if t.Failed() {
			for i := 1; i <= nodes; i++ {
				b, _ := os.ReadFile(l.LogPath(lab.NodeName(i), "metallb-speaker"))
				t.Logf("--- %s metallb-speaker log\n%s", lab.NodeName(i), tail(string(b), 25))
			}
			b, _ := os.ReadFile(l.LogPath(lab.HostFabric, "metallb-controller"))
			t.Logf("--- metallb-controller log\n%s", tail(string(b), 15))
		}
	})

	// The router: the whole segment on-link, so that it asks ARP for
	// both sides' VIPs.
	rh, err := l.Router().Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	reth, err := rh.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	dst := &net.IPNet{IP: metallbL2Segment.Addr().AsSlice(), Mask: net.CIDRMask(metallbL2Segment.Bits(), 32)}
	if err := rh.RouteReplace(&netlink.Route{LinkIndex: reth.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
		t.Fatal(err)
	}
	macs := map[string]int{}
	for i := 1; i <= nodes; i++ {
		h, err := l.Node(i).Netlink()
		if err != nil {
			t.Fatal(err)
		}
		eth, err := h.LinkByName("eth0")
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		macs[eth.Attrs().HardwareAddr.String()] = i
	}
	// ownerOf: the node whose MAC the router resolved v to (0: none).
	ownerOf := func(v netip.Addr) (int, string) {
		ns, err := rh.NeighList(reth.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			return 0, err.Error()
		}
		for _, n := range ns {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == v {
				return macs[n.HardwareAddr.String()], fmt.Sprintf("%s %s", n.HardwareAddr, neighState(n.State))
			}
		}
		return 0, "no entry"
	}

	// flowlb's VIP, members on every node; the node that answers for it
	// is the one that dies.
	flowVIP := netip.MustParseAddr("198.19.250.10")
	member := func(i int) map[string]any {
		p := l.Pod(i, 1)
		return map[string]any{"address": p.Addr.String(), "protocol_port": 8080, "name": p.Name, "tags": []string{"flowlb:node=" + lab.NodeName(i)}}
	}
	var members []any
	for i := 1; i <= nodes; i++ {
		members = append(members, member(i))
	}
	code, body := e.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "l2", "vip_subnet_id": e.extSub, "vip_address": flowVIP.String(),
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": members}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := e.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	flowAddr := net.JoinHostPort(flowVIP.String(), "80")
	testutil.Eventually(t, 10*time.Second, "the router reaches "+flowAddr+" on-link", func() (bool, string) {
		_, err := ask(l.Router(), flowAddr)
		return err == nil, fmt.Sprint(err)
	})
	dead, st := ownerOf(flowVIP)
	if dead == 0 {
		t.Fatalf("the router resolved %s to %s: want a node's MAC", flowVIP, st)
	}
	var names []string
	for i := 1; i <= nodes; i++ {
		names = append(names, lab.NodeName(i))
	}
	// MetalLB's address: the first of its pool that MetalLB gives the
	// same node.
	var mlbVIP netip.Addr
	for a := metallbL2Pool.Addr(); metallbL2Pool.Contains(a); a = a.Next() {
		if metallbL2Owner(a, names) == lab.NodeName(dead) {
			mlbVIP = a
			break
		}
	}
	if !mlbVIP.IsValid() {
		t.Fatalf("no address of %s that MetalLB gives %s", metallbL2Pool, lab.NodeName(dead))
	}
	t.Logf("%s answered by n%d; MetalLB's address %s, which it gives n%d too", flowVIP, dead, mlbVIP, dead)

	// The dying node's pod leaves flowlb's pool first, so that every
	// connection after the failover has a live backend.
	var keep []any
	for i := 1; i <= nodes; i++ {
		if i != dead {
			keep = append(keep, member(i))
		}
	}
	pool := lb["pools"].([]any)[0].(map[string]any)["id"].(string)
	if code, body := e.call("PUT", "/v2/lbaas/pools/"+pool+"/members", map[string]any{"members": keep}); code != 202 {
		t.Fatalf("batch member update: %d %v", code, body)
	}
	e.waitActive(lb["id"].(string))

	// MetalLB: CRDs, a pool and an L2Advertisement on eth0, and one Pod
	// object per speaker with the node's fabric address as its pod IP:
	// memberlist finds the other speakers by those addresses (the
	// speakers run as lab processes, so their Pods are objects only,
	// which no node can take).
	e.kubectl(t, "", "apply", "--server-side", "-f", filepath.Join(bins, "crd"))
	e.kubectl(t, "", "wait", "--for", "condition=Established", "--timeout", "60s", "-f", filepath.Join(bins, "crd"))
	e.kubectl(t, "", "create", "namespace", metallbNamespace)
	var y strings.Builder
	fmt.Fprintf(&y, "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: lab, namespace: %s}\nspec:\n  addresses: [%s]\n---\n", metallbNamespace, metallbL2Pool)
	fmt.Fprintf(&y, "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: lab, namespace: %s}\nspec:\n  ipAddressPools: [lab]\n  interfaces: [eth0]\n", metallbNamespace)
	for i := 1; i <= nodes; i++ {
		fmt.Fprintf(&y, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: speaker-%s, namespace: %s, labels: {app: metallb, component: speaker}}\n", lab.NodeName(i), metallbNamespace)
		y.WriteString("spec:\n  nodeSelector: {metallb-lab: none}\n  containers: [{name: speaker, image: registry.invalid/metallb-speaker}]\n")
	}
	// A Service of MetalLB's class asking for mlbVIP (flowlb's data
	// plane serves another class's ingress addresses as kube-proxy
	// does), with ready endpoints on the nodes that live on.
	fmt.Fprintf(&y, "---\napiVersion: v1\nkind: Service\nmetadata: {name: mlb, namespace: default, annotations: {metallb.io/loadBalancerIPs: %q}}\n", mlbVIP)
	fmt.Fprintf(&y, "spec:\n  type: LoadBalancer\n  loadBalancerClass: %s\n  ports: [{port: 80, targetPort: 8080, protocol: TCP}]\n", metallbClass)
	y.WriteString("---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: mlb-1, namespace: default, labels: {kubernetes.io/service-name: mlb}}\naddressType: IPv4\nendpoints:\n")
	for i := 1; i <= nodes; i++ {
		if i != dead {
			fmt.Fprintf(&y, "- {addresses: [%s], conditions: {ready: true}, nodeName: %s}\n", l.Pod(i, 1).Addr, lab.NodeName(i))
		}
	}
	y.WriteString("ports: [{port: 8080, protocol: TCP}]\n")
	e.kubectl(t, y.String(), "apply", "-f", "-")
	for i := 1; i <= nodes; i++ {
		pods := e.k.CoreV1().Pods(metallbNamespace)
		p, err := pods.Get(t.Context(), "speaker-"+lab.NodeName(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a := lab.NodeAddr(i).String()
		p.Status.PodIP, p.Status.PodIPs = a, []corev1.PodIP{{IP: a}}
		p.Status.HostIP, p.Status.HostIPs = a, []corev1.HostIP{{IP: a}}
		if _, err := pods.UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("speaker Pod status: %v", err)
		}
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secretkey"), []byte("flowlb-lab-memberlist-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + e.kc.State.LabKubeconfig}
	common := []string{"--namespace", metallbNamespace, "--lb-class", metallbClass, "--port", "0"}
	if _, err := l.Fabric().Start("metallb-controller", append([]string{filepath.Join(bins, "controller"),
		"--webhook-mode", "disabled", "--disable-cert-rotation"}, common...), env...); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= nodes; i++ {
		if _, err := l.Node(i).Start("metallb-speaker", append([]string{filepath.Join(bins, "speaker"),
			"--node-name", lab.NodeName(i), "--pod-name", "speaker-" + lab.NodeName(i)}, common...),
			append(env, "METALLB_NODE_NAME="+lab.NodeName(i), "METALLB_ML_BIND_ADDR="+lab.NodeAddr(i).String(),
				"METALLB_ML_LABELS=app=metallb,component=speaker", "METALLB_ML_SECRET_KEY_PATH="+dir)...); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 60*time.Second, "MetalLB's address for its Service", func() (bool, string) {
		s, err := e.k.CoreV1().Services("default").Get(t.Context(), "mlb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, "no ingress"
		}
		return s.Status.LoadBalancer.Ingress[0].IP == mlbVIP.String(), fmt.Sprint(s.Status.LoadBalancer.Ingress)
	})
	// Every speaker sees the other two before the failure: else the
	// failover would wait for memberlist's join, not its failure
	// detection.
	testutil.Eventually(t, 60*time.Second, "the speakers' memberlist", func() (bool, string) {
		for i := 1; i <= nodes; i++ {
			b, _ := os.ReadFile(l.LogPath(lab.NodeName(i), "metallb-speaker"))
			if strings.Count(string(b), `"node event":"NodeJoin"`) < nodes {
				return false, fmt.Sprintf("%s: %s", lab.NodeName(i), tail(string(b), 3))
			}
		}
		return true, ""
	})
	mlbAddr := net.JoinHostPort(mlbVIP.String(), "80")
	testutil.Eventually(t, 60*time.Second, "the router reaches "+mlbAddr+" on-link", func() (bool, string) {
		_, err := ask(l.Router(), mlbAddr)
		return err == nil, fmt.Sprint(err)
	})
	for _, v := range []netip.Addr{flowVIP, mlbVIP} {
		if n, st := ownerOf(v); n != dead {
			t.Fatalf("the router resolves %s to %s (n%d), want n%d's MAC", v, st, n, dead)
		}
	}

	// n<dead> dies: its links cut, the agent and the speaker killed at
	// once. Each VIP is asked from the router in its own goroutine, with
	// connections of 200 ms at most, as TestL2Announcements does.
	cut := killNode(t, l, dead)
	if err := l.Node(dead).Kill("metallb-speaker", unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	back := map[string]time.Duration{}
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range []string{flowAddr, mlbAddr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := testutil.Wait(45*time.Second, func() (bool, string) {
				if _, err := l.Router().Ask(context.Background(), a, 200*time.Millisecond); err != nil {
					return false, err.Error()
				}
				mu.Lock()
				back[a] = time.Since(cut)
				mu.Unlock()
				return true, ""
			})
			mu.Lock()
			errs[a] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	for a, err := range errs {
		if err != nil {
			t.Errorf("the router reaching %s again after n%d died: %v", a, dead, err)
		}
	}
	for _, v := range []netip.Addr{flowVIP, mlbVIP} {
		if n, st := ownerOf(v); n == dead || n == 0 {
			t.Errorf("after the failover the router resolves %s to %s (n%d), want a live node", v, st, n)
		}
	}
	// Every new connection is answered.
	for _, a := range []string{flowAddr, mlbAddr} {
		for range 10 {
			if _, err := ask(l.Router(), a); err != nil {
				t.Errorf("router -> %s after the failover: %v", a, err)
				break
			}
		}
	}
	nf, _ := ownerOf(flowVIP)
	nm, _ := ownerOf(mlbVIP)
	// MetalLB's speakers, not flowlb's agents, answer for its address:
	// the new owner is the one MetalLB's hash picks among the live nodes.
	live := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == lab.NodeName(dead) })
	if want := metallbL2Owner(mlbVIP, live); lab.NodeName(nm) != want {
		t.Errorf("after the failover %s is answered by n%d, want %s (MetalLB's choice among %v)", mlbVIP, nm, want, live)
	}
	if t.Failed() {
		return
	}
	t.Logf("L2 failover, n%d's links cut: flowlb's %s answered again after %v (by n%d), MetalLB's %s after %v (by n%d; memberlist, LAN defaults)",
		dead, flowVIP, back[flowAddr].Round(time.Millisecond), nf, mlbVIP, back[mlbAddr].Round(time.Millisecond), nm)
}
