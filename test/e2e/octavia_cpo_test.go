package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/pools"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestRealOctaviaCPO: cloud-provider-openstack (CPOVersion, unchanged)
// through the real Octavia with `lb-provider = flowlb`, on the bed's real
// Neutron, as a Kubernetes cluster in a cloud runs it. The lab's nodes
// are VMs on the tenant network (newRealNeutronCluster) and report their
// addresses there as their InternalIPs (the lab kubelet's --node-ip), so
// that CPO's members (node:nodePort) are addresses on the tenant subnet
// that the node holding the VIP reaches; the real kube-proxy (nftables)
// serves the node ports on those addresses; CPO runs in the fabric
// namespace (where Keystone, Neutron and Octavia listen) as the bed's
// Keystone admin, VIPs on the tenant subnet, floating IPs of the external
// network. A LoadBalancer Service becomes an Octavia load balancer of
// provider flowlb with a member per node and a floating IP on its VIP
// port; after the install step (docs/operations.md, "A real Neutron")
// the external namespace reaches every pod through the floating IP; the
// Service deleted leaves nothing in Octavia, flowlb or Neutron.
func TestRealOctaviaCPO(t *testing.T) {
	kubetest.SkipUnlessKube(t)
	cpo := cpoBinary(t)
	t0 := time.Now()
	c, cloud, nodes, _, oct := newRealOctaviaCluster(t)
	t.Logf("the bed, flowlb and Octavia up in %s", time.Since(t0).Round(time.Second))

	// Kubernetes on the same lab: each node's InternalIP is its port's
	// address on the tenant network.
	t1 := time.Now()
	kubeletArgv := []string{flowlb(t), "lab", "kubelet"}
	nodeAddrs := map[string]bool{}
	for _, n := range nodes {
		kubeletArgv = append(kubeletArgv, "--node-ip", fmt.Sprintf("%d=%s", n.Node, n.Addr))
		nodeAddrs[n.Addr.String()] = true
	}
	ctx := t.Context()
	kc, err := kubelet.Up(ctx, c.lab, lab.KubeOptions{Kubelet: kubeletArgv})
	if err != nil {
		t.Fatal(err)
	}
	e := &kubeEnv{cluster: c, kc: kc, k: kc.Client, ctx: ctx}
	for _, n := range nodes {
		node, err := e.k.CoreV1().Nodes().Get(ctx, lab.NodeName(n.Node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := node.Status.Addresses; len(a) == 0 || a[0].Type != corev1.NodeInternalIP || a[0].Address != n.Addr.String() {
			t.Fatalf("node %s reports %+v, want its tenant address %s first", node.Name, a, n.Addr)
		}
	}
	startKubeProxies(t, e, "nftables", "--detect-local-mode", "NodeCIDR", "--nodeport-addresses", openstack.TenantCIDR.String())

	conf := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`[Global]
auth-url = %s/v3
username = %s
password = %s
tenant-name = %s
domain-name = Default
region = %s

[LoadBalancer]
lb-provider = flowlb
subnet-id = %s
floating-network-id = %s
create-monitor = true
monitor-delay = 2s
monitor-timeout = 1s
monitor-max-retries = 2
`, cloud.KeystoneURL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject, keystone.Region,
		cloud.Tenant.SubnetID, cloud.External.NetworkID)), 0o600); err != nil {
		t.Fatal(err)
	}
	runCPO(t, e, cpo, conf)
	t.Logf("Kubernetes, kube-proxy and CPO up in %s", time.Since(t1).Round(time.Second))

	e.deploy("web", 2)
	created := time.Now()
	e.service("web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer })

	// CPO's load balancer in Octavia: provider flowlb, ACTIVE, its VIP on
	// the tenant subnet, a member per node at the node's tenant address
	// and node port, and the Service's ingress a floating IP.
	const lbName = "kube_service_lab_default_web"
	var lb loadbalancers.LoadBalancer
	var ingress string
	var poolID string
	testutil.Eventually(t, 10*time.Minute, "web's load balancer ACTIVE in Octavia with a member per node, and its ingress", func() (bool, string) {
		all, err := loadbalancers.List(oct.LoadBalancer, loadbalancers.ListOpts{Name: lbName}).AllPages(ctx)
		if err != nil {
			return false, err.Error()
		}
		lbs, err := loadbalancers.ExtractLoadBalancers(all)
		if err != nil || len(lbs) != 1 {
			return false, fmt.Sprint(lbs, err)
		}
		lb = lbs[0]
		if len(lb.Pools) != 1 {
			return false, fmt.Sprintf("%s, pools %v", lb.ProvisioningStatus, lb.Pools)
		}
		poolID = lb.Pools[0].ID
		ms, err := octaviaMembers(ctx, oct, poolID)
		if err != nil {
			return false, err.Error()
		}
		addrs := map[string]bool{}
		for _, m := range ms {
			addrs[m.Address] = true
		}
		s, err := e.k.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ing := s.Status.LoadBalancer.Ingress; len(ing) == 1 {
			ingress = ing[0].IP
		}
		return lb.ProvisioningStatus == "ACTIVE" && len(ms) == len(nodes) && fmt.Sprint(addrs) == fmt.Sprint(nodeAddrs) && ingress != "",
			fmt.Sprintf("%s, members %v, ingress %q", lb.ProvisioningStatus, addrs, ingress)
	})
	t.Logf("web: load balancer %s ACTIVE in Octavia, VIP %s, ingress %s, %s after the Service",
		lb.ID, lb.VipAddress, ingress, time.Since(created).Round(time.Second))
	svc, err := e.k.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := int(svc.Spec.Ports[0].NodePort)
	if lb.Provider != "flowlb" || lb.VipSubnetID != cloud.Tenant.SubnetID || !openstack.TenantCIDR.Contains(netip.MustParseAddr(lb.VipAddress)) {
		t.Errorf("web's load balancer: provider %q, VIP %s on subnet %s: want flowlb on the tenant subnet %s",
			lb.Provider, lb.VipAddress, lb.VipSubnetID, cloud.Tenant.SubnetID)
	}
	ms, err := octaviaMembers(ctx, oct, poolID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ProtocolPort != nodePort {
			t.Errorf("member %s:%d, want the node port %d", m.Address, m.ProtocolPort, nodePort)
		}
	}
	var fips struct {
		FloatingIPs []struct {
			ID      string `json:"id"`
			Network string `json:"floating_network_id"`
			PortID  string `json:"port_id"`
			Fixed   string `json:"fixed_ip_address"`
		} `json:"floatingips"`
	}
	if err := cloud.Call("GET", "/floatingips?floating_ip_address="+ingress, nil, &fips); err != nil {
		t.Fatal(err)
	}
	if len(fips.FloatingIPs) != 1 || fips.FloatingIPs[0].PortID != lb.VipPortID || fips.FloatingIPs[0].Fixed != lb.VipAddress ||
		fips.FloatingIPs[0].Network != cloud.External.NetworkID {
		t.Fatalf("web's ingress %s: floating IPs %+v, want one of the external network on the VIP port %s (%s)",
			ingress, fips.FloatingIPs, lb.VipPortID, lb.VipAddress)
	}
	b := &clientBed{c: c, cloud: cloud, nodes: nodes}
	b.inFlowlb(t, lb.ID, lb.VipPortID)

	// CPO's TCP monitor on the node ports says when both nodes serve
	// them (kube-proxy programs them after the Service, CPO's load
	// balancer may be ACTIVE before).
	testutil.Eventually(t, 3*time.Minute, "both members ONLINE in Octavia", func() (bool, string) {
		ms, err := octaviaMembers(ctx, oct, poolID)
		if err != nil {
			return false, err.Error()
		}
		on := map[string]string{}
		for _, m := range ms {
			on[m.Address] = m.OperatingStatus
		}
		return len(on) == len(nodes) && !slices.ContainsFunc(ms, func(m pools.Member) bool { return m.OperatingStatus != "ONLINE" }), fmt.Sprint(on)
	})

	b.install(t, lb.VipAddress)
	faddr := net.JoinHostPort(ingress, "80")
	ready := e.readyPods("web")
	if len(ready) != 2 {
		t.Fatalf("web's ready pods %v, want 2", ready)
	}
	seen := map[string]int{}
	testutil.Eventually(t, 2*time.Minute, "the external namespace reaches every pod of web through "+faddr, func() (bool, string) {
		r, err := askEcho(cloud.Dial, faddr)
		if err == nil {
			ip, _, _ := net.SplitHostPort(r.Addr)
			seen[ip]++
		}
		return slices.Equal(keys(seen), ready), fmt.Sprint(seen, err)
	})
	// Both pods answer whichever node holds the VIP (kube-proxy there
	// sends its own node port's connections to pods of both nodes, over
	// the lab's fabric); what shows that the VIP's node reached the other
	// node's member at its tenant address, across OVN as in a cloud, is
	// the member's node: its conntrack table holds those connections,
	// from the VIP's node's tenant address (flowlb masquerades the
	// external client) to its own and the node port. Counted before and
	// after 40 requests, which ROUND_ROBIN deals half to that member;
	// the health monitor's probes of a member from the other node look
	// the same, a few in those seconds.
	const asks = 40
	before := crossedTenant(t, c, nodes, nodePort)
	for range asks {
		r, err := askEcho(cloud.Dial, faddr)
		if err != nil {
			t.Fatalf("external -> %s: %v", faddr, err)
		}
		ip, _, _ := net.SplitHostPort(r.Addr)
		if !slices.Contains(ready, ip) {
			t.Fatalf("external -> %s answered by %s (%s), not a ready pod of web %v", faddr, r.Pod, r.Addr, ready)
		}
		seen[ip]++
	}
	after := crossedTenant(t, c, nodes, nodePort)
	t.Logf("web: the external namespace reached the pods %v through the floating IP %s; connections from one node's tenant address "+
		"to the other's node port %d, before and after %d requests: %d, %d", seen, ingress, nodePort, asks, before, after)
	if after-before < asks/4 {
		t.Errorf("%d of %d connections reached the member of the node not holding the VIP at its tenant address, want about half",
			after-before, asks)
	}

	// The Service deleted: CPO deletes the load balancer (cascade) and
	// the floating IP it made, and releases its finalizer.
	if err := e.k.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	testutil.Eventually(t, 5*time.Minute, "the Service, its load balancer in Octavia and its floating IP gone", func() (bool, string) {
		var left []string
		if _, err := e.k.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprint("Service web: ", err))
		}
		all, err := loadbalancers.List(oct.LoadBalancer, loadbalancers.ListOpts{}).AllPages(ctx)
		if err != nil {
			return false, err.Error()
		}
		if lbs, err := loadbalancers.ExtractLoadBalancers(all); err != nil || len(lbs) != 0 {
			left = append(left, fmt.Sprintf("Octavia's load balancers %v %v", lbs, err))
		}
		if err := cloud.Call("GET", "/floatingips?floating_ip_address="+ingress, nil, &fips); err != nil || len(fips.FloatingIPs) != 0 {
			left = append(left, fmt.Sprintf("floating IP %s: %+v %v", ingress, fips.FloatingIPs, err))
		}
		return len(left) == 0, strings.Join(left, "; ")
	})
	t.Logf("web deleted: Service, load balancer and floating IP gone in %s", time.Since(t2).Round(time.Second))
	for _, path := range []string{"lbaas/listeners", "lbaas/pools", "lbaas/healthmonitors"} {
		var out map[string][]any
		if _, err := oct.LoadBalancer.Get(ctx, oct.LoadBalancer.ServiceURL(strings.Split(path, "/")...), &out, nil); err != nil {
			t.Fatalf("GET %s from Octavia: %v", path, err)
		}
		for kind, list := range out {
			if len(list) != 0 {
				t.Errorf("Octavia still lists %s %v after the Service went", kind, list)
			}
		}
	}
	b.goneEverywhere(t, lb.VipPortID, faddr)
	t.Logf("the whole test: %s", time.Since(t0).Round(time.Second))
}

// octaviaMembers lists pool's members through Octavia's API.
func octaviaMembers(ctx context.Context, oct *openstack.Octavia, pool string) ([]pools.Member, error) {
	all, err := pools.ListMembers(oct.LoadBalancer, pool, nil).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	return pools.ExtractMembers(all)
}

// askEcho asks a pod's echo server at addr over a connection made by
// dial (lab.Host.Ask's exchange, from outside the lab's hosts).
func askEcho(dial func(context.Context, string, string) (net.Conn, error), addr string) (echo.Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return echo.Reply{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte("hi\n")); err != nil {
		return echo.Reply{}, err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return echo.Reply{}, err
	}
	return echo.Parse(strings.TrimSpace(line))
}

// crossedTenant counts, over both nodes, the connections in a node's
// conntrack table from the other node's tenant address to its own and
// nodePort.
func crossedTenant(t *testing.T, c *cluster, nodes []*openstack.VM, nodePort int) int {
	t.Helper()
	n := 0
	for i, to := range nodes {
		from := nodes[1-i]
		var out, errOut strings.Builder
		if err := c.lab.Node(to.Node).Run(t.Context(), nil, &out, &errOut, "conntrack", "-L", "-p", "tcp", "--orig-src", from.Addr.String(),
			"--orig-dst", to.Addr.String(), "--orig-port-dst", fmt.Sprint(nodePort)); err != nil {
			t.Fatalf("conntrack on %s: %v: %s", lab.NodeName(to.Node), err, errOut.String())
		}
		// One line per connection on stdout (the summary is on stderr).
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.TrimSpace(l) != "" {
				n++
			}
		}
	}
	return n
}
