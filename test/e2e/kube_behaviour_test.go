package e2e

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/kubelb"
	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/testutil"
)

// externalIP is a Service's spec.externalIPs entry in the tests: in the
// lab's external range (lab.ExternalVIPs), which the router sends to the
// nodes, and far from the addresses the external subnet hands out first.
const externalIP = "198.19.255.200"

// TestKubernetesKubeProxyBehaviours: kube-proxy's Service behaviours
// beside the Service types, with no kube-proxy. spec.externalIPs answer
// the external client (externalTrafficPolicy Cluster: every node's pods;
// Local: the receiving node's, the client's address kept); ClientIP
// affinity holds within timeoutSeconds and expires after; a LoadBalancer
// Service of another class is served on its cluster IP and node port,
// with no external address and no ingress from flowlb; a Service
// labelled service.kubernetes.io/service-proxy-name gets no load balancer,
// gets one when the label goes and loses it when the label comes back.
func TestKubernetesKubeProxyBehaviours(t *testing.T) {
	e := newKubeEnv(t, 1)
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

	t.Run("externalIPs", func(t *testing.T) {
		if !lab.ExternalVIPs.Contains(mustAddr(t, externalIP)) {
			t.Fatalf("external IP %s outside the routed range %s", externalIP, lab.ExternalVIPs)
		}
		e.service("eip", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{externalIP} })
		e.waitPodMembers(t, "eip", "web", 4)
		addr := net.JoinHostPort(externalIP, "80")
		// externalTrafficPolicy Cluster: the receiving node masquerades.
		by := e.spread([]lab.Host{client}, addr, 20, false)
		if !slices.Equal(keys(by), e.readyPods("web")) {
			t.Errorf("the external client reached %v through %s, want every pod %v", by, addr, e.readyPods("web"))
		}

		s, err := e.k.CoreV1().Services("default").Get(e.ctx, "eip", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		if _, err := e.k.CoreV1().Services("default").Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "eip's listener local-only", func() (bool, string) {
			_, body := e.call("GET", "/v2/lbaas/listeners?tags=flowlb:local-only", nil)
			n := len(dig(body, "listeners"))
			return n == 1, fmt.Sprintf("%d local-only listeners", n)
		})
		e.waitProgrammed(t, "eip")
		defer func() { _ = e.lab.SetNextHops(1, 2) }()
		tested := 0
		for _, n := range []int{1, 2} {
			prefix := fmt.Sprintf("198.18.%d.", 16+n)
			if !slices.ContainsFunc(e.readyPods("web"), func(p string) bool { return strings.HasPrefix(p, prefix) }) {
				continue // no pod there: Local drops, as kube-proxy does
			}
			tested++
			if err := e.lab.SetNextHops(n); err != nil {
				t.Fatal(err)
			}
			for ip := range e.spreadFrom([]lab.Host{client}, addr, 10) {
				if !strings.HasPrefix(ip, prefix) {
					t.Errorf("ETP=Local via n%d reached %s, a pod of another node", n, ip)
				}
			}
		}
		if tested == 0 {
			t.Fatalf("no node has a ready pod of web: %v", e.readyPods("web"))
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
