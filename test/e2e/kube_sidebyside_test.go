package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// probe is one thing a client does to a Service: n connections from one
// host to one address. distinct: the pods that answer are counted, not
// named (ClientIP affinity picks one pod at random, the same in both
// runs only by chance).
type probe struct {
	name     string
	from     lab.Host
	addr     string
	n        int
	distinct bool
}

// observation is what the client and the pods saw over a probe's
// connections: the pods that answered (or how many), the client
// addresses those pods saw, and how the connections ended: outcome is
// that of at least 9 in 10 of them ("ok", "refused", "timeout", or
// another error's text), else "mixed"; results counts each. A stray
// failure among 30 connections (seen with kube-proxy too) is noise, not
// behaviour: outcome is compared, results only shown.
type observation struct {
	pods, peers, outcome, results string
}

func (o observation) String() string {
	return fmt.Sprintf("pods %s, peers %s, %s (%s)", o.pods, o.peers, o.outcome, o.results)
}

// same reports whether two observations show the same behaviour.
func (o observation) same(p observation) bool {
	return o.pods == p.pods && o.peers == p.peers && o.outcome == p.outcome
}

// sideBySideDifferences are the probes whose observations may differ
// between kube-proxy and flowlb, with the reason (docs/kubernetes.md,
// "Side by side with kube-proxy").
var sideBySideDifferences = map[string]string{
	"NodePort Local from n2-p1 via n1": "a pod's connection to a Local node port is cluster traffic for both and may reach any endpoint; " +
		"kube-proxy does not masquerade it (the pod keeps its address), flowlb masquerades it to the node so that the replies always return through it",
	"NodePort Local from n1-p1 via n2": "as above; with the endpoint on the client's own node, kube-proxy's unmasqueraded connection gets its " +
		"replies straight from the endpoint, not through n2, and times out; flowlb's, masqueraded to n2, is served",
}

// sideBySidePods is the cluster's pod range for kube-proxy: every lab
// node's pod network (198.18.(16+i).0/24) is in it.
var sideBySidePods = netip.MustParsePrefix("198.18.16.0/20")

// TestKubeProxySideBySide runs the same Service scenarios on one lab
// cluster (2 nodes, the lab's real Kubernetes control plane) twice: first
// with the real kube-proxy (nftables mode) on every node and no flowlb
// kube-controller, then with kube-proxy stopped and its rules removed and
// flowlb's kube-controller serving the Services through the agents. It
// compares, probe by probe, what clients observe: which pods answer,
// which client address the pods see, and which connections are refused
// or dropped: ClusterIP from a pod of each node; NodePort with
// externalTrafficPolicy Cluster and Local from the external client to
// every node, a node without endpoints among them; a Service without
// endpoints (cluster IP and node port); ClientIP affinity on the cluster
// IP and the node port; pods to another node's node ports, and a pod to
// its own node's (hairpin). No difference is allowed but those listed in
// sideBySideDifferences.
func TestKubeProxySideBySide(t *testing.T) {
	e := newKubeEnv(t, 0)
	client := e.lab.Client()
	nodes := e.lab.Nodes()
	pods := []lab.Host{e.lab.Pod(1, 1), e.lab.Pod(2, 1)} // static pods: clients Kubernetes does not manage

	e.deploy("web", 4)
	e.deployWith("solo", 1, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "n1"}
	})
	nodePort := func(etp corev1.ServiceExternalTrafficPolicy, app string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalTrafficPolicy = etp
			s.Spec.Selector = map[string]string{"app": app}
		}
	}
	cip := e.service("cip", nil)
	np := e.service("np", nodePort(corev1.ServiceExternalTrafficPolicyCluster, "web"))
	npSolo := e.service("np-solo", nodePort(corev1.ServiceExternalTrafficPolicyCluster, "solo"))
	npLocal := e.service("np-local", nodePort(corev1.ServiceExternalTrafficPolicyLocal, "solo"))
	empty := e.service("empty", nodePort(corev1.ServiceExternalTrafficPolicyCluster, "nothing"))
	aff := e.service("aff", func(s *corev1.Service) {
		nodePort(corev1.ServiceExternalTrafficPolicyCluster, "web")(s)
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
	})
	testutil.Eventually(t, 60*time.Second, "web's 4 pods on both nodes and solo's on n1 ready", func() (bool, string) {
		web, solo := e.readyPods("web"), e.readyPods("solo")
		return len(web) == 4 && nodesOf(t, web) == 2 && len(solo) == 1 && nodeOfPod(t, solo[0]) == 1, fmt.Sprintf("web %v, solo %v", web, solo)
	})

	clusterIP := func(s *corev1.Service) string { return net.JoinHostPort(s.Spec.ClusterIP, "80") }
	viaNode := func(s *corev1.Service, n lab.Host) string {
		return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(s.Spec.Ports[0].NodePort)))
	}
	var probes []probe
	for _, p := range pods {
		probes = append(probes,
			probe{name: "ClusterIP from " + p.Name, from: p, addr: clusterIP(cip), n: 30},
			probe{name: "no endpoints: ClusterIP from " + p.Name, from: p, addr: clusterIP(empty), n: 2},
			probe{name: "affinity: ClusterIP from " + p.Name, from: p, addr: clusterIP(aff), n: 15, distinct: true})
	}
	for _, n := range nodes {
		probes = append(probes,
			probe{name: "NodePort Cluster via " + n.Name, from: client, addr: viaNode(np, n), n: 30},
			probe{name: "NodePort Cluster, pod on n1 only, via " + n.Name, from: client, addr: viaNode(npSolo, n), n: 5},
			probe{name: "NodePort Local, pod on n1 only, via " + n.Name, from: client, addr: viaNode(npLocal, n), n: 5},
			probe{name: "no endpoints: NodePort via " + n.Name, from: client, addr: viaNode(empty, n), n: 2},
			probe{name: "affinity: NodePort via " + n.Name, from: client, addr: viaNode(aff, n), n: 15, distinct: true})
	}

	// Pods to node ports: of another node, and of their own node
	// (hairpin: solo's pod reaching itself).
	soloPod := podHost(t, e, e.readyPods("solo")[0])
	probes = append(probes,
		probe{name: "NodePort Cluster from n2-p1 via n1", from: pods[1], addr: viaNode(np, nodes[0]), n: 30},
		probe{name: "NodePort Local from n2-p1 via n1", from: pods[1], addr: viaNode(npLocal, nodes[0]), n: 5},
		probe{name: "NodePort Local from n1-p1 via n2", from: pods[0], addr: viaNode(npLocal, nodes[1]), n: 5},
		probe{name: "hairpin: NodePort Cluster from solo's pod via n1", from: soloPod, addr: viaNode(npSolo, nodes[0]), n: 5},
		probe{name: "hairpin: NodePort Local from solo's pod via n1", from: soloPod, addr: viaNode(npLocal, nodes[0]), n: 5})

	// The lab's nodes have no default route, where a real node has one:
	// without a route to the Service range the node's stack answers a
	// cluster IP that kube-proxy did not translate with "network
	// unreachable" before kube-proxy's filter chains see it. A route
	// via the router stands in for the default route.
	for _, n := range nodes {
		if err := n.Run(e.ctx, nil, os.Stderr, os.Stderr, "ip", "route", "replace", lab.KubeServiceCIDR.String(), "via", lab.RouterFabricAddr.String()); err != nil {
			t.Fatal(err)
		}
	}

	// kube-proxy, with every node's pod network as the cluster's (what
	// flowlb's agents take from the Nodes' podCIDRs), as kubeadm runs it.
	startKubeProxies(t, e, "nftables", "--detect-local-mode", "ClusterCIDR", "--cluster-cidr", sideBySidePods.String())
	web, solo := e.readyPods("web"), e.readyPods("solo")
	// Each Service's endpoints reach kube-proxy's rules on their own
	// (one EndpointSlice each): wait for web's through both Services
	// that carry all four and through every node, not one alone.
	testutil.Eventually(t, 30*time.Second, "kube-proxy serves web's cluster IP and node port on both nodes, and solo's node port", func() (bool, string) {
		o := observe(pods[0], clusterIP(cip), 12, false)
		l := observe(client, viaNode(npLocal, nodes[0]), 1, false)
		ok, seen := o.pods == strings.Join(web, " ") && l.pods == solo[0], fmt.Sprintf("%v; %v", o, l)
		for _, n := range nodes {
			v := observe(pods[1], viaNode(np, n), 12, false)
			ok, seen = ok && v.pods == strings.Join(web, " "), seen+fmt.Sprintf("; np via %s: %v", n.Name, v)
		}
		return ok, seen
	})
	kubeProxy := observeAll(probes)
	// The scenarios mean something: kube-proxy balanced, masqueraded,
	// kept, refused and dropped where it should.
	for name, want := range map[string]string{
		"ClusterIP from n1-p1":                     "pods " + strings.Join(web, " ") + ", peers " + pods[0].Addr.String() + ", ok",
		"NodePort Local, pod on n1 only, via n1":   "pods " + solo[0] + ", peers " + lab.ClientAddr.String() + ", ok",
		"NodePort Local, pod on n1 only, via n2":   "pods -, peers -, timeout",
		"no endpoints: NodePort via n2":            "pods -, peers -, refused",
		"affinity: NodePort via n1":                "pods 1, peers n1, ok",
		"NodePort Cluster, pod on n1 only, via n2": "pods " + solo[0] + ", peers " + nodes[1].Addr.String() + ", ok",
		"no endpoints: ClusterIP from n2-p1":       "pods -, peers -, refused",
		"no endpoints: ClusterIP from n1-p1":       "pods -, peers -, refused",
		"affinity: ClusterIP from n2-p1":           "pods 1, peers " + pods[1].Addr.String() + ", ok",
		"NodePort Cluster via n1":                  "pods " + strings.Join(web, " "),
	} {
		if got := kubeProxy[name].String(); !strings.HasPrefix(got, want) {
			t.Errorf("kube-proxy, %s: %s, want %s", name, got, want)
		}
	}

	// kube-proxy gone: its process, its rules and the connections it
	// tracked.
	bin := filepath.Join(lab.KubeBinDir(), "kube-proxy")
	for _, n := range nodes {
		if err := n.Stop("kube-proxy"); err != nil {
			t.Fatal(err)
		}
		if err := n.Run(e.ctx, nil, os.Stderr, os.Stderr, bin, "--cleanup", "--proxy-mode", "nftables"); err != nil {
			t.Fatalf("kube-proxy --cleanup on %s: %v", n.Name, err)
		}
		var out strings.Builder
		_ = n.Run(e.ctx, nil, &out, &out, "nft", "list", "tables")
		if strings.Contains(out.String(), "kube-proxy") {
			t.Fatalf("%s still has kube-proxy's tables after --cleanup:\n%s", n.Name, out.String())
		}
		if err := n.Run(e.ctx, nil, nil, nil, "conntrack", "-F"); err != nil {
			t.Fatalf("conntrack -F on %s: %v", n.Name, err)
		}
	}

	// flowlb.
	e.startController(t, 1)
	for _, s := range []struct{ name, app string }{{"cip", "web"}, {"np", "web"}, {"np-solo", "solo"}, {"np-local", "solo"}, {"aff", "web"}} {
		e.waitPodMembers(t, s.name, s.app, len(e.readyPods(s.app)))
	}
	e.waitProgrammed(t, "empty")
	flowLB := observeAll(probes)

	var table strings.Builder
	for _, p := range probes {
		k, f := kubeProxy[p.name], flowLB[p.name]
		fmt.Fprintf(&table, "%-45s | %s | %s\n", p.name, k, f)
		if k.same(f) {
			continue
		}
		if why, ok := sideBySideDifferences[p.name]; ok {
			t.Logf("%s: kube-proxy %s, flowlb %s (documented: %s)", p.name, k, f, why)
			continue
		}
		t.Errorf("%s: kube-proxy %s, flowlb %s", p.name, k, f)
	}
	t.Logf("probe | kube-proxy | flowlb\n%s", table.String())
}

// podHost is the lab host of the pod with address ip.
func podHost(t *testing.T, e *kubeEnv, ip string) lab.Host {
	t.Helper()
	// The kubelet adds pods to the lab's state: read it afresh.
	l, err := lab.Open(e.lab.Name(), filepath.Dir(e.lab.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Pods() {
		if p.Addr.String() == ip {
			return p
		}
	}
	t.Fatalf("no lab pod has address %s", ip)
	return lab.Host{}
}

// observeAll runs every probe once.
func observeAll(probes []probe) map[string]observation {
	out := map[string]observation{}
	for _, p := range probes {
		out[p.name] = observe(p.from, p.addr, p.n, p.distinct)
	}
	return out
}

// observe makes n connections from host to addr, each asking the echo
// pod behind it, and sums up what happened. After a failure it makes at
// most two more: a dropped connection costs the whole timeout.
func observe(from lab.Host, addr string, n int, distinct bool) observation {
	pods, peers, results := map[string]bool{}, map[string]bool{}, map[string]int{}
	failures := 0
	for range n {
		r, err := from.Ask(context.Background(), addr, 2*time.Second)
		results[outcome(err)]++
		if err != nil {
			if failures++; failures == 3 {
				break
			}
			continue
		}
		pod, _, _ := net.SplitHostPort(r.Addr)
		peer, _, _ := net.SplitHostPort(r.Peer)
		if distinct {
			peer = masqueradedTo(peer)
		}
		pods[pod], peers[peer] = true, true
	}
	o := observation{pods: setString(pods), peers: setString(peers)}
	if distinct {
		o.pods = strconv.Itoa(len(pods))
	}
	var rs []string
	attempts := 0
	for _, v := range results {
		attempts += v
	}
	o.outcome = "mixed"
	for k, v := range results {
		rs = append(rs, fmt.Sprintf("%s %d", k, v))
		if 10*v >= 9*attempts {
			o.outcome = k
		}
	}
	slices.Sort(rs)
	o.results = strings.Join(rs, ", ")
	return o
}

// outcome names how a connection ended.
func outcome(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return err.Error()
}

// masqueradedTo names the node whose address a pod saw ("n1"), or
// returns the address: a node masquerades to its fabric address or, for
// its own pods, to their gateway, so which one a pod sees depends on
// where the pod runs, which affinity's one random pick decides.
func masqueradedTo(peer string) string {
	a, err := netip.ParseAddr(peer)
	if err != nil {
		return peer
	}
	for i := 1; i <= lab.MaxNodes; i++ {
		if a == lab.NodeAddr(i) || a == lab.PodGateway(i) {
			return lab.NodeName(i)
		}
	}
	return peer
}

// setString is the sorted keys of a set, "-" for none.
func setString(m map[string]bool) string {
	if len(m) == 0 {
		return "-"
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
