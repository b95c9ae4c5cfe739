package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// kubeEnv is a lab with flowlb (server, agents), a real Kubernetes
// control plane with the lab kubelet, and flowlb kube-controllers.
type kubeEnv struct {
	*cluster
	kc                 *kubelet.Cluster
	k                  kubernetes.Interface
	clusterSub, extSub string
	controllerArgs     []string // the kube-controllers' own arguments: their external addresses (a subnet or a floating network), the test's
	// clusterSub6, extSub6: with kubeEnvOptions.ipv6.
	clusterSub6, extSub6 string
	ctx                  context.Context
}

// newKubeEnv: 2 nodes with one static pod each (clients that Kubernetes
// does not manage) and `controllers` kube-controller replicas.
func newKubeEnv(t testing.TB, controllers int) *kubeEnv {
	return newKubeEnvOpts(t, kubeEnvOptions{nodes: 2, controllers: controllers})
}

// kubeEnvOptions: the lab's nodes (one static pod each) and zones, the
// kube-controller replicas, and what is added to the agents' command line.
// floating: LoadBalancer Services get floating IPs of the server's
// external network (the Kuryr model) instead of external-subnet VIPs.
// ipv6: the controller gets IPv6 cluster-IP and external subnets too
// (the lab's second service CIDR and a part of its IPv6 external range),
// so dual-stack and IPv6 Services are served.
type kubeEnvOptions struct {
	nodes, zones, controllers int
	agentArgs                 []string
	agentArgsOf               func(i int) []string // as clusterOptions.agentArgsOf
	floating, ipv6            bool
	// serverArgs and controllerArgs are added to the server's and the
	// kube-controllers' command lines.
	serverArgs, controllerArgs []string
	// beforeServer: as clusterOptions.beforeServer.
	beforeServer func(*cluster)
	// dataplane: as clusterOptions.dataplane.
	dataplane string
}

func newKubeEnvOpts(t testing.TB, o kubeEnvOptions) *kubeEnv {
	// Skips when the Kubernetes binaries are missing, unless
	// FLOWLB_REQUIRE_KUBE=1 (make unit), where that is a failure.
	kubetest.SkipUnlessKube(t)
	controllers := o.controllers
	serverArgs := []string{"--vip-cidr", "198.19.0.0/18", "--external-vip-cidr", ""}
	if o.floating {
		serverArgs = serverArgs[:2] // the external network flowlb-external holds the lab's external range
	}
	serverArgs = append(serverArgs, o.serverArgs...)
	c := newClusterOpts(t, clusterOptions{nodes: o.nodes, pods: 1, zones: o.zones, agentArgs: o.agentArgs, agentArgsOf: o.agentArgsOf, serverArgs: serverArgs, beforeServer: o.beforeServer, dataplane: o.dataplane})
	bin := flowlb(t)
	kc, err := kubelet.Up(t.Context(), c.lab, lab.KubeOptions{Kubelet: []string{bin, "lab", "kubelet"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Kubernetes up: API ready in %s, nodes ready in %s", kc.APIReady.Round(time.Millisecond), kc.NodesReady.Round(time.Millisecond))
	e := &kubeEnv{cluster: c, kc: kc, k: kc.Client, ctx: t.Context()}
	// One network for the cluster IPs and the external addresses (a
	// LoadBalancer Service's cluster IP is an additional VIP).
	code, body := c.call("POST", "/v2.0/networks", map[string]any{"network": map[string]any{"name": "kube", "shared": true}})
	if code != 201 {
		t.Fatalf("network: %d %v", code, body)
	}
	netID := body["network"].(map[string]any)["id"].(string)
	type subnet struct {
		name, cidr string
		id         *string
	}
	subnets := []subnet{{"kube-services", lab.KubeServiceCIDR.String(), &e.clusterSub}, {"kube-external", lab.ExternalVIPs.String(), &e.extSub}}
	if o.floating {
		subnets = subnets[:1]
	}
	if o.ipv6 {
		subnets = append(subnets, subnet{"kube-services6", lab.KubeServiceCIDR6.String(), &e.clusterSub6}, subnet{"kube-external6", externalCIDR6.String(), &e.extSub6})
	}
	for _, s := range subnets {
		version := 4
		if netip.MustParsePrefix(s.cidr).Addr().Is6() {
			version = 6
		}
		// No gateway: every address is a Service's to take (the API
		// server's own Service has the first one).
		code, body := c.call("POST", "/v2.0/subnets", map[string]any{"subnet": map[string]any{"name": s.name, "network_id": netID, "cidr": s.cidr, "ip_version": version, "gateway_ip": nil}})
		if code != 201 {
			t.Fatalf("subnet %s: %d %v", s.name, code, body)
		}
		*s.id = body["subnet"].(map[string]any)["id"].(string)
	}
	lbArgs := []string{"--external-subnet", e.extSub}
	if o.floating {
		lbArgs = []string{"--floating-network", "flowlb-external"}
	}
	if o.ipv6 {
		lbArgs = append(lbArgs, "--cluster-ip-subnet6", e.clusterSub6, "--external-subnet6", e.extSub6)
	}
	e.controllerArgs = append(lbArgs, o.controllerArgs...)
	for i := range controllers {
		e.startController(t, i+1)
	}
	return e
}

// startController starts kube-controller replica i (from 1) in the
// fabric; its log's end is shown if t fails.
func (e *kubeEnv) startController(t testing.TB, i int) {
	t.Helper()
	name := fmt.Sprintf("kube-controller-%d", i)
	if _, err := e.lab.Fabric().Start(name, append([]string{flowlb(t), "kube-controller",
		"--kubeconfig", e.kc.State.LabKubeconfig, "--octavia-endpoint", e.api, "--octavia-ca-file", e.tls.CACert,
		"--cluster-name", "lab", "--cluster-ip-subnet", e.clusterSub,
		"--metrics-listen", controllerMetrics(i)}, e.controllerArgs...)); err != nil { // pod networks: from the Nodes
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(e.lab.LogPath(lab.HostFabric, name))
			t.Logf("--- %s\n%s", name, tail(string(b), 30))
		}
	})
}

// controllerMetrics is the metrics address of kube-controller replica i
// (from 1) in the fabric: /metrics and /debug/stages.
func controllerMetrics(i int) string { return fmt.Sprintf("%s:%d", control, 9880+i) }

func (e *kubeEnv) deploy(name string, replicas int32) { e.deployWith(name, replicas, nil) }

// deployWith creates the Deployment of deploy changed by mut.
func (e *kubeEnv) deployWith(name string, replicas int32, mut func(*appsv1.Deployment)) {
	e.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](10),
				Containers: []corev1.Container{{Name: "echo", Image: "flowlb/echo",
					Ports:          []corev1.ContainerPort{{Name: "tcp", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("tcp")}}, PeriodSeconds: 1},
					Lifecycle:      &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}}}}}}}}
	if mut != nil {
		mut(d)
	}
	if _, err := e.k.AppsV1().Deployments("default").Create(e.ctx, d, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *kubeEnv) service(name string, mut func(*corev1.Service)) *corev1.Service {
	e.t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("tcp")}}}}
	if mut != nil {
		mut(s)
	}
	s, err := e.k.CoreV1().Services("default").Create(e.ctx, s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// members returns the distinct member addresses of Service name's load balancer
// once it is ACTIVE (nil if there is none). Members and status come from
// one status tree, one snapshot of the store: members seen here are
// programmed on every node.
func (e *kubeEnv) members(name string) []string {
	st, ok := e.statusTree(name)
	if !ok || dig1(st, "statuses", "loadbalancer")["provisioning_status"] != "ACTIVE" {
		return nil
	}
	var out []string
	for _, l := range dig(st, "statuses", "loadbalancer", "listeners") {
		for _, p := range dig(l.(map[string]any), "pools") {
			for _, m := range dig(p.(map[string]any), "members") {
				out = append(out, m.(map[string]any)["address"].(string))
			}
		}
	}
	// A Service port and its node port have pools of the same endpoints.
	slices.Sort(out)
	return slices.Compact(out)
}

// poolMembers returns the member addresses of each pool of Service
// name's load balancer, sorted, once it is ACTIVE (else nil).
func (e *kubeEnv) poolMembers(name string) [][]string {
	st, ok := e.statusTree(name)
	if !ok || dig1(st, "statuses", "loadbalancer")["provisioning_status"] != "ACTIVE" {
		return nil
	}
	var out [][]string
	for _, l := range dig(st, "statuses", "loadbalancer", "listeners") {
		for _, p := range dig(l.(map[string]any), "pools") {
			var addrs []string
			for _, m := range dig(p.(map[string]any), "members") {
				addrs = append(addrs, m.(map[string]any)["address"].(string))
			}
			slices.Sort(addrs)
			out = append(out, addrs)
		}
	}
	return out
}

// statusTree returns the status tree of Service name's load balancer;
// false if there is none.
func (e *kubeEnv) statusTree(name string) (map[string]any, bool) {
	_, body := e.call("GET", "/v2/lbaas/loadbalancers?name=kube_service_lab_default_"+name, nil)
	lbs, _ := body["loadbalancers"].([]any)
	if len(lbs) == 0 {
		return nil, false
	}
	_, st := e.call("GET", "/v2/lbaas/loadbalancers/"+lbs[0].(map[string]any)["id"].(string)+"/status", nil)
	return st, true
}

// waitProgrammed waits until Service name's load balancer is ACTIVE.
// Called once the API shows a change, it returns when every agent has
// programmed that change: the change and PENDING_UPDATE commit together,
// and ACTIVE follows the agents' acks (docs/architecture.md).
func (e *kubeEnv) waitProgrammed(t *testing.T, name string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "Service "+name+"'s LB ACTIVE", func() (bool, string) {
		st, ok := e.statusTree(name)
		if !ok {
			return false, "no LB"
		}
		status := dig1(st, "statuses", "loadbalancer")["provisioning_status"]
		return status == "ACTIVE", fmt.Sprint(status)
	})
}

// dig1 follows keys through nested objects to an object (nil if absent).
func dig1(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}

func dig(m map[string]any, keys ...string) []any {
	for i, k := range keys {
		if i == len(keys)-1 {
			v, _ := m[k].([]any)
			return v
		}
		m, _ = m[k].(map[string]any)
	}
	return nil
}

// waitMembers waits until the Ready pods of app=name pass ok (nil: any)
// and are the members of Service name's load balancer, ACTIVE: programmed
// on every node.
func (e *kubeEnv) waitMembers(t *testing.T, name string, within time.Duration, ok func(ready []string) bool) {
	t.Helper()
	testutil.Eventually(t, within, "Service "+name+"'s members = its ready pods", func() (bool, string) {
		ready := e.readyPods(name)
		if ok != nil && !ok(ready) {
			return false, fmt.Sprintf("ready pods %v", ready)
		}
		members := e.members(name)
		return slices.Equal(members, ready), fmt.Sprintf("members %v, ready pods %v", members, ready)
	})
}

// readyPods returns the addresses of the Ready pods of app=name.
func (e *kubeEnv) readyPods(name string) []string {
	pods, err := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out = append(out, p.Status.PodIP)
			}
		}
	}
	slices.Sort(out)
	return out
}

// load asks an address from one host every 10 ms until checked.
type load struct {
	ok, failed  atomic.Int64
	lastErr     atomic.Value
	stop, ended chan struct{}
}

func startLoad(from lab.Host, addr string) *load {
	l := &load{stop: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(l.ended)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			if _, err := ask(from, addr); err != nil {
				l.failed.Add(1)
				l.lastErr.Store(err)
			} else {
				l.ok.Add(1)
			}
			time.Sleep(10 * time.Millisecond) // pacing: the load's rate, not a wait
		}
	}()
	return l
}

// check stops the load and fails t if any request failed (when: the
// change it ran through).
func (l *load) check(t *testing.T, when string) {
	t.Helper()
	close(l.stop)
	<-l.ended
	t.Logf("%s: %d requests succeeded, %d failed", when, l.ok.Load(), l.failed.Load())
	if l.failed.Load() > 0 {
		t.Errorf("%d requests failed %s (last: %v)", l.failed.Load(), when, l.lastErr.Load())
	}
}

// lbCount counts the load balancers named for Service name.
func (e *kubeEnv) lbCount(name string) int {
	_, body := e.call("GET", "/v2/lbaas/loadbalancers?name=kube_service_lab_default_"+name, nil)
	lbs, _ := body["loadbalancers"].([]any)
	return len(lbs)
}

// spreadFrom asks addr n times from each host and returns the replies
// by pod address, checking that each pod saw the client's own address.
func (e *kubeEnv) spreadFrom(hosts []lab.Host, addr string, n int) map[string]int {
	return e.spread(hosts, addr, n, true)
}

// spread is spreadFrom, the client address checked only if keep.
func (e *kubeEnv) spread(hosts []lab.Host, addr string, n int, keep bool) map[string]int {
	e.t.Helper()
	by := map[string]int{}
	for _, h := range hosts {
		for range n {
			r, err := ask(h, addr)
			if err != nil {
				e.t.Fatalf("%s -> %s: %v", h.Name, addr, err)
			}
			local, _, _ := net.SplitHostPort(r.Addr)
			by[local]++
			want := h.Addr // the client's address of the family of addr
			if host, _, _ := net.SplitHostPort(addr); strings.Contains(host, ":") {
				want = h.Addr6
			}
			if peer, _, _ := net.SplitHostPort(r.Peer); keep && peer != want.String() {
				e.t.Errorf("%s saw peer %s, want the client %s", r.Pod, peer, want)
			}
		}
	}
	return by
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestKubernetesServices drives the real Kubernetes control plane and the
// lab kubelet through Deployments and Services, and checks that flowlb
// serves them: ClusterIP from pods of every node with the client address
// kept, scaling, a rolling update under load, LoadBalancer with source
// ranges and externalTrafficPolicy=Local from the external client,
// internalTrafficPolicy=Local, session affinity, deletion, and controller
// failover with no duplicate.
func TestKubernetesServices(t *testing.T) {
	e := newKubeEnv(t, 2)
	clients := []lab.Host{e.lab.Pod(1, 1), e.lab.Pod(2, 1)} // static pods, one per node
	e.deploy("web", 3)
	web := e.service("web", nil)
	vip := net.JoinHostPort(web.Spec.ClusterIP, "80")
	testutil.Eventually(t, 30*time.Second, "3 ready pods", func() (bool, string) {
		ready := e.readyPods("web")
		return len(ready) == 3, fmt.Sprint(ready)
	})
	e.waitMembers(t, "web", 20*time.Second, nil)
	if by := e.spreadFrom(clients, vip, 30); !slices.Equal(keys(by), e.readyPods("web")) {
		t.Errorf("ClusterIP traffic reached %v, want the pods %v", by, e.readyPods("web"))
	}
	// Pods were spread over both nodes by the lab scheduler.
	nodes := map[string]bool{}
	for _, ip := range e.readyPods("web") {
		nodes[ip[:10]] = true // 198.18.17. or 198.18.18.
	}
	if len(nodes) != 2 {
		t.Errorf("pods on nodes %v, want both", nodes)
	}

	t.Run("scale", func(t *testing.T) {
		if _, err := e.k.AppsV1().Deployments("default").UpdateScale(e.ctx, "web", &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitMembers(t, "web", 30*time.Second, func(ready []string) bool { return len(ready) == 5 })
		if by := e.spreadFrom(clients, vip, 40); len(by) != 5 {
			t.Errorf("after scaling to 5, traffic reached %v", by)
		}
	})

	t.Run("rolling update under load", func(t *testing.T) {
		l := startLoad(clients[0], vip)
		before := e.readyPods("web")
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"rollout":"%d"}}}}}`, time.Now().UnixNano())
		if _, err := e.k.AppsV1().Deployments("default").Patch(e.ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitMembers(t, "web", 90*time.Second, func(now []string) bool {
			pods, _ := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=web"})
			return len(now) == 5 && len(pods.Items) == 5 && !slices.ContainsFunc(now, func(ip string) bool { return slices.Contains(before, ip) })
		})
		l.check(t, "during the rolling update")
	})

	t.Run("session affinity", func(t *testing.T) {
		s, err := e.k.CoreV1().Services("default").Get(e.ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if _, err := e.k.CoreV1().Services("default").Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "SOURCE_IP persistence", func() (bool, string) {
			_, body := e.call("GET", "/v2/lbaas/pools?name=http", nil)
			for _, p := range dig(body, "pools") {
				if sp, _ := p.(map[string]any)["session_persistence"].(map[string]any); sp["type"] == "SOURCE_IP" {
					return true, ""
				}
			}
			return false, fmt.Sprint(dig(body, "pools"))
		})
		e.waitProgrammed(t, "web")
		for _, c := range clients {
			if by := e.spreadFrom([]lab.Host{c}, vip, 15); len(by) != 1 {
				t.Errorf("with ClientIP affinity %s reached %v, want one pod", c.Name, by)
			}
		}
	})

	t.Run("LoadBalancer", func(t *testing.T) {
		pub := e.service("pub", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{lab.ClientAddr.String() + "/32"}
		})
		var ip string
		testutil.Eventually(t, 20*time.Second, "an ingress address and 5 members", func() (bool, string) {
			s, _ := e.k.CoreV1().Services("default").Get(e.ctx, "pub", metav1.GetOptions{})
			if len(s.Status.LoadBalancer.Ingress) == 1 {
				ip = s.Status.LoadBalancer.Ingress[0].IP
			}
			members := e.members("pub")
			return ip != "" && len(members) == 5, fmt.Sprintf("ingress %q, members %v", ip, members)
		})
		if !lab.ExternalVIPs.Contains(mustAddr(t, ip)) {
			t.Fatalf("ingress %s outside the external range %s", ip, lab.ExternalVIPs)
		}
		ext := net.JoinHostPort(ip, "80")
		// externalTrafficPolicy Cluster: the receiving node masquerades.
		if by := e.spread([]lab.Host{e.lab.Client()}, ext, 20, false); len(by) < 2 {
			t.Errorf("the external client reached %v", by)
		}
		// Pods still reach the Service's cluster IP (the pod networks,
		// which the controller reads from the Nodes, are let through the
		// source ranges).
		e.spreadFrom(clients, net.JoinHostPort(pub.Spec.ClusterIP, "80"), 5)

		// A source range that excludes the client blocks it.
		s, _ := e.k.CoreV1().Services("default").Get(e.ctx, "pub", metav1.GetOptions{})
		s.Spec.LoadBalancerSourceRanges = []string{"198.18.200.0/24"}
		if _, err := e.k.CoreV1().Services("default").Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "the client blocked", func() (bool, string) {
			r, err := e.lab.Client().Ask(e.ctx, ext, 500*time.Millisecond)
			return err != nil, "answered by " + r.Pod
		})

		// externalTrafficPolicy=Local: each node sends the client to its
		// own pods only, with the client's address kept.
		s, _ = e.k.CoreV1().Services("default").Get(e.ctx, "pub", metav1.GetOptions{})
		s.Spec.LoadBalancerSourceRanges = nil
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		if _, err := e.k.CoreV1().Services("default").Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "local-only listeners", func() (bool, string) {
			_, body := e.call("GET", "/v2/lbaas/listeners?tags=flowlb:local-only", nil)
			n := len(dig(body, "listeners"))
			return n == 2, fmt.Sprintf("%d listeners, want the VIP's and the node port's", n)
		})
		e.waitProgrammed(t, "pub")
		defer func() { _ = e.lab.SetNextHops(1, 2) }()
		for _, n := range []int{1, 2} {
			if err := e.lab.SetNextHops(n); err != nil {
				t.Fatal(err)
			}
			by := e.spreadFrom([]lab.Host{e.lab.Client()}, ext, 10)
			for ip := range by {
				if !strings.HasPrefix(ip, fmt.Sprintf("198.18.%d.", 16+n)) {
					t.Errorf("ETP=Local via n%d reached %s, a pod of another node", n, ip)
				}
			}
		}
	})

	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		itp := e.service("itp", func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		})
		// members reads ACTIVE with the members: the flows are programmed.
		testutil.Eventually(t, 20*time.Second, "itp's members", func() (bool, string) {
			members := e.members("itp")
			return len(members) == 5, fmt.Sprint(members)
		})
		for i, c := range clients {
			by := e.spreadFrom([]lab.Host{c}, net.JoinHostPort(itp.Spec.ClusterIP, "80"), 15)
			for ip := range by {
				if !strings.HasPrefix(ip, fmt.Sprintf("198.18.%d.", 17+i)) {
					t.Errorf("ITP=Local from %s reached %s, a pod of another node", c.Name, ip)
				}
			}
		}
	})

	t.Run("controller failover", func(t *testing.T) {
		lease, err := e.k.CoordinationV1().Leases("kube-system").Get(e.ctx, "flowlb-kube-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		var active string
		for _, p := range e.lab.State().Procs {
			if strings.HasPrefix(p.Name, "kube-controller-") && strings.HasSuffix(holder, fmt.Sprintf("_%d", p.PID)) {
				active = p.Name
			}
		}
		if active == "" {
			t.Fatalf("no controller holds the lease (holder %q)", holder)
		}
		if err := e.lab.Fabric().Stop(active); err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped the active controller %s", active)
		e.service("after", nil)
		testutil.Eventually(t, 30*time.Second, "the standby serving a new Service", func() (bool, string) {
			members := e.members("after")
			return len(members) == 5, fmt.Sprint(members)
		})
		for _, s := range []string{"web", "pub", "itp", "after"} {
			if n := e.lbCount(s); n != 1 {
				t.Errorf("%d load balancers for Service %s, want 1", n, s)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := e.k.CoreV1().Services("default").Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "the LB gone", func() (bool, string) {
			n := e.lbCount("web")
			return n == 0, fmt.Sprintf("%d LBs", n)
		})
		testutil.Eventually(t, 20*time.Second, "the Service gone (no finalizer holds it)", func() (bool, string) {
			_, err := e.k.CoreV1().Services("default").Get(e.ctx, "web", metav1.GetOptions{})
			return err != nil, "still there"
		})
		if _, err := clients[0].Ask(e.ctx, vip, 500*time.Millisecond); err == nil {
			t.Error("the deleted Service's cluster IP still answers")
		}
	})
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
