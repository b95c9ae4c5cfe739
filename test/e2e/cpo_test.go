package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// CPOVersion is the cloud-provider-openstack release hack/cpo-bins.sh
// builds and TestCloudProviderOpenStack runs.
const CPOVersion = "v1.34.1"

// cpoBinary is openstack-cloud-controller-manager: $FLOWLB_CPO_BIN, else
// hack/cpo-bins.sh's cache. Missing, the test skips, or fails under
// FLOWLB_REQUIRE_KUBE=1.
func cpoBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("FLOWLB_CPO_BIN")
	if p == "" {
		root := os.Getenv("FLOWLB_CPO_CACHE")
		if root == "" {
			root = "/var/cache/flowlb/cpo"
		}
		p = filepath.Join(root, CPOVersion, "openstack-cloud-controller-manager")
	}
	if _, err := os.Stat(p); err != nil {
		if kubetest.Required() {
			t.Fatalf("%s=1 but %s is missing: run hack/cpo-bins.sh", kubetest.RequireEnv, p)
		}
		t.Skipf("%s missing: run hack/cpo-bins.sh", p)
	}
	if err := keystone.Missing(); err != nil {
		if kubetest.Required() {
			t.Fatalf("%s=1 but %v", kubetest.RequireEnv, err)
		}
		t.Skip(err)
	}
	return p
}

// Where the test's Keystone serves, in the fabric beside the server.
const keystoneURL = "http://" + control + ":5000"

// TestCloudProviderOpenStack: cloud-provider-openstack's service
// controller, unchanged, against flowlb as the load-balancer and network
// endpoints of a real Keystone's catalog, on the lab's real Kubernetes
// control plane, in the two deployments docs/kubernetes.md supports:
//   - kube-proxy: the real kube-proxy (nftables) on every node beside
//     flowlb's agent, serving the cluster IPs and node ports;
//   - flowlb-alone: no kube-proxy; flowlb's kube-controller
//     (--load-balancer-class-only, through Keystone with --os-cloud) serves
//     the cluster IPs, node ports and health-check node ports, and leaves
//     the LoadBalancer Services of no class to CPO.
//
// CPO's members are node:nodePort. A LoadBalancer Service gets an ingress
// address without a floating IP (its VIP, on a subnet the external client
// is routed to) and with one (floating-network-id); the external client
// reaches the pods through each node, and the pods reach them at the
// ingress address; with externalTrafficPolicy Local the pods see the
// client's address; deleting the Services removes their load balancers
// and the floating IP.
func TestCloudProviderOpenStack(t *testing.T) {
	kubetest.SkipUnlessKube(t)
	cpo := cpoBinary(t)
	// One Keystone prepared for both (keystone-manage takes a minute or
	// two of CPU), each serving a copy of its own.
	t0 := time.Now()
	prepared := keystone.Prepare(t, control+":5000", keystoneURL)
	t.Logf("Keystone prepared in %s", time.Since(t0).Round(100*time.Millisecond))
	for _, alone := range []bool{false, true} {
		name := "kube-proxy"
		if alone {
			name = "flowlb-alone"
		}
		t.Run(name, func(t *testing.T) {
			t0 := time.Now()
			testCPO(t, cpo, prepared, alone)
			t.Logf("%s: %s", name, time.Since(t0).Round(time.Second))
		})
	}
}

// flowlbCluster is the --cluster-name of flowlb's kube-controller beside
// CPO (whose is "lab"): both name load balancers
// kube_service_<cluster>_<namespace>_<name>, so the two must differ.
const flowlbCluster = "lab-flowlb"

func testCPO(t *testing.T, cpo string, prepared *keystone.Keystone, alone bool) {
	ctx := t.Context()
	t0 := time.Now()
	var ks *keystone.Keystone
	var agentArgs []string
	if alone {
		// kube-proxy's node health port is the agent's where it replaces
		// kube-proxy (docs/kubernetes.md).
		agentArgs = []string{"--healthz-bind-address", "0.0.0.0:10256"}
	}
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 1, agentArgs: agentArgs,
		serverArgs: []string{"--vip-cidr", "198.19.0.0/18", "--auth", "keystone", "--keystone-url", keystoneURL,
			"--keystone-user", "octavia", "--keystone-password", "octaviapw", "--keystone-project", "service",
			"--provider-alias", "amphora=flow"},
		beforeServer: func(c *cluster) {
			ks = startLabKeystone(t, c, prepared.Copy(t), alone)
		}})
	hc := &http.Client{Transport: &http.Transport{DialContext: c.lab.Node(1).Dial}, Timeout: 10 * time.Second}
	var err error
	if c.authToken, err = keystone.Token(ctx, hc, ks.URL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject); err != nil {
		t.Fatal(err)
	}

	kc, err := kubelet.Up(ctx, c.lab, lab.KubeOptions{Kubelet: []string{flowlb(t), "lab", "kubelet"}})
	if err != nil {
		t.Fatal(err)
	}
	e := &kubeEnv{cluster: c, kc: kc, k: kc.Client, ctx: ctx}
	if alone {
		startKeystoneKubeController(t, e)
	} else {
		startKubeProxies(t, e, "nftables")
	}

	subnetID := func(name string) string {
		_, body := e.call("GET", "/v2.0/subnets?name="+name, nil)
		s := dig(body, "subnets")
		if len(s) != 1 {
			t.Fatalf("subnet %s: %v", name, body)
		}
		return s[0].(map[string]any)["id"].(string)
	}
	vipSubnet, extSubnet := subnetID("flowlb-vip-subnet"), subnetID("flowlb-external-subnet")
	_, body := e.call("GET", "/v2.0/networks?name=flowlb-external", nil)
	extNet := dig(body, "networks")[0].(map[string]any)["id"].(string)
	startCPO(t, e, cpo, vipSubnet)
	t.Logf("set up in %s: the lab, Keystone, flowlb, Kubernetes, %s and CPO", time.Since(t0).Round(100*time.Millisecond),
		map[bool]string{false: "kube-proxy", true: "flowlb's kube-controller"}[alone])

	e.deploy("web", 2)
	created := map[string]time.Time{}
	services := map[string]*corev1.Service{}
	annotated := func(name string, ann map[string]string, mut func(*corev1.Service)) {
		created[name] = time.Now()
		services[name] = e.service(name, func(s *corev1.Service) {
			s.Annotations = ann
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			if mut != nil {
				mut(s)
			}
		})
	}
	nodes := []string{lab.NodeAddr(1).String(), lab.NodeAddr(2).String()}
	// ingress waits for Service name's ingress address and its load
	// balancer ACTIVE with a member per node, and returns both.
	ingress := func(name string) (string, map[string]any) {
		var ip string
		testutil.Eventually(t, 60*time.Second, name+"'s ingress and a member per node", func() (bool, string) {
			s, _ := e.k.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			if len(s.Status.LoadBalancer.Ingress) == 1 {
				ip = s.Status.LoadBalancer.Ingress[0].IP
			}
			members := e.members(name)
			return ip != "" && slices.Equal(members, nodes), fmt.Sprintf("ingress %q, members %v", ip, members)
		})
		_, body := e.call("GET", "/v2/lbaas/loadbalancers?name=kube_service_lab_default_"+name, nil)
		lb := dig(body, "loadbalancers")[0].(map[string]any)
		t.Logf("%s: ingress %s, members ACTIVE, %s after the Service's creation; load balancer %s, VIP %s, provider %v", name, ip,
			time.Since(created[name]).Round(time.Millisecond), lb["id"], lb["vip_address"], lb["provider"])
		if alone {
			checkNodePortLB(t, e, services[name], lb)
		}
		return ip, lb
	}
	fipOf := func(addr string) map[string]any {
		_, body := e.call("GET", "/v2.0/floatingips?floating_ip_address="+url.QueryEscape(addr), nil)
		if fs := dig(body, "floatingips"); len(fs) == 1 {
			return fs[0].(map[string]any)
		}
		return nil
	}
	// memberStatus is the operating status of each member of Service
	// name's load balancer, by address.
	memberStatus := func(name string) map[string]any {
		st, _ := e.statusTree(name)
		on := map[string]any{}
		for _, l := range dig(st, "statuses", "loadbalancer", "listeners") {
			for _, p := range dig(l.(map[string]any), "pools") {
				for _, m := range dig(p.(map[string]any), "members") {
					on[m.(map[string]any)["address"].(string)] = m.(map[string]any)["operating_status"]
				}
			}
		}
		return on
	}
	reach := func(name, addr string) {
		ext := net.JoinHostPort(addr, "80")
		// CPO's monitor (TCP, on the node port) says when both nodes
		// serve the Service's node port: CPO's load balancer is ACTIVE
		// within a second of the Service, kube-proxy (or flowlb's
		// kube-controller) may program the node port later, and a
		// connection sent to a node that does not serve it yet is
		// refused.
		testutil.Eventually(t, 30*time.Second, name+"'s members ONLINE", func() (bool, string) {
			on := memberStatus(name)
			return on[nodes[0]] == "ONLINE" && on[nodes[1]] == "ONLINE", fmt.Sprint(on)
		})
		// Through each node first: an ingress address (a floating IP's
		// association above all) is in status as soon as the API has it,
		// and each node's agent programs it a moment later.
		for i := 1; i <= 2; i++ {
			if err := e.lab.SetNextHops(i); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 15*time.Second, fmt.Sprintf("the external client reaches %s at %s via n%d", name, ext, i), func() (bool, string) {
				r, err := ask(e.lab.Client(), ext)
				if err != nil {
					return false, err.Error()
				}
				return true, r.Pod
			})
		}
		if err := e.lab.SetNextHops(1, 2); err != nil {
			t.Fatal(err)
		}
		by := e.spread([]lab.Host{e.lab.Client()}, ext, 30, false)
		t.Logf("%s: 30 requests from the external client to %s reached %v", name, ext, by)
		ready := e.readyPods("web")
		if !slices.Equal(keys(by), ready) {
			t.Errorf("%s: the external client reached %v, want every ready pod %v", name, keys(by), ready)
		}
		// From inside the cluster: every pod of the lab, the static pod
		// of each node and web's own (which may reach themselves), each
		// connection translated by the pod's own node.
		for _, p := range e.lab.Pods() {
			by := e.spread([]lab.Host{p}, ext, 20, false)
			t.Logf("%s: 20 requests from the pod %s to %s reached %v", name, p.Name, ext, by)
			if !slices.Equal(keys(by), ready) {
				t.Errorf("%s: the pod %s reached %v, want every ready pod %v", name, p.Name, keys(by), ready)
			}
		}
	}

	// Without a floating IP: an internal load balancer (CPO's word for
	// one without) on the external subnet, which the client is routed to.
	annotated("novip", map[string]string{
		"service.beta.kubernetes.io/openstack-internal-load-balancer": "true",
		"loadbalancer.openstack.org/subnet-id":                        extSubnet,
	}, nil)
	ip, lb := ingress("novip")
	if ip != lb["vip_address"] {
		t.Errorf("novip's ingress %s, want its VIP %v", ip, lb["vip_address"])
	}
	if lb["provider"] != "amphora" {
		t.Errorf("novip's provider %v, want amphora (CPO's default, served by flow through --provider-alias)", lb["provider"])
	}
	if f := fipOf(ip); f != nil {
		t.Errorf("novip has a floating IP: %v", f)
	}
	reach("novip", ip)

	// With one: floating-network-id names the router:external network.
	annotated("withfip", map[string]string{"loadbalancer.openstack.org/floating-network-id": extNet}, nil)
	fip, lb := ingress("withfip")
	f := fipOf(fip)
	if f == nil || f["port_id"] != lb["vip_port_id"] || f["fixed_ip_address"] != lb["vip_address"] {
		t.Fatalf("withfip's ingress %s: floating IP %v, want one on the VIP port %v (%v)", fip, f, lb["vip_port_id"], lb["vip_address"])
	}
	if !lab.ExternalVIPs.Contains(mustAddr(t, fip)) || lab.ExternalVIPs.Contains(mustAddr(t, lb["vip_address"].(string))) {
		t.Errorf("withfip: floating IP %s, VIP %v: want the floating IP external and the VIP internal", fip, lb["vip_address"])
	}
	reach("withfip", fip)

	// externalTrafficPolicy Local: CPO adds an HTTP monitor on the
	// Service's health-check node port, which kube-proxy (or, alone,
	// flowlb's agent) answers 200 only on a node with a ready local pod;
	// the client sent to that node reaches the pod with its own address.
	e.deployWith("local", 1, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": lab.NodeName(1)}
	})
	annotated("local", map[string]string{"loadbalancer.openstack.org/floating-network-id": extNet}, func(s *corev1.Service) {
		s.Spec.Selector = map[string]string{"app": "local"}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	lfip, _ := ingress("local")
	testutil.Eventually(t, 30*time.Second, "local's member on n1 ONLINE, on n2 not", func() (bool, string) {
		on := memberStatus("local")
		return on[nodes[0]] == "ONLINE" && on[nodes[1]] == "ERROR", fmt.Sprint(on)
	})
	// The API shows a member ERROR once its prober said so, before every
	// agent has dropped it (a health verdict passes through no PENDING
	// state): wait until no node's kernel sends to n2's node port, which
	// kube-proxy drops for an ETP=Local Service without a pod there (CI
	// under load once caught n1 still sending there: a timeout).
	lsvc, err := e.k.CoreV1().Services("default").Get(ctx, "local", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2Member := net.JoinHostPort(nodes[1], fmt.Sprint(lsvc.Spec.Ports[0].NodePort))
	for _, n := range e.lab.Nodes() {
		testutil.Eventually(t, 30*time.Second, n2Member+" out of "+n.Name+"'s flows", func() (bool, string) {
			found, err := backendInFlows(n, n2Member)
			return err == nil && !found, fmt.Sprintf("in the flows: %v, %v", found, err)
		})
	}
	if err := e.lab.SetNextHops(1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.lab.SetNextHops(1, 2) })
	by := e.spreadFrom([]lab.Host{e.lab.Client()}, net.JoinHostPort(lfip, "80"), 10)
	t.Logf("local: 10 requests from the external client via n1 reached %v with the client's address", by)
	// Sent to n2, which has no pod of the Service, the client is served
	// by flowlb's agent there, which sends it to n1's node port (the
	// healthy member), binding and masquerading that translation itself;
	// beside kube-proxy, which drops external traffic to an ETP=Local
	// ingress address on a node without a local endpoint, only flowlb
	// serves it.
	if err := e.lab.SetNextHops(2); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		r, err := ask(e.lab.Client(), net.JoinHostPort(lfip, "80"))
		if err != nil {
			t.Fatalf("local via n2 (no local pod): %v", err)
		}
		if peer, _, _ := net.SplitHostPort(r.Peer); !strings.HasPrefix(r.Addr, "198.18.17.") || peer != lab.NodeAddr(2).String() {
			t.Errorf("local via n2: answered by %s (%s) seeing %s, want n1's pod seeing n2's address %s", r.Pod, r.Addr, r.Peer, lab.NodeAddr(2))
		}
		if i == 0 {
			t.Logf("local via n2 (no local pod): answered by %s (%s), which saw %s", r.Pod, r.Addr, r.Peer)
		}
	}
	if err := e.lab.SetNextHops(1, 2); err != nil {
		t.Fatal(err)
	}

	// Deleting the Services removes the load balancers and the floating
	// IPs, and CPO (and flowlb's kube-controller) release their
	// finalizers.
	for _, name := range []string{"novip", "withfip", "local"} {
		if err := e.k.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t0 = time.Now()
	testutil.Eventually(t, 60*time.Second, "the load balancers, the floating IPs and the Services gone", func() (bool, string) {
		var left []string
		for _, name := range []string{"novip", "withfip", "local"} {
			if e.lbCount(name) != 0 {
				left = append(left, name+"'s load balancer")
			}
			if alone && lbNamed(e, kubelbName(flowlbCluster, name)) != nil {
				left = append(left, name+"'s node-port load balancer")
			}
			if _, err := e.k.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
				left = append(left, "Service "+name)
			}
		}
		for _, a := range []string{fip, lfip} {
			if fipOf(a) != nil {
				left = append(left, "floating IP "+a)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	t.Logf("deleted: load balancers, floating IPs and Services gone in %s", time.Since(t0).Round(time.Millisecond))
	testutil.Eventually(t, 10*time.Second, "withfip's floating IP withdrawn", func() (bool, string) {
		r, err := e.lab.Client().Ask(ctx, net.JoinHostPort(fip, "80"), 500*time.Millisecond)
		return err != nil, "answered by " + r.Pod
	})
}

func kubelbName(cluster, name string) string { return "kube_service_" + cluster + "_default_" + name }

// lbNamed returns the load balancer called name, or nil.
func lbNamed(e *kubeEnv, name string) map[string]any {
	_, body := e.call("GET", "/v2/lbaas/loadbalancers?name="+url.QueryEscape(name), nil)
	if lbs := dig(body, "loadbalancers"); len(lbs) == 1 {
		return lbs[0].(map[string]any)
	}
	return nil
}

// checkNodePortLB checks, beside CPO's load balancer cpoLB of svc, the
// one flowlb's kube-controller keeps for it: its cluster IP the only VIP
// (the external address is CPO's), a listener on the Service port and one
// on its node port, the latter local-only with the health-check node port
// for externalTrafficPolicy Local.
func checkNodePortLB(t *testing.T, e *kubeEnv, svc *corev1.Service, cpoLB map[string]any) {
	t.Helper()
	name := kubelbName(flowlbCluster, svc.Name)
	var lb map[string]any
	testutil.Eventually(t, 20*time.Second, name+" ACTIVE", func() (bool, string) {
		lb = lbNamed(e, name)
		return lb != nil && lb["provisioning_status"] == "ACTIVE", fmt.Sprint(lb["provisioning_status"])
	})
	if lb["vip_address"] != svc.Spec.ClusterIP || len(lb["additional_vips"].([]any)) != 0 {
		t.Errorf("%s: VIP %v, additional %v: want the cluster IP %s only", name, lb["vip_address"], lb["additional_vips"], svc.Spec.ClusterIP)
	}
	if lb["id"] == cpoLB["id"] || cpoLB["vip_address"] == svc.Spec.ClusterIP {
		t.Errorf("%s is CPO's load balancer %v", name, cpoLB["id"])
	}
	_, body := e.call("GET", "/v2/lbaas/listeners?loadbalancer_id="+lb["id"].(string), nil)
	got := map[float64][]any{}
	for _, l := range dig(body, "listeners") {
		l := l.(map[string]any)
		got[l["protocol_port"].(float64)], _ = l["tags"].([]any)
	}
	np := float64(svc.Spec.Ports[0].NodePort)
	wantNP := []any{"flowlb:node-port"}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		wantNP = append(wantNP, "flowlb:local-only", fmt.Sprintf("flowlb:health-check-node-port=%d", svc.Spec.HealthCheckNodePort))
	}
	if len(got) != 2 || len(got[80]) != 0 || !slices.Equal(got[np], wantNP) {
		t.Errorf("%s: listeners (port: tags) %v, want 80 untagged and %v: %v", name, got, np, wantNP)
	}
}

// startKeystoneKubeController starts flowlb's kube-controller in the
// fabric as CPO's neighbour: it authenticates with Keystone (clouds.yaml,
// --os-cloud) as project k8s's user flowlb-kube, serves the cluster IPs
// (a subnet of the lab's service range on a shared network the admin
// makes) and node ports, and leaves the LoadBalancer Services of no
// class to CPO (--load-balancer-class-only), under its own cluster name.
func startKeystoneKubeController(t *testing.T, e *kubeEnv) {
	code, body := e.call("POST", "/v2.0/networks", map[string]any{"network": map[string]any{"name": "kube", "shared": true}})
	if code != 201 {
		t.Fatalf("network: %d %v", code, body)
	}
	netID := body["network"].(map[string]any)["id"].(string)
	code, body = e.call("POST", "/v2.0/subnets", map[string]any{"subnet": map[string]any{"name": "kube-services", "network_id": netID,
		"cidr": lab.KubeServiceCIDR.String(), "ip_version": 4, "gateway_ip": nil}})
	if code != 201 {
		t.Fatalf("subnet: %d %v", code, body)
	}
	e.clusterSub = body["subnet"].(map[string]any)["id"].(string)
	clouds := filepath.Join(t.TempDir(), "clouds.yaml")
	if err := os.WriteFile(clouds, []byte(fmt.Sprintf(`clouds:
  lab:
    auth:
      auth_url: %s/v3
      username: flowlb-kube
      password: flowlbkubepw
      project_name: k8s
      user_domain_name: Default
      project_domain_name: Default
    region_name: %s
    cacert: %s
`, keystoneURL, keystone.Region, e.tls.CACert)), 0o600); err != nil {
		t.Fatal(err)
	}
	const name = "kube-controller-1"
	if _, err := e.lab.Fabric().Start(name, []string{flowlb(t), "kube-controller",
		"--kubeconfig", e.kc.State.LabKubeconfig, "--os-cloud", "lab", "--cluster-name", flowlbCluster,
		"--cluster-ip-subnet", e.clusterSub, "--load-balancer-class-only", "--metrics-listen", ""},
		"OS_CLIENT_CONFIG_FILE="+clouds); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(e.lab.LogPath(lab.HostFabric, name))
			t.Logf("--- %s\n%s", name, tail(string(b), 30))
		}
	})
}

// startInFabric starts argv as the fabric's process name and stops it
// when the test ends, before the test's directories go (cleanups run
// last first; lab down would stop it only after), showing the last lines
// of its logs if the test failed.
func (c *cluster) startInFabric(t *testing.T, name string, argv, env []string, logs ...string) {
	t.Helper()
	if _, err := c.lab.Fabric().Start(name, argv, env...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer func() { _ = c.lab.Fabric().Stop(name) }()
		if t.Failed() {
			for _, p := range logs {
				b, _ := os.ReadFile(p)
				t.Logf("--- %s\n%s", p, tail(string(b), 20))
			}
		}
	})
}

// startLabKeystone starts ks, prepared to listen at control:5000 and be
// reached at keystoneURL, in the lab's fabric (before the
// server, which validates tokens with it) and registers flowlb as its
// load-balancer and network endpoints, the service user the server
// validates tokens as, and the project and user CPO works as (and, with
// kubeController, flowlb's kube-controller's user in that project).
func startLabKeystone(t *testing.T, c *cluster, ks *keystone.Keystone, kubeController bool) *keystone.Keystone {
	argv, env := ks.Argv()
	c.startInFabric(t, "keystone", argv, env, ks.LogPath(), ks.KeystoneLogPath())
	hc := &http.Client{Transport: &http.Transport{DialContext: c.lab.Node(1).Dial}, Timeout: 10 * time.Second}
	ks.Wait(t, hc)
	a, err := ks.Admin(t.Context(), hc)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		a.ProjectUser("service", "octavia", "octaviapw", "admin"),
		a.Endpoint("load-balancer", "octavia", c.api),
		a.Endpoint("network", "neutron", c.api),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Project k8s: CPO's user and, beside CPO alone, flowlb's
	// kube-controller's.
	users := map[string]string{"cpo": "cpopw"}
	if kubeController {
		users["flowlb-kube"] = "flowlbkubepw"
	}
	k8s, err := a.Project("k8s")
	if err != nil {
		t.Fatal(err)
	}
	for u, pw := range users {
		uid, err := a.User(u, pw, k8s)
		if err == nil {
			err = a.Grant(k8s, uid, "member", "load-balancer_member")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return ks
}

// startKubeProxies runs the real kube-proxy (hack/kube-bins.sh's build)
// in mode (nftables or iptables) in every node's namespace, with args
// added (none: --detect-local-mode NodeCIDR), and waits until each serves
// its health check. It leaves the machine's conntrack settings alone.
func startKubeProxies(t testing.TB, e *kubeEnv, mode string, args ...string) {
	bin := filepath.Join(lab.KubeBinDir(), "kube-proxy")
	if len(args) == 0 {
		args = []string{"--detect-local-mode", "NodeCIDR"}
	}
	for i, n := range e.lab.Nodes() {
		if _, err := n.Start("kube-proxy", append([]string{bin, "--kubeconfig", e.kc.State.LabKubeconfig,
			"--hostname-override", lab.NodeName(i + 1), "--proxy-mode", mode,
			"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0", "--conntrack-tcp-timeout-close-wait", "0",
			"--v", "2"}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(e.lab.LogPath("n1", "kube-proxy"))
			t.Logf("--- n1 kube-proxy\n%s", tail(string(b), 30))
		}
	})
	for _, n := range e.lab.Nodes() {
		hc := &http.Client{Transport: &http.Transport{DialContext: n.Dial}, Timeout: time.Second}
		testutil.Eventually(t, 60*time.Second, "kube-proxy healthy on "+n.Name, func() (bool, string) {
			resp, err := hc.Get("http://127.0.0.1:10256/healthz")
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status
		})
	}
}

// startCPO runs openstack-cloud-controller-manager's service controller
// in the fabric, as project k8s's user, VIPs on vipSubnet by default,
// with health monitors (which externalTrafficPolicy Local needs).
func startCPO(t *testing.T, e *kubeEnv, bin, vipSubnet string) {
	conf := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`[Global]
auth-url = %s/v3
username = cpo
password = cpopw
tenant-name = k8s
domain-name = Default
region = %s
ca-file = %s

[LoadBalancer]
subnet-id = %s
create-monitor = true
monitor-delay = 1s
monitor-timeout = 1s
monitor-max-retries = 1
`, keystoneURL, keystone.Region, e.tls.CACert, vipSubnet)), 0o600); err != nil {
		t.Fatal(err)
	}
	runCPO(t, e, bin, conf)
}

// runCPO runs openstack-cloud-controller-manager's service controller in
// the fabric with the cloud config conf, cluster name "lab".
func runCPO(t *testing.T, e *kubeEnv, bin, conf string) {
	kcfg := e.kc.State.LabKubeconfig
	if _, err := e.lab.Fabric().Start("cpo", []string{bin, "--cloud-provider", "openstack", "--cloud-config", conf,
		"--kubeconfig", kcfg, "--authentication-kubeconfig", kcfg, "--authorization-kubeconfig", kcfg,
		"--controllers", "service", "--cluster-name", "lab", "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--v", "3"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(e.lab.LogPath(lab.HostFabric, "cpo"))
			t.Logf("--- openstack-cloud-controller-manager\n%s", tail(string(b), 40))
		}
	})
}
