package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestKubernetesDualStack: a dual-stack LoadBalancer Service (IPv6
// first) is one load balancer with the pods of both families as members;
// pods on every node reach it on both cluster IPs, spread over the pods
// with their own address kept, and the external client reaches it on both
// ingress addresses, which the controller writes in the Service's order of
// families; its node port answers on every node's address of either
// family. An IPv6-only ClusterIP Service is served on its one address.
func TestKubernetesDualStack(t *testing.T) {
	e := newKubeEnvOpts(t, kubeEnvOptions{nodes: 2, controllers: 1, ipv6: true})
	clients := []lab.Host{e.lab.Pod(1, 1), e.lab.Pod(2, 1)} // static pods, one per node
	e.deploy("web", 3)
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc := e.service("web", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &policy, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	})
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("cluster IPs %v, want one per family", svc.Spec.ClusterIPs)
	}
	var pods4, pods6 []string
	testutil.Eventually(t, 30*time.Second, "3 ready pods", func() (bool, string) {
		pods4, pods6 = e.readyPodIPs("web")
		return len(pods4) == 3 && len(pods6) == 3, fmt.Sprint(pods4, pods6)
	})
	var ingress []string
	testutil.Eventually(t, 30*time.Second, "two ingress addresses and 6 members", func() (bool, string) {
		s, err := e.k.CoreV1().Services("default").Get(e.ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ingress = ingress[:0]
		for _, in := range s.Status.LoadBalancer.Ingress {
			ingress = append(ingress, in.IP)
		}
		members := e.members("web")
		return len(ingress) == 2 && slices.Equal(members, sortedUnion(pods4, pods6)), fmt.Sprintf("ingress %v, members %v", ingress, members)
	})
	if a, b := mustAddr(t, ingress[0]), mustAddr(t, ingress[1]); !lab.ExternalVIPs6.Contains(a) || !lab.ExternalVIPs.Contains(b) {
		t.Errorf("ingress %v, want the IPv6 external address first, then the IPv4 one", ingress)
	}
	for k, ip := range svc.Spec.ClusterIPs {
		want := pods6
		if mustAddr(t, ip).Is4() {
			want = pods4
		}
		by := e.spreadFrom(clients, net.JoinHostPort(ip, "80"), 30)
		t.Logf("pods -> cluster IP %s: %v", ip, by)
		if !slices.Equal(keys(by), want) {
			t.Errorf("cluster IP %d %s reached %v, want the pods %v", k, ip, by, want)
		}
	}
	for _, ip := range ingress {
		// externalTrafficPolicy Cluster: the receiving node masquerades.
		by := e.spread([]lab.Host{e.lab.Client()}, net.JoinHostPort(ip, "80"), 30, false)
		t.Logf("client -> ingress %s: %v", ip, by)
		if len(by) < 2 {
			t.Errorf("the external client reached %s on %v, want the load spread", ip, by)
		}
	}

	// The node port, on each node's address of either family.
	np := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	for _, n := range e.lab.Nodes() {
		for _, a := range []netip.Addr{n.Addr, n.Addr6} {
			by := e.spread([]lab.Host{e.lab.Client()}, net.JoinHostPort(a.String(), np), 10, false)
			want := pods4
			if a.Is6() {
				want = pods6
			}
			if got := keys(by); len(got) == 0 || !isSubset(got, want) {
				t.Errorf("node port %s on %s reached %v, want pods of its family %v", np, a, by, want)
			}
		}
	}

	t.Run("IPv6-only ClusterIP", func(t *testing.T) {
		single := corev1.IPFamilyPolicySingleStack
		s := e.service("web6", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &single, []corev1.IPFamily{corev1.IPv6Protocol}
		})
		if !lab.KubeServiceCIDR6.Contains(mustAddr(t, s.Spec.ClusterIP)) {
			t.Fatalf("cluster IP %s outside %s", s.Spec.ClusterIP, lab.KubeServiceCIDR6)
		}
		testutil.Eventually(t, 30*time.Second, "the IPv6 pods as members", func() (bool, string) {
			members := e.members("web6")
			return slices.Equal(members, pods6), fmt.Sprint(members)
		})
		if by := e.spreadFrom(clients, net.JoinHostPort(s.Spec.ClusterIP, "80"), 30); !slices.Equal(keys(by), pods6) {
			t.Errorf("the IPv6 cluster IP reached %v, want the pods %v", by, pods6)
		}
	})
	if t.Failed() {
		e.logTails()
	}
}

// readyPodIPs returns the IPv4 and the IPv6 addresses of the Ready pods
// of app=name, each sorted.
func (e *kubeEnv) readyPodIPs(name string) (v4, v6 []string) {
	pods, err := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range pods.Items {
		ready := p.DeletionTimestamp == nil && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		})
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			switch {
			case !ready || err != nil:
			case a.Is6():
				v6 = append(v6, a.String())
			default:
				v4 = append(v4, a.String())
			}
		}
	}
	slices.Sort(v4)
	slices.Sort(v6)
	return v4, v6
}

func isSubset(a, of []string) bool {
	for _, x := range a {
		if !slices.Contains(of, x) {
			return false
		}
	}
	return true
}

func sortedUnion(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
