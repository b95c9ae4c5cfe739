// Package kube tests the lab's Kubernetes: a real control plane (etcd,
// kube-apiserver, kube-controller-manager v1.34) and the lab kubelet that
// runs pods as network namespaces. Deployments become pods with reachable
// addresses, Services get EndpointSlices from the real controller, and
// scaling, rolling updates and pod deletion show up in those slices as
// they would in a cluster. Root only; the binaries come from
// hack/kube-bins.sh (FLOWLB_REQUIRE_KUBE=1 turns their absence into a
// failure).
package kube

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

const (
	appPort = 8080 // the container port of the test deployments
	wait    = 60 * time.Second
)

// TestKubernetes runs one control plane for 3 nodes and checks, each in
// its own Kubernetes namespace: the nodes, kubectl, a Deployment behind a
// Service through scaling and a rolling update, readiness probes, and
// graceful pod deletion.
func TestKubernetes(t *testing.T) {
	c := kubetest.New(t, 3)
	t.Run("Nodes", func(t *testing.T) { testNodes(t, c) })
	t.Run("Kubectl", func(t *testing.T) { testKubectl(t, c) })
	t.Run("DeploymentService", func(t *testing.T) { testDeploymentService(t, c) })
	t.Run("DualStackService", func(t *testing.T) { testDualStackService(t, c) })
	t.Run("Readiness", func(t *testing.T) { testReadiness(t, c) })
	t.Run("Termination", func(t *testing.T) { testTermination(t, c) })
	t.Run("PreStopSleepAction", func(t *testing.T) { testPreStopSleepAction(t, c) })
}

func testNodes(t *testing.T, c *kubelet.Cluster) {
	ctx := context.Background()
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kubelet.LabelLab + "=" + c.Lab.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes.Items))
	}
	sort.Slice(nodes.Items, func(a, b int) bool { return nodes.Items[a].Name < nodes.Items[b].Name })
	for k, n := range nodes.Items {
		i := k + 1
		if n.Name != lab.NodeName(i) {
			t.Errorf("node %d is named %s", i, n.Name)
		}
		if !nodeReady(&n) {
			t.Errorf("node %s not Ready: %+v", n.Name, n.Status.Conditions)
		}
		if got, want := internalIPs(&n), []string{lab.NodeAddr(i).String(), lab.NodeAddr6(i).String()}; !slices.Equal(got, want) {
			t.Errorf("node %s InternalIPs %q, want %s", n.Name, got, want)
		}
		if want := []string{lab.PodCIDR(i).String(), lab.PodCIDR6(i).String()}; n.Spec.PodCIDR != want[0] || !slices.Equal(n.Spec.PodCIDRs, want) {
			t.Errorf("node %s pod CIDRs %q %v, want %s", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs, want)
		}
		if z := n.Labels[corev1.LabelTopologyZone]; z != kubelet.Zone(i, 3) {
			t.Errorf("node %s zone %q, want %q", n.Name, z, kubelet.Zone(i, 3))
		}
		if n.Labels[corev1.LabelHostname] != n.Name {
			t.Errorf("node %s hostname label %q", n.Name, n.Labels[corev1.LabelHostname])
		}
	}
	// Heartbeats: every node has a lease, renewed within its duration.
	for _, n := range nodes.Items {
		l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("lease of %s: %v", n.Name, err)
			continue
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != n.Name || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			t.Errorf("lease of %s: %+v", n.Name, l.Spec)
			continue
		}
		if age := time.Since(l.Spec.RenewTime.Time); age > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
			t.Errorf("lease of %s renewed %s ago (duration %ds)", n.Name, age, *l.Spec.LeaseDurationSeconds)
		}
	}
	// The status names the kubeconfig (as `flowlb lab status` prints it).
	var b strings.Builder
	fresh(t, c).Status().Format(&b)
	if !strings.Contains(b.String(), c.State.Kubeconfig) {
		t.Errorf("lab status does not show the kubeconfig %s:\n%s", c.State.Kubeconfig, b.String())
	}
}

func testKubectl(t *testing.T, c *kubelet.Cluster) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		if kubetest.Required() {
			t.Fatalf("%s=1 but kubectl is missing (Debian kubernetes-client, installed by hack/kube-bins.sh)", kubetest.RequireEnv)
		}
		t.Skip("kubectl not installed (Debian kubernetes-client)")
	}
	out, err := exec.Command(kubectl, "--kubeconfig", c.State.Kubeconfig, "get", "nodes",
		"-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodes: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "n1=True n2=True n3=True" {
		t.Errorf("kubectl get nodes: %q", got)
	}
}

// testDeploymentService: 3 replicas spread over the nodes with reachable
// pod IPs, an EndpointSlice from the real controller with exactly those
// addresses, then scale to 5 and 2 and a rolling update, each visible in
// the slices.
func testDeploymentService(t *testing.T, c *kubelet.Cluster) {
	ctx := context.Background()
	ns := namespace(t, c, "deploy")
	d := deployment("web", 3)
	// A TCP readiness probe, the lab kubelet connects from the node.
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}},
		PeriodSeconds: 1,
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := service("web")
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil || !lab.KubeServiceCIDR.Contains(ip) {
		t.Errorf("cluster IP %q not in %s", svc.Spec.ClusterIP, lab.KubeServiceCIDR)
	}

	pods := waitPods(t, c, ns, "web", 3)
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		i := nodeIndex(t, p.Spec.NodeName)
		ip := netip.MustParseAddr(p.Status.PodIP)
		if !lab.PodCIDR(i).Contains(ip) {
			t.Errorf("pod %s on %s has IP %s outside %s", p.Name, p.Spec.NodeName, ip, lab.PodCIDR(i))
		}
		// Dual-stack: the IPv4 address first, then its IPv6 twin.
		if ip6, _ := lab.Twin6(ip); len(p.Status.PodIPs) != 2 || p.Status.PodIPs[0].IP != p.Status.PodIP ||
			p.Status.PodIPs[1].IP != ip6.String() || !lab.PodCIDR6(i).Contains(ip6) {
			t.Errorf("pod %s podIPs %v, podIP %s, want its IPv6 address in %s second", p.Name, p.Status.PodIPs, p.Status.PodIP, lab.PodCIDR6(i))
		}
		if p.Status.HostIP != lab.NodeAddr(i).String() {
			t.Errorf("pod %s hostIP %s, want %s", p.Name, p.Status.HostIP, lab.NodeAddr(i))
		}
		// Reachable from another node, on the line protocol and HTTP.
		checkReach(t, c, ns, p, http.StatusOK)
	}
	if len(perNode) != 3 {
		t.Errorf("3 replicas on nodes %v, want one per node", perNode)
	}
	checkSlices(t, c, ns, "web", pods)

	t.Run("Scale", func(t *testing.T) {
		scale(t, c, ns, "web", 5)
		pods := waitPods(t, c, ns, "web", 5)
		checkSlices(t, c, ns, "web", pods)
		scale(t, c, ns, "web", 2)
		pods = waitPods(t, c, ns, "web", 2)
		checkSlices(t, c, ns, "web", pods)
	})
	if t.Failed() {
		return
	}
	t.Run("RollingUpdate", func(t *testing.T) {
		old := waitPods(t, c, ns, "web", 2)
		oldIPs := podIPs(old)
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"flowlb.io/rev":"%d"}}}}}`, time.Now().UnixNano())
		if _, err := c.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		var pods []*corev1.Pod
		testutil.Eventually(t, wait, "rollout", func() (bool, string) {
			d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			st := d.Status
			done := st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == 2 && st.Replicas == 2 && st.AvailableReplicas == 2
			pods = livePods(t, c, ns, "web")
			return done && len(pods) == 2, fmt.Sprintf("status %+v, %d pods", st, len(pods))
		})
		for _, p := range pods {
			if slices.Contains(oldIPs, p.Status.PodIP) {
				t.Errorf("new pod %s has an old pod's IP %s", p.Name, p.Status.PodIP)
			}
			if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == old[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey] {
				t.Errorf("pod %s still of the old template", p.Name)
			}
		}
		checkSlices(t, c, ns, "web", pods)
	})
}

// testDualStackService: Services of each ipFamilyPolicy get cluster IPs
// of the families they ask for, in their order, from the lab's two
// service CIDRs, and EndpointSlices of each of those families with the
// pods' addresses; the pods answer on their IPv6 addresses.
func testDualStackService(t *testing.T, c *kubelet.Cluster) {
	ctx := context.Background()
	ns := namespace(t, c, "dual")
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, deployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, c, ns, "web", 2)
	var v4, v6 []string
	for _, p := range pods {
		for _, ip := range p.Status.PodIPs {
			if netip.MustParseAddr(ip.IP).Is6() {
				v6 = append(v6, ip.IP)
				checkReachOn(t, c, ns, p, ip.IP, http.StatusOK)
			} else {
				v4 = append(v4, ip.IP)
			}
		}
	}
	slices.Sort(v4)
	slices.Sort(v6)
	cases := []struct {
		name     string
		policy   corev1.IPFamilyPolicy
		families []corev1.IPFamily
		want     []corev1.IPFamily
	}{
		{"single-v6", corev1.IPFamilyPolicySingleStack, []corev1.IPFamily{corev1.IPv6Protocol}, []corev1.IPFamily{corev1.IPv6Protocol}},
		{"prefer-dual", corev1.IPFamilyPolicyPreferDualStack, nil, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}},
		{"require-dual-v6-first", corev1.IPFamilyPolicyRequireDualStack, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
			[]corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := service("web")
			svc.Name = tc.name
			svc.Spec.IPFamilyPolicy, svc.Spec.IPFamilies = &tc.policy, tc.families
			svc, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(svc.Spec.IPFamilies, tc.want) || len(svc.Spec.ClusterIPs) != len(tc.want) {
				t.Fatalf("families %v cluster IPs %v, want families %v", svc.Spec.IPFamilies, svc.Spec.ClusterIPs, tc.want)
			}
			for k, f := range tc.want {
				cidr := lab.KubeServiceCIDR
				if f == corev1.IPv6Protocol {
					cidr = lab.KubeServiceCIDR6
				}
				if a, err := netip.ParseAddr(svc.Spec.ClusterIPs[k]); err != nil || !cidr.Contains(a) {
					t.Errorf("cluster IP %d %q, want one in %s", k, svc.Spec.ClusterIPs[k], cidr)
				}
			}
			want := map[discoveryv1.AddressType][]string{}
			for _, f := range tc.want {
				if f == corev1.IPv6Protocol {
					want[discoveryv1.AddressTypeIPv6] = v6
				} else {
					want[discoveryv1.AddressTypeIPv4] = v4
				}
			}
			testutil.Eventually(t, wait, fmt.Sprintf("EndpointSlices of %s: %v", tc.name, want), func() (bool, string) {
				list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + tc.name})
				if err != nil {
					return false, err.Error()
				}
				got := map[discoveryv1.AddressType][]string{}
				for _, s := range list.Items {
					for _, e := range s.Endpoints {
						if isTrue(e.Conditions.Ready) {
							got[s.AddressType] = append(got[s.AddressType], e.Addresses...)
						}
					}
				}
				for k := range got {
					slices.Sort(got[k])
				}
				return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
			})
		})
	}
}

// testReadiness: an HTTP readiness probe that starts failing takes the
// pod out of ready (and serving) in the slice, and back when it passes.
func testReadiness(t *testing.T, c *kubelet.Cluster) {
	ctx := context.Background()
	ns := namespace(t, c, "ready")
	d := deployment("probed", 1)
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(appPort), Path: "/healthz"}},
		PeriodSeconds:    1,
		FailureThreshold: 1,
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, service("probed"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitPods(t, c, ns, "probed", 1)[0]
	checkSlices(t, c, ns, "probed", []*corev1.Pod{pod})
	host := labHost(t, c, ns, pod.Name)
	l := fresh(t, c)

	if err := l.SetHealthy(host, false); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "pod not ready after its probe fails", func() (bool, string) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		eps := endpoints(t, c, ns, "probed")
		e, ok := eps[pod.Status.PodIP]
		return !podReady(p) && ok && !isTrue(e.Conditions.Ready) && !isTrue(e.Conditions.Serving) && !isTrue(e.Conditions.Terminating),
			fmt.Sprintf("pod conditions %v, endpoint %s", p.Status.Conditions, fmtEP(e))
	})
	// Still running, and reachable: only the probe fails.
	checkReach(t, c, ns, pod, http.StatusInternalServerError)

	if err := l.SetHealthy(host, true); err != nil {
		t.Fatal(err)
	}
	checkSlices(t, c, ns, "probed", []*corev1.Pod{pod})
}

// testTermination: a deleted pod runs its preStop wait while Terminating
// (serving, not ready, still answering), then its server is stopped, its
// namespace removed, and it leaves the slice; a deletion with a shorter
// grace period cuts the preStop wait short.
func testTermination(t *testing.T, c *kubelet.Cluster) {
	ctx := context.Background()
	ns := namespace(t, c, "term")
	const preStop = 6 * time.Second
	d := deployment("term", 2)
	spec := &d.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = ptr.To(int64(30))
	spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", fmt.Sprintf("sleep %d", int(preStop/time.Second))}},
	}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, service("term"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, c, ns, "term", 2)
	checkSlices(t, c, ns, "term", pods)
	slow, quick := pods[0], pods[1]
	slowHost, quickHost := labHost(t, c, ns, slow.Name), labHost(t, c, ns, quick.Name)

	t0 := time.Now()
	pods0 := c.Client.CoreV1().Pods(ns)
	if err := pods0.Delete(ctx, slow.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods0.Delete(ctx, quick.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(1))}); err != nil {
		t.Fatal(err)
	}

	// The slow pod: Terminating, serving but not ready, and answering.
	testutil.Eventually(t, wait, "slow pod terminating in the slice", func() (bool, string) {
		e, ok := endpoints(t, c, ns, "term")[slow.Status.PodIP]
		return ok && isTrue(e.Conditions.Serving) && !isTrue(e.Conditions.Ready) && isTrue(e.Conditions.Terminating), fmtEP(e)
	})
	p, err := pods0.Get(ctx, slow.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("slow pod gone before its preStop wait ended (%s after delete): %v", time.Since(t0), err)
	}
	if p.DeletionTimestamp == nil {
		t.Error("slow pod has no deletion timestamp")
	}
	checkReach(t, c, ns, slow, http.StatusOK)

	// The quick pod (grace 1s) goes well before the slow one's preStop ends.
	gone := func(pod *corev1.Pod, host string) func() (bool, string) {
		return func() (bool, string) {
			_, err := pods0.Get(ctx, pod.Name, metav1.GetOptions{})
			_, inSlice := endpoints(t, c, ns, "term")[pod.Status.PodIP]
			_, nsErr := os.Stat(filepath.Join("/run/netns", lab.NSName(c.Lab.Name(), host)))
			return apierrors.IsNotFound(err) && !inSlice && errors.Is(nsErr, os.ErrNotExist),
				fmt.Sprintf("get: %v, in slice %v, netns: %v", err, inSlice, nsErr)
		}
	}
	testutil.Eventually(t, wait, "quick pod gone", gone(quick, quickHost))
	quickGone := time.Since(t0)
	if quickGone >= preStop {
		t.Errorf("pod deleted with grace 1s took %s, the preStop wait %s was not cut short", quickGone, preStop)
	}
	if _, err := pods0.Get(ctx, slow.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("slow pod gone %s after delete, before its preStop wait of %s: %v", time.Since(t0), preStop, err)
	}

	testutil.Eventually(t, wait, "slow pod gone", gone(slow, slowHost))
	slowGone := time.Since(t0)
	t.Logf("pod with grace 1s gone in %s; pod with preStop %s gone in %s", quickGone.Round(time.Millisecond), preStop, slowGone.Round(time.Millisecond))
	if slowGone < preStop-500*time.Millisecond {
		t.Errorf("slow pod gone after %s, before its preStop wait of %s", slowGone, preStop)
	}
	if slowGone > 25*time.Second {
		t.Errorf("slow pod took %s, past its preStop wait (%s) by far", slowGone, preStop)
	}
	if err := dialEcho(c, 1, slow.Status.PodIP); err == nil {
		t.Errorf("removed pod %s still answers", slow.Status.PodIP)
	}
	for _, h := range fresh(t, c).Status().Hosts {
		if h.KubePod == ns+"/"+slow.Name || h.KubePod == ns+"/"+quick.Name {
			t.Errorf("lab still has host %s for deleted pod %s", h.Name, h.KubePod)
		}
	}
	// The replacements the ReplicaSet made are in the slice, alone.
	checkSlices(t, c, ns, "term", waitPods(t, c, ns, "term", 2))
}

// testPreStopSleepAction: a preStop hook given as the sleep action (not
// exec) also keeps a deleted pod Terminating and serving, not ready, for
// its duration; then the pod leaves the slice and the ReplicaSet's
// replacement is ready in it.
func testPreStopSleepAction(t *testing.T, c *kubelet.Cluster) {
	ctx := context.Background()
	ns := namespace(t, c, "sleep")
	const preStop = 2 * time.Second
	d := deployment("sleepy", 3)
	spec := &d.Spec.Template.Spec
	spec.TerminationGracePeriodSeconds = ptr.To(int64(10))
	spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Sleep: &corev1.SleepAction{Seconds: int64(preStop / time.Second)},
	}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, service("sleepy"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, c, ns, "sleepy", 3)
	checkSlices(t, c, ns, "sleepy", pods)
	victim := pods[0]

	t0 := time.Now()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "victim terminating and serving", func() (bool, string) {
		e, ok := endpoints(t, c, ns, "sleepy")[victim.Status.PodIP]
		return ok && isTrue(e.Conditions.Terminating) && isTrue(e.Conditions.Serving) && !isTrue(e.Conditions.Ready), fmtEP(e)
	})
	testutil.Eventually(t, wait, "victim out of the slice", func() (bool, string) {
		e, ok := endpoints(t, c, ns, "sleepy")[victim.Status.PodIP]
		return !ok, fmtEP(e)
	})
	if gone := time.Since(t0); gone < preStop-500*time.Millisecond {
		t.Errorf("victim out of the slice after %s, before its preStop sleep of %s", gone, preStop)
	}
	checkSlices(t, c, ns, "sleepy", waitPods(t, c, ns, "sleepy", 3))
}

// TestLabDownRemovesKubernetes: `lab down` stops the control plane, the
// kubelet and every pod, and removes their namespaces, cgroups and files.
func TestLabDownRemovesKubernetes(t *testing.T) {
	c := kubetest.New(t, 2)
	ctx := context.Background()
	if _, err := c.Client.AppsV1().Deployments(corev1.NamespaceDefault).Create(ctx, deployment("web", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// 3 replicas on 2 nodes: both nodes get some.
	onNode := map[string]int{}
	for _, p := range waitPods(t, c, corev1.NamespaceDefault, "web", 3) {
		onNode[p.Spec.NodeName]++
	}
	if len(onNode) != 2 {
		t.Errorf("3 pods on nodes %v, want both nodes", onNode)
	}
	st := fresh(t, c).State()
	names := map[string]bool{}
	for _, p := range st.Procs {
		names[p.Name] = true
	}
	for _, want := range []string{lab.ProcEtcd, lab.ProcAPIServer, lab.ProcController, lab.ProcKubelet, lab.EchoProc} {
		if !names[want] {
			t.Errorf("no %s process in the lab before down: %v", want, st.Procs)
		}
	}
	if len(st.Kube.Pods) != 3 {
		t.Errorf("lab records %d Kubernetes pods, want 3", len(st.Kube.Pods))
	}
	server := strings.TrimPrefix(c.State.Server, "https://")

	t0 := time.Now()
	if err := c.Lab.Down(); err != nil {
		t.Fatal(err)
	}
	t.Logf("lab down with Kubernetes and 3 pods: %s", time.Since(t0).Round(time.Millisecond))

	for _, p := range st.Procs {
		if alive(p) {
			t.Errorf("process %s/%s (pid %d) survived lab down", p.Host, p.Name, p.PID)
		}
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), lab.Prefix(c.Lab.Name())) {
			t.Errorf("namespace %s left", e.Name())
		}
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), lab.Prefix(c.Lab.Name())) {
		t.Errorf("ip netns list still shows the lab's namespaces:\n%s", out)
	}
	// Also processes the lab did not record (children of its processes).
	if out, _ := exec.Command("pgrep", "-af", c.Lab.Dir()).Output(); len(out) > 0 {
		t.Errorf("processes left after lab down:\n%s", out)
	}
	for _, pat := range []string{"/sys/fs/cgroup/*/flb-" + c.Lab.Name(), "/sys/fs/cgroup/flb-" + c.Lab.Name()} {
		left, _ := filepath.Glob(pat)
		for _, cg := range left {
			t.Errorf("cgroup %s left", cg)
		}
	}
	if _, err := os.Stat(c.Lab.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory %s left (%v)", c.Lab.Dir(), err)
	}
	if conn, err := net.DialTimeout("tcp", server, time.Second); err == nil {
		conn.Close()
		t.Errorf("the API port %s still accepts connections", server)
	}
}

// BenchmarkKubeUp measures the control plane's bring-up with cached
// binaries on a 3-node lab: API ready and nodes ready (s/op is the
// whole cycle, lab and teardown included).
func BenchmarkKubeUp(b *testing.B) {
	kubetest.SkipUnlessKube(b)
	var api, nodes time.Duration
	for b.Loop() {
		c := kubetest.New(b, 3)
		api += c.APIReady
		nodes += c.NodesReady
		if err := c.Lab.Down(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(api.Seconds()/float64(b.N), "s-api-ready/op")
	b.ReportMetric(nodes.Seconds()/float64(b.N), "s-nodes-ready/op")
}

// --- helpers

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func isTrue(b *bool) bool { return b != nil && *b }

func internalIPs(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

func nodeIndex(t *testing.T, name string) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
	if err != nil || !strings.HasPrefix(name, "n") {
		t.Fatalf("pod on node %q, not a lab node", name)
	}
	return i
}

// fresh opens the lab again: the kubelet (another process) adds and
// removes pods in its state.
func fresh(t *testing.T, c *kubelet.Cluster) *lab.Lab {
	t.Helper()
	l, err := lab.Open(c.Lab.Name(), filepath.Dir(c.Lab.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// labHost is the lab host (nI-pJ) that runs pod ns/name.
func labHost(t *testing.T, c *kubelet.Cluster, ns, name string) string {
	t.Helper()
	for _, h := range fresh(t, c).Status().Hosts {
		if h.KubePod == ns+"/"+name {
			return h.Name
		}
	}
	t.Fatalf("no lab host runs pod %s/%s", ns, name)
	return ""
}

// namespace creates a Kubernetes namespace and waits for its default
// service account (pods are refused without it).
func namespace(t *testing.T, c *kubelet.Cluster, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "default service account in "+name, func() (bool, string) {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return name
}

// deployment is app name with replicas pods of one container serving
// appPort (named http); the image is not pulled, the lab runs its echo
// server instead.
func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(2)),
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "registry.invalid/echo:1",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: appPort}},
					}},
				},
			},
		},
	}
}

func service(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

func scale(t *testing.T, c *kubelet.Cluster, ns, name string, n int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	if _, err := c.Client.AppsV1().Deployments(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// livePods are app's pods that are not being deleted.
func livePods(t *testing.T, c *kubelet.Cluster, ns, app string) []*corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, &list.Items[i])
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// waitPods waits until app has exactly n pods, all Running and Ready with
// an IP, and no pod of it is terminating any more; it returns them.
func waitPods(t *testing.T, c *kubelet.Cluster, ns, app string, n int) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	testutil.Eventually(t, wait, fmt.Sprintf("%d pods of %s running and ready", n, app), func() (bool, string) {
		list, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err.Error()
		}
		out = out[:0]
		var desc []string
		ok := len(list.Items) == n
		for i := range list.Items {
			p := &list.Items[i]
			good := p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && podReady(p)
			ok = ok && good
			out = append(out, p)
			desc = append(desc, fmt.Sprintf("%s node=%s phase=%s ip=%s ready=%v deleting=%v", p.Name, p.Spec.NodeName, p.Status.Phase,
				p.Status.PodIP, podReady(p), p.DeletionTimestamp != nil))
		}
		return ok, strings.Join(desc, "; ")
	})
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func podIPs(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Status.PodIP)
	}
	slices.Sort(out)
	return out
}

// endpoints are the endpoints of service svc's EndpointSlices that the
// EndpointSlice controller manages, by address.
func endpoints(t *testing.T, c *kubelet.Cluster, ns, svc string) map[string]discoveryv1.Endpoint {
	t.Helper()
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," + discoveryv1.LabelManagedBy + "=endpointslice-controller.k8s.io",
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]discoveryv1.Endpoint{}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				out[a] = e
			}
		}
	}
	return out
}

func fmtEP(e discoveryv1.Endpoint) string {
	b := func(p *bool) string {
		if p == nil {
			return "nil"
		}
		return strconv.FormatBool(*p)
	}
	return fmt.Sprintf("%v ready=%s serving=%s terminating=%s node=%v zone=%v", e.Addresses,
		b(e.Conditions.Ready), b(e.Conditions.Serving), b(e.Conditions.Terminating), ptr.Deref(e.NodeName, ""), ptr.Deref(e.Zone, ""))
}

// checkSlices waits until svc's slices hold exactly pods' addresses, all
// ready, serving and not terminating, with their nodes and zones and the
// service's port.
func checkSlices(t *testing.T, c *kubelet.Cluster, ns, svc string, pods []*corev1.Pod) {
	t.Helper()
	want := podIPs(pods)
	byIP := map[string]*corev1.Pod{}
	for _, p := range pods {
		byIP[p.Status.PodIP] = p
	}
	testutil.Eventually(t, wait, fmt.Sprintf("EndpointSlices of %s = %v, ready", svc, want), func() (bool, string) {
		eps := endpoints(t, c, ns, svc)
		got := slices.Sorted(maps.Keys(eps))
		ok := slices.Equal(got, want)
		var desc []string
		for _, ip := range got {
			e := eps[ip]
			desc = append(desc, fmtEP(e))
			p := byIP[ip]
			if p == nil {
				continue
			}
			node := p.Spec.NodeName
			ok = ok && isTrue(e.Conditions.Ready) && isTrue(e.Conditions.Serving) && !isTrue(e.Conditions.Terminating) &&
				ptr.Deref(e.NodeName, "") == node && ptr.Deref(e.Zone, "") == kubelet.Zone(nodeIndex(t, node), 3) &&
				e.TargetRef != nil && e.TargetRef.Name == p.Name
		}
		return ok, strings.Join(desc, "; ")
	})
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
			t.Errorf("slice %s managed by %q", s.Name, s.Labels[discoveryv1.LabelManagedBy])
		}
		if len(s.Endpoints) == 0 {
			continue
		}
		if len(s.Ports) != 1 || ptr.Deref(s.Ports[0].Port, 0) != appPort || ptr.Deref(s.Ports[0].Name, "") != "http" {
			t.Errorf("slice %s ports %+v, want http %d", s.Name, s.Ports, appPort)
		}
	}
}

// checkReach connects to pod's IP from the next node after the pod's, on
// the line protocol and on HTTP, and checks that the pod itself answers,
// seeing the node's address (no NAT), and that HTTP answers httpStatus.
func checkReach(t *testing.T, c *kubelet.Cluster, ns string, p *corev1.Pod, httpStatus int) {
	t.Helper()
	checkReachOn(t, c, ns, p, p.Status.PodIP, httpStatus)
}

// checkReachOn is checkReach on one of the pod's addresses (IPv6 too).
func checkReachOn(t *testing.T, c *kubelet.Cluster, ns string, p *corev1.Pod, ip string, httpStatus int) {
	t.Helper()
	from := nodeIndex(t, p.Spec.NodeName)%len(c.Lab.Nodes()) + 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := net.JoinHostPort(ip, strconv.Itoa(appPort))
	node := c.Lab.Node(from)
	nodeAddr := node.Addr
	if netip.MustParseAddr(ip).Is6() {
		nodeAddr = node.Addr6
	}
	conn, err := node.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Errorf("dial pod %s at %s from %s: %v", p.Name, addr, node.Name, err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "hello\n"); err != nil {
		t.Errorf("write to %s: %v", addr, err)
		return
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Errorf("read from %s: %v", addr, err)
		return
	}
	r, err := echo.Parse(line)
	if err != nil || r.Pod != ns+"/"+p.Name || r.Addr != addr {
		t.Errorf("pod %s at %s answered %q (%v)", p.Name, addr, line, err)
	}
	if peer, _, _ := net.SplitHostPort(r.Peer); peer != nodeAddr.String() {
		t.Errorf("pod %s saw peer %s, want node %s (no NAT)", p.Name, r.Peer, nodeAddr)
	}

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: node.Dial, DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + "/")
	if err != nil {
		t.Errorf("HTTP to pod %s: %v", p.Name, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != httpStatus || resp.Header.Get("X-Flowlb-Pod") != ns+"/"+p.Name {
		t.Errorf("HTTP to pod %s: %d, X-Flowlb-Pod %q", p.Name, resp.StatusCode, resp.Header.Get("X-Flowlb-Pod"))
	}
}

// dialEcho returns nil if something answers the echo protocol at ip from
// node i.
func dialEcho(c *kubelet.Cluster, i int, ip string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := c.Lab.Node(i).Dial(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(appPort)))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "hello\n"); err != nil {
		return err
	}
	_, err = bufio.NewReader(conn).ReadString('\n')
	return err
}

// alive reports whether the process p records still runs (same PID and
// start time, not a zombie: a zombie holds no namespace and no port).
func alive(p lab.ProcState) bool {
	f, err := lab.StatFields(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil || len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return false
	}
	return f[19] == strconv.FormatUint(p.Start, 10)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// flowlb builds the flowlb binary once per test binary.
func flowlb(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flowlb-kube-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "flowlb")
		if out, err := exec.Command("go", "build", "-o", binPath, "github.com/flowlb/flowlb/cmd/flowlb").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestCLI: `flowlb lab up --kubernetes` (with the flowlb binary as the
// kubelet) prints its figures, `lab status` the kubeconfig, which works,
// and `lab down` removes it all.
func TestCLI(t *testing.T) {
	bin := kubetest.SkipUnlessKube(t)
	exe := flowlb(t)
	name := labtest.Name()
	t.Cleanup(func() {
		if t.Failed() {
			if l, err := lab.Open(name, ""); err == nil {
				kubetest.LogTails(t, l, 25)
			}
		}
		if err := lab.Down(name, ""); err != nil {
			t.Errorf("lab down %s: %v", name, err)
		}
	})
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(exe, append([]string{"lab", "--name", name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("flowlb lab %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// Binaries missing: refused before any lab is built.
	empty := t.TempDir()
	if out, err := exec.Command(exe, "lab", "--name", name, "up", "--nodes", "2", "--kubernetes", "--kube-bin", empty).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), filepath.Join(empty, lab.ProcAPIServer)) {
		t.Errorf("lab up --kubernetes --kube-bin %s (empty): %v\n%s", empty, err, out)
	}
	if _, err := os.Stat(filepath.Join(lab.DefaultStateRoot, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lab %s built although the Kubernetes binaries are missing (%v)", name, err)
	}

	out := run("up", "--nodes", "2", "--pods-per-node", "0", "--kubernetes", "--kube-bin", bin)
	t.Logf("lab up --kubernetes:\n%s", out)
	if !regexp.MustCompile(`kubernetes v1\.34\.\d+: API ready in [0-9.]+m?s, 2 nodes ready in [0-9.]+m?s`).MatchString(out) {
		t.Errorf("lab up output lacks the figures:\n%s", out)
	}
	kubeconfig := filepath.Join(lab.DefaultStateRoot, name, "kube", "admin.kubeconfig")
	if !strings.Contains(out, "kubeconfig: "+kubeconfig+"\n") {
		t.Errorf("lab up output does not name the kubeconfig %s:\n%s", kubeconfig, out)
	}
	status := run("status")
	if !strings.Contains(status, "kubeconfig "+kubeconfig) {
		t.Errorf("lab status does not name %s:\n%s", kubeconfig, status)
	}
	if !strings.Contains(status, "kubelet[") || !strings.Contains(status, "kube-apiserver[") {
		t.Errorf("lab status lacks the control plane's processes:\n%s", status)
	}
	// The kubeconfig reaches the API from this namespace.
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for i := range nodes.Items {
		if nodeReady(&nodes.Items[i]) {
			ready++
		}
	}
	if ready != 2 {
		t.Errorf("%d of %d nodes ready, want 2", ready, len(nodes.Items))
	}
	if out := run("down"); !strings.Contains(out, "lab "+name+" down") {
		t.Errorf("lab down: %s", out)
	}
	if _, err := os.Stat(filepath.Join(lab.DefaultStateRoot, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lab %s still has state after down (%v)", name, err)
	}
	if _, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Error("the API still answers after lab down")
	}
}

// TestMain removes the flowlb binary built by TestCLI.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
