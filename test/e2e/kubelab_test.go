package e2e

import (
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/labtest"
)

// endpoints is the Service's EndpointSlice endpoints by address.
func endpoints(e *kubeEnv, svc string) map[string]discoveryv1.EndpointConditions {
	sl, err := e.k.DiscoveryV1().EndpointSlices("default").List(e.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]discoveryv1.EndpointConditions{}
	for _, s := range sl.Items {
		if s.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
			e.t.Errorf("slice %s managed by %q", s.Name, s.Labels[discoveryv1.LabelManagedBy])
		}
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				out[a] = ep.Conditions
			}
		}
	}
	return out
}

// TestLabKubernetes: the lab's Kubernetes alone (no flowlb): pods of a
// Deployment run as lab pods spread over the nodes and answer on their
// IPs, the real EndpointSlice controller follows them through readiness,
// scaling and graceful termination, and lab down removes it all.
func TestLabKubernetes(t *testing.T) {
	requireKube(t)
	l := labtest.New(t, 2, 0)
	bin := flowlb(t)
	t0 := time.Now()
	kc, err := kubelet.Up(t.Context(), l, lab.KubeOptions{Kubelet: []string{bin, "lab", "kubelet"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane: API ready in %s, nodes ready in %s", kc.APIReady.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	e := &kubeEnv{cluster: &cluster{t: t, lab: l}, kc: kc, k: kc.Client, ctx: t.Context()}

	nodes, err := e.k.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if len(n.Spec.PodCIDRs) != 1 || n.Labels[corev1.LabelTopologyZone] == "" || len(n.Status.Addresses) == 0 {
			t.Errorf("node %s: pod CIDRs %v, zone %q, addresses %v", n.Name, n.Spec.PodCIDRs, n.Labels[corev1.LabelTopologyZone], n.Status.Addresses)
		}
	}

	e.deploy("web", 3)
	e.service("web", nil)
	e.waitFor("3 ready pods", 30*time.Second, func() bool { return len(e.readyPods("web")) == 3 })
	pods, _ := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=web"})
	onNode := map[string]int{}
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName]++
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		if _, err := l.Node(1).Ask(e.ctx, net.JoinHostPort(p.Status.PodIP, "8080"), 2*time.Second); err != nil {
			t.Errorf("pod %s (%s) does not answer: %v", p.Name, p.Status.PodIP, err)
		}
	}
	if len(onNode) != 2 {
		t.Errorf("pods on %v, want both nodes", onNode)
	}
	e.waitFor("a slice with the 3 ready pods", 20*time.Second, func() bool {
		eps := endpoints(e, "web")
		return slices.Equal(keysOf(eps), e.readyPods("web")) && !slices.ContainsFunc(keysOf(eps), func(a string) bool { return !ptr.Deref(eps[a].Ready, false) })
	})

	// A deleted pod is Terminating (serving, not ready) while its preStop
	// sleep runs, then leaves the slice.
	victim := pods.Items[0]
	if err := e.k.CoreV1().Pods("default").Delete(e.ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the victim terminating and serving", 10*time.Second, func() bool {
		c, ok := endpoints(e, "web")[victim.Status.PodIP]
		return ok && ptr.Deref(c.Terminating, false) && ptr.Deref(c.Serving, false) && !ptr.Deref(c.Ready, true)
	})
	e.waitFor("the victim gone and replaced", 30*time.Second, func() bool {
		eps := endpoints(e, "web")
		_, still := eps[victim.Status.PodIP]
		return !still && len(e.readyPods("web")) == 3
	})

	if err := l.Down(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "flb-"+l.Name()+"-") {
		t.Errorf("namespaces left after lab down:\n%s", out)
	}
	if out, _ := exec.Command("pgrep", "-f", l.Dir()).Output(); len(out) > 0 {
		t.Errorf("processes left after lab down: %s", out)
	}
}

func keysOf(m map[string]discoveryv1.EndpointConditions) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
