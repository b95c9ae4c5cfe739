package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// externalIP and externalIPLocal are the Services' spec.externalIPs in the
// tests: in the lab's external range (lab.ExternalVIPs), which the agents
// announce, and far from the addresses the external subnet hands out first.
const externalIP, externalIPLocal = "198.19.255.200", "198.19.255.201"

// otherClassIngress is the address another implementation gives the
// Service of its loadBalancerClass.
const otherClassIngress = "198.19.255.202"

// TestKubernetesKubeProxyBehaviours: kube-proxy's Service behaviours
// beside the Service types, with no kube-proxy. spec.externalIPs answer
// the external client and are announced like external VIPs
// (externalTrafficPolicy Cluster: by every node, reaching every node's
// pods; Local: only by the nodes with a pod, the client's address kept);
// ClientIP affinity holds within timeoutSeconds and expires after; a
// LoadBalancer Service of another class is served on its cluster IP and
// node port, with no external address and no ingress from flowlb, and on
// the ingress address the other implementation gives it; a
// Service labelled service.kubernetes.io/service-proxy-name gets no load
// balancer, gets one when the label goes and loses it when it comes back.
func TestKubernetesKubeProxyBehaviours(t *testing.T) {
	e := newKubeEnvOpts(t, kubeEnvOptions{nodes: 2, controllers: 1,
		agentArgs: []string{"--announce-cidrs", lab.ExternalVIPs.String(), "--announce-table", fmt.Sprint(lab.AnnounceTable)}})
	// The router learns the nodes' announcements (what BGP would do).
	if _, err := e.lab.Router().Start(lab.ProcRoutes, []string{flowlb(t), "lab", "--name", e.lab.Name(), "routes", "--reflect"}); err != nil {
		t.Fatal(err)
	}
	client := e.lab.Client()
	e.deploy("web", 4)

	t.Run("service-proxy-name", func(t *testing.T) {
		e.service("opt", func(s *corev1.Service) {
			s.Labels = map[string]string{kubelb.LabelServiceProxyName: "someone-else"}
		})
		// A Service created after it is served: the controller has seen
		// the labelled one by then.
		e.service("witness", nil)
		e.waitPodMembers(t, "witness", "web", 4)
		time.Sleep(2 * time.Second)
		if n := e.lbCount("opt"); n != 0 {
			t.Fatalf("the labelled Service has %d load balancers, want none", n)
		}
		setLabels(t, e, "opt", nil)
		e.waitPodMembers(t, "opt", "web", 4)
		setLabels(t, e, "opt", map[string]string{kubelb.LabelServiceProxyName: ""})
		testutil.Eventually(t, 20*time.Second, "the labelled Service's LB deleted", func() (bool, string) {
			n := e.lbCount("opt")
			return n == 0, fmt.Sprintf("%d load balancers", n)
		})
	})

	t.Run("another loadBalancerClass", func(t *testing.T) {
		cls := e.service("cls", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerClass = ptr.To("example.com/other")
		})
		e.waitPodMembers(t, "cls", "web", 4)
		_, body := e.call("GET", "/v2/lbaas/loadbalancers?name=kube_service_lab_default_cls", nil)
		lbs := dig(body, "loadbalancers")
		if len(lbs) != 1 {
			t.Fatalf("load balancers %v", lbs)
		}
		lb := lbs[0].(map[string]any)
		if add, _ := lb["additional_vips"].([]any); lb["vip_address"] != cls.Spec.ClusterIP || len(add) != 0 {
			t.Errorf("VIP %v, additional %v: want the cluster IP %s only", lb["vip_address"], lb["additional_vips"], cls.Spec.ClusterIP)
		}
		// Served as kube-proxy serves it: the cluster IP from a pod, the
		// node port from outside.
		e.spread([]lab.Host{e.lab.Pod(1, 1)}, net.JoinHostPort(cls.Spec.ClusterIP, "80"), 3, true)
		np := strconv.Itoa(int(cls.Spec.Ports[0].NodePort))
		e.spread([]lab.Host{client}, net.JoinHostPort(e.lab.Nodes()[0].Addr.String(), np), 3, false)
		time.Sleep(time.Second) // the controller writes an ingress right after ACTIVE, when it does
		s, err := e.k.CoreV1().Services("default").Get(e.ctx, "cls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ing := s.Status.LoadBalancer.Ingress; len(ing) != 0 {
			t.Errorf("ingress %+v written to another class's Service", ing)
		}
		// The other implementation gives it an address: served from
		// outside and announced as kube-proxy would serve it, though
		// flowlb did not allocate it.
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: otherClassIngress}}
		if _, err := e.k.CoreV1().Services("default").UpdateStatus(e.ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := netip.PrefixFrom(mustAddr(t, otherClassIngress), 32)
		testutil.Eventually(t, 20*time.Second, "the other implementation's address announced by both nodes", func() (bool, string) {
			got, err := e.lab.Announcements(lab.AnnounceTable).Routes()
			return err == nil && slices.Equal(got[p], []int{1, 2}), fmt.Sprintf("via %v (%v)", got[p], err)
		})
		by := e.spread([]lab.Host{client}, net.JoinHostPort(otherClassIngress, "80"), 40, false)
		if !slices.Equal(keys(by), e.readyPods("web")) {
			t.Errorf("the external client reached %v through %s, want every pod %v", by, otherClassIngress, e.readyPods("web"))
		}
	})

	t.Run("affinity timeout", func(t *testing.T) {
		const timeout = 2 // seconds
		aff := e.service("aff", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](timeout)}}
		})
		e.waitPodMembers(t, "aff", "web", 4)
		vip := net.JoinHostPort(aff.Spec.ClusterIP, "80")
		pod := e.lab.Pod(1, 1) // a static pod: one source address, one node's affinity
		if by := e.spreadFrom([]lab.Host{pod}, vip, 15); len(by) != 1 {
			t.Errorf("within the timeout %s reached %v, want one pod", pod.Name, by)
		}
		// Each connection after the timeout is a new pick: over 7 picks
		// among 4 pods, one pod every time would be 1 in 4^6.
		by := map[string]int{}
		for range 7 {
			time.Sleep((timeout + 1) * time.Second)
			for ip, n := range e.spreadFrom([]lab.Host{pod}, vip, 1) {
				by[ip] += n
			}
		}
		if len(by) < 2 {
			t.Errorf("after the timeout every connection of %s reached %v: the affinity did not expire", pod.Name, by)
		}
	})

	t.Run("ingress once announced", func(t *testing.T) {
		// A Local LoadBalancer Service with no pod is announced by no
		// node: its address stays out of its status until a pod is ready
		// and its node announces it.
		e.deploy("gate", 0)
		e.service("gated", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.Selector = map[string]string{"app": "gate"}
		})
		ingress := func() []corev1.LoadBalancerIngress {
			s, err := e.k.CoreV1().Services("default").Get(e.ctx, "gated", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return s.Status.LoadBalancer.Ingress
		}
		testutil.Eventually(t, 30*time.Second, "an AwaitingAnnouncement event", func() (bool, string) {
			evs, err := e.k.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=gated"})
			if err != nil {
				return false, err.Error()
			}
			var seen []string
			for _, ev := range evs.Items {
				if ev.Reason == "AwaitingAnnouncement" {
					return true, ""
				}
				seen = append(seen, ev.Reason)
			}
			return false, fmt.Sprintf("events %v", seen)
		})
		time.Sleep(3 * time.Second) // the gate looks again meanwhile
		if got := ingress(); len(got) != 0 {
			t.Fatalf("ingress %+v written while no node announces the address", got)
		}
		e.updateDeployment("gate", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](1) })
		var ing []corev1.LoadBalancerIngress
		testutil.Eventually(t, 60*time.Second, "the ingress once the pod's node announces it", func() (bool, string) {
			ing = ingress()
			return len(ing) == 1, fmt.Sprintf("ingress %+v", ing)
		})
		// The status came after the announcement: the node of the pod
		// announces the address now.
		pods := e.readyPods("gate")
		if len(pods) != 1 {
			t.Fatalf("gate's ready pods %v, want one", pods)
		}
		// The router takes the route from the node's table a moment
		// later, as a BGP session would: only the node's own table is
		// bound to have it already.
		p := netip.PrefixFrom(mustAddr(t, ing[0].IP), 32)
		want := []int{nodeOfPod(t, pods[0])}
		ann := e.lab.Announcements(lab.AnnounceTable)
		if got := ann.ByNodes(); !slices.Equal(got[p], want) {
			t.Errorf("%s announced by nodes %v when the status named it, want the pod's node %v", p, got[p], want)
		}
		testutil.Eventually(t, 10*time.Second, "the router's route to the pod's node", func() (bool, string) {
			got, err := ann.Routes()
			return err == nil && slices.Equal(got[p], want), fmt.Sprintf("via %v (%v)", got[p], err)
		})
	})

	t.Run("externalIPs", func(t *testing.T) {
		routeVia := func(ip, what string, nodes ...int) {
			t.Helper()
			p := netip.PrefixFrom(mustAddr(t, ip), 32)
			testutil.Eventually(t, 20*time.Second, what, func() (bool, string) {
				got, err := e.lab.Announcements(lab.AnnounceTable).Routes()
				return err == nil && slices.Equal(got[p], nodes), fmt.Sprintf("via %v (%v)", got[p], err)
			})
		}
		e.service("eip", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{externalIP} })
		e.waitPodMembers(t, "eip", "web", 4)
		if nodesOf(t, e.readyPods("web")) != 2 {
			t.Fatalf("web's pods %v, want some on both nodes", e.readyPods("web"))
		}
		routeVia(externalIP, "the external IP announced by both nodes", 1, 2)
		// externalTrafficPolicy Cluster: the receiving node masquerades.
		// 40 connections: each pod is missed by all of them 1 time in
		// 100,000 (with 20, 1 in 300: CI once saw 3 of 4 pods).
		by := e.spread([]lab.Host{client}, net.JoinHostPort(externalIP, "80"), 40, false)
		if !slices.Equal(keys(by), e.readyPods("web")) {
			t.Errorf("the external client reached %v through %s, want every pod %v", by, externalIP, e.readyPods("web"))
		}

		// externalTrafficPolicy Local with the one pod on n2: only n2
		// announces the address, and the pod sees the client's own.
		e.deployWith("solo", 1, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "n2"}
		})
		e.service("eip-local", func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "solo"}
			s.Spec.ExternalIPs = []string{externalIPLocal}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		e.waitPodMembers(t, "eip-local", "solo", 1)
		if n := nodeOfPod(t, e.readyPods("solo")[0]); n != 2 {
			t.Fatalf("solo's pod on n%d, want n2", n)
		}
		routeVia(externalIPLocal, "the Local external IP announced by n2 only", 2)
		// Every request succeeds: none goes to n1, which would drop it.
		by = e.spreadFrom([]lab.Host{client}, net.JoinHostPort(externalIPLocal, "80"), 20)
		if pods := e.readyPods("solo"); !slices.Equal(keys(by), pods) {
			t.Errorf("the external client reached %v, want the pod %v", by, pods)
		}
	})
}

// setLabels replaces the labels of Service name.
func setLabels(t *testing.T, e *kubeEnv, name string, labels map[string]string) {
	t.Helper()
	s, err := e.k.CoreV1().Services("default").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels = labels
	if _, err := e.k.CoreV1().Services("default").Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
