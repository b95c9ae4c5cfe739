package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// nodeOfPod is the lab node index of a pod address (198.18.(16+i).x).
func nodeOfPod(t testing.TB, ip string) int {
	t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= lab.MaxNodes; i++ {
		if lab.PodCIDR(i).Contains(a) {
			return i
		}
	}
	t.Fatalf("%s is in no node's pod network", ip)
	return 0
}

// nodesOf counts the lab nodes the pod addresses are on.
func nodesOf(t testing.TB, pods []string) int {
	t.Helper()
	nodes := map[int]bool{}
	for _, ip := range pods {
		nodes[nodeOfPod(t, ip)] = true
	}
	return len(nodes)
}

// memberTags returns the tags of the members of Service name's load
// balancer, by member address.
func (e *kubeEnv) memberTags(name string) map[string][]string {
	out := map[string][]string{}
	_, body := e.call("GET", "/v2/lbaas/loadbalancers?name=kube_service_lab_default_"+name, nil)
	for _, lb := range dig(body, "loadbalancers") {
		_, pools := e.call("GET", "/v2/lbaas/pools?loadbalancer_id="+lb.(map[string]any)["id"].(string), nil)
		for _, p := range dig(pools, "pools") {
			_, ms := e.call("GET", "/v2/lbaas/pools/"+p.(map[string]any)["id"].(string)+"/members", nil)
			for _, m := range dig(ms, "members") {
				mm := m.(map[string]any)
				var tags []string
				for _, t := range mm["tags"].([]any) {
					tags = append(tags, t.(string))
				}
				out[mm["address"].(string)] = tags
			}
		}
	}
	return out
}

// TestKubernetesTopology: a lab of 3 nodes in 2 zones (n1 and n3 in
// zone-a, n2 in zone-b), each agent told its node's zone and announcing
// the external VIPs it can serve, and the router following the
// announcements. A Service with trafficDistribution PreferClose sends
// each client to the pods of its own zone while there are any, and to the
// others once its zone has none, with no failed request while the pods
// move. A LoadBalancer Service with externalTrafficPolicy Local is routed
// by the router only to the nodes with its pods: every request of the
// external client succeeds, with its address kept.
func TestKubernetesTopology(t *testing.T) {
	e := newKubeEnvOpts(t, kubeEnvOptions{nodes: 3, zones: 2, controllers: 1,
		agentArgs: []string{"--announce-cidrs", lab.ExternalVIPs.String(), "--announce-table", fmt.Sprint(lab.AnnounceTable)}})
	// The router learns the nodes' announcements (what BGP would do).
	if _, err := e.lab.Router().Start(lab.ProcRoutes, []string{flowlb(t), "lab", "--name", e.lab.Name(), "routes", "--reflect"}); err != nil {
		t.Fatal(err)
	}
	clients := []lab.Host{e.lab.Pod(1, 1), e.lab.Pod(2, 1), e.lab.Pod(3, 1)} // static pods, one per node
	zoneOf := func(ip string) string { return e.lab.Zone(nodeOfPod(t, ip)) }

	t.Run("trafficDistribution PreferClose", func(t *testing.T) {
		e.deployWith("zonal", 3, nil) // the lab scheduler spreads them: one per node
		svc := e.service("zonal", func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "zonal"}
			s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
		})
		vip := net.JoinHostPort(svc.Spec.ClusterIP, "80")
		testutil.Eventually(t, 60*time.Second, "3 ready pods, one per node", func() (bool, string) {
			pods := e.readyPods("zonal")
			return len(pods) == 3 && nodesOf(t, pods) == 3, fmt.Sprint(pods)
		})
		// The EndpointSlice controller hints each endpoint to its zone;
		// the members carry the hints.
		testutil.Eventually(t, 30*time.Second, "members with their zone hints", func() (bool, string) {
			tags := e.memberTags("zonal")
			for ip, ts := range tags {
				if !slices.Contains(ts, flows.TagZonePrefix+zoneOf(ip)) {
					return false, fmt.Sprintf("member %s tagged %v", ip, ts)
				}
			}
			return len(tags) == 3, fmt.Sprintf("member tags %v", tags)
		})
		_, body := e.call("GET", "/v2/lbaas/listeners?tags="+flows.TagPreferClose, nil)
		if n := len(dig(body, "listeners")); n != 1 {
			t.Fatalf("%d prefer-close listeners, want 1", n)
		}
		// After the tags and the listener were seen: their flows.
		e.waitMembers(t, "zonal", 30*time.Second, nil)
		for i, c := range clients {
			by := e.spreadFrom([]lab.Host{c}, vip, 30)
			zone := e.lab.Zone(i + 1)
			for ip := range by {
				if zoneOf(ip) != zone {
					t.Errorf("PreferClose from %s (%s) reached %s in %s", c.Name, zone, ip, zoneOf(ip))
				}
			}
			// zone-a has two pods (n1, n3): a zone-a client reaches both.
			if want := map[string]int{"zone-a": 2, "zone-b": 1}[zone]; len(by) != want {
				t.Errorf("from %s (%s): reached %v, want the %d pods of its zone", c.Name, zone, by, want)
			}
		}

		// Move every pod to zone-a under load from the zone-b client: once
		// zone-b has no pod, its traffic goes to zone-a's, and no request
		// fails on the way.
		l := startLoad(clients[1], vip)
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:"zone-a"}}}}}`, corev1.LabelTopologyZone)
		if _, err := e.k.AppsV1().Deployments("default").Patch(e.ctx, "zonal", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitMembers(t, "zonal", 90*time.Second, func(ready []string) bool {
			pods, _ := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=zonal"})
			return len(pods.Items) == 3 && len(ready) == 3 && !slices.ContainsFunc(ready, func(ip string) bool { return zoneOf(ip) != "zone-a" })
		})
		l.check(t, "while the pods left zone-b")
		if by := e.spreadFrom(clients[1:2], vip, 20); len(by) == 0 {
			t.Error("the zone-b client reached nothing")
		} else {
			for ip := range by {
				if zoneOf(ip) != "zone-a" {
					t.Errorf("zone-b client reached %s in %s", ip, zoneOf(ip))
				}
			}
		}
		for _, c := range []lab.Host{clients[0], clients[2]} {
			for ip := range e.spreadFrom([]lab.Host{c}, vip, 10) {
				if zoneOf(ip) != "zone-a" {
					t.Errorf("zone-a client %s reached %s in %s", c.Name, ip, zoneOf(ip))
				}
			}
		}
	})
	t.Run("trafficDistribution PreferSameNode", func(t *testing.T) {
		e.deployWith("near", 3, nil) // one per node
		svc := e.service("near", func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "near"}
			s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameNode)
		})
		vip := net.JoinHostPort(svc.Spec.ClusterIP, "80")
		testutil.Eventually(t, 60*time.Second, "3 ready pods, one per node", func() (bool, string) {
			pods := e.readyPods("near")
			return len(pods) == 3 && nodesOf(t, pods) == 3, fmt.Sprint(pods)
		})
		// The EndpointSlice controller hints each endpoint to its node
		// and zone; the members carry both.
		hintsOK := func() (bool, string) {
			tags := e.memberTags("near")
			pods := e.readyPods("near")
			for ip, ts := range tags {
				node := lab.NodeName(nodeOfPod(t, ip))
				if !slices.Contains(ts, flows.TagForNodePrefix+node) || !slices.Contains(ts, flows.TagZonePrefix+zoneOf(ip)) {
					return false, fmt.Sprintf("member %s tagged %v", ip, ts)
				}
			}
			return len(tags) == len(pods), fmt.Sprintf("member tags %v, pods %v", tags, pods)
		}
		testutil.Eventually(t, 30*time.Second, "members with their node and zone hints", hintsOK)
		e.waitMembers(t, "near", 30*time.Second, nil)
		for i, c := range clients {
			by := e.spreadFrom([]lab.Host{c}, vip, 20)
			if len(by) != 1 || nodeOfPod(t, keys(by)[0]) != i+1 {
				t.Errorf("PreferSameNode from %s reached %v, want only the pod of n%d", c.Name, by, i+1)
			}
		}

		// No pod on n3 any more: n3's client (zone-a) falls back to its
		// zone's pods, on n1; n1 and n2 keep to their own.
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":`+
			`{"nodeSelectorTerms":[{"matchExpressions":[{"key":%q,"operator":"NotIn","values":["n3"]}]}]}}}}}}}`, corev1.LabelHostname)
		if _, err := e.k.AppsV1().Deployments("default").Patch(e.ctx, "near", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitMembers(t, "near", 90*time.Second, func(ready []string) bool {
			pods, _ := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=near"})
			return len(pods.Items) == 3 && len(ready) == 3 && !slices.ContainsFunc(ready, func(ip string) bool { return nodeOfPod(t, ip) == 3 })
		})
		testutil.Eventually(t, 30*time.Second, "members with their node and zone hints", hintsOK)
		e.waitProgrammed(t, "near")
		for i, c := range clients {
			want := i + 1
			if want == 3 {
				want = 1 // zone-a's pods
			}
			for ip := range e.spreadFrom([]lab.Host{c}, vip, 20) {
				if n := nodeOfPod(t, ip); n != want {
					t.Errorf("from %s reached %s on n%d, want the pods of n%d", c.Name, ip, n, want)
				}
			}
		}
	})
	t.Run("externalTrafficPolicy Local next hops", func(t *testing.T) {
		onN2 := func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "n2"}
		}
		e.deployWith("solo", 1, onN2)
		e.service("solo", func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "solo"}
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		var ip string
		e.waitMembers(t, "solo", 60*time.Second, func(pods []string) bool {
			s, _ := e.k.CoreV1().Services("default").Get(e.ctx, "solo", metav1.GetOptions{})
			if len(s.Status.LoadBalancer.Ingress) == 1 {
				ip = s.Status.LoadBalancer.Ingress[0].IP
			}
			return ip != "" && len(pods) == 1 && nodeOfPod(t, pods[0]) == 2
		})
		vip := netip.PrefixFrom(mustAddr(t, ip), 32)
		ext := net.JoinHostPort(ip, "80")
		routeVia := func(what string, nodes ...int) {
			t.Helper()
			testutil.Eventually(t, 20*time.Second, what, func() (bool, string) {
				got, err := e.lab.Announcements(lab.AnnounceTable).Routes()
				return err == nil && slices.Equal(got[vip], nodes), fmt.Sprintf("via %v (%v)", got[vip], err)
			})
		}
		routeVia("the router's route to the VIP via n2 only", 2)
		// Every request succeeds: none is sent to a node without the pod
		// (the range route would spread them over the 3 nodes, two of
		// which drop them).
		by := e.spreadFrom([]lab.Host{e.lab.Client()}, ext, 30)
		if pods := e.readyPods("solo"); !slices.Equal(keys(by), pods) {
			t.Errorf("the external client reached %v, want the pod %v", by, pods)
		}

		// Pods on every node: every node announces the VIP.
		patch := `{"spec":{"replicas":3,"template":{"spec":{"nodeSelector":null}}}}`
		if _, err := e.k.AppsV1().Deployments("default").Patch(e.ctx, "solo", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitMembers(t, "solo", 90*time.Second, func(ready []string) bool {
			pods, _ := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=solo"})
			return len(pods.Items) == 3 && len(ready) == 3 && nodesOf(t, ready) == 3
		})
		routeVia("the route via the 3 nodes", 1, 2, 3)
		if by := e.spreadFrom([]lab.Host{e.lab.Client()}, ext, 60); len(by) < 2 {
			t.Errorf("over 3 next hops the external client reached only %v", by)
		}

		// Back to n2 only: n1 and n3 withdraw.
		patch = fmt.Sprintf(`{"spec":{"replicas":1,"template":{"spec":{"nodeSelector":{%q:"n2"}}}}}`, corev1.LabelHostname)
		if _, err := e.k.AppsV1().Deployments("default").Patch(e.ctx, "solo", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitMembers(t, "solo", 90*time.Second, func(ready []string) bool {
			pods, _ := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=solo"})
			return len(pods.Items) == 1 && len(ready) == 1 && nodeOfPod(t, ready[0]) == 2
		})
		routeVia("the route via n2 only again", 2)
		e.spreadFrom([]lab.Host{e.lab.Client()}, ext, 30)
	})
}
