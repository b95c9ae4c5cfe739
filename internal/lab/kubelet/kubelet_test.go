package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// fakeRuntime records what the kubelet asks of the lab.
type fakeRuntime struct {
	nodes []int

	mu       sync.Mutex
	pods     map[string]lab.KubePod
	up       map[string]bool
	next     map[int]int
	adds     []string // hosts, in order
	stops    map[string]time.Duration
	removed  []string
	restarts []string
	procs    map[string][]lab.KubeProc
}

func newFakeRuntime(nodes ...int) *fakeRuntime {
	return &fakeRuntime{nodes: nodes, pods: map[string]lab.KubePod{}, up: map[string]bool{}, next: map[int]int{}, stops: map[string]time.Duration{}}
}

func (r *fakeRuntime) Nodes() []int { return r.nodes }

func (r *fakeRuntime) AddPod(_ context.Context, node int, kp lab.KubePod) (string, netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if kp.HostNetwork {
		key := lab.HostPodKey(node, kp.UID)
		r.pods[key] = kp
		r.adds = append(r.adds, key)
		return key, lab.NodeAddr(node), nil
	}
	r.next[node]++
	host := lab.PodName(node, r.next[node])
	r.pods[host] = kp
	r.up[host] = true
	r.adds = append(r.adds, host)
	return host, lab.PodAddr(node, r.next[node]), nil
}

func (r *fakeRuntime) StartProcs(host string, procs []lab.KubeProc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs == nil {
		r.procs = map[string][]lab.KubeProc{}
	}
	r.procs[host] = procs
	r.up[host] = true
	return nil
}

func (r *fakeRuntime) Pods() (map[string]lab.KubePod, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]lab.KubePod{}
	for h, p := range r.pods {
		out[h] = p
	}
	return out, nil
}

func (r *fakeRuntime) Up(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up[host]
}

func (r *fakeRuntime) setUp(host string, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.up[host] = up
}

func (r *fakeRuntime) Restart(_ context.Context, host string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.up[host] = true
	r.restarts = append(r.restarts, host)
	return nil
}

func (r *fakeRuntime) Stop(host string, grace time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.up[host] = false
	r.stops[host] = grace
	return nil
}

func (r *fakeRuntime) Remove(host string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, host)
	delete(r.up, host)
	r.removed = append(r.removed, host)
	return nil
}

func (r *fakeRuntime) Dial(context.Context, int, string, string) (net.Conn, error) {
	return nil, errors.New("no network in the fake runtime")
}

func (r *fakeRuntime) snapshot() (adds, removed, restarts []string, stops map[string]time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	stops = map[string]time.Duration{}
	for h, g := range r.stops {
		stops[h] = g
	}
	return slices.Clone(r.adds), slices.Clone(r.removed), slices.Clone(r.restarts), stops
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// fakeClient is a fake API that binds pods (the binding subresource sets
// spec.nodeName, as the API server does).
func fakeClient(t *testing.T, objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		obj, err := cs.Tracker().Get(podsGVR, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		if p.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), p.Name, fmt.Errorf("already bound to %s", p.Spec.NodeName))
		}
		p.Spec.NodeName = b.Target.Name
		return true, b, cs.Tracker().Update(podsGVR, p, p.Namespace)
	})
	// The fake clientset's watch sends only what changes after it
	// starts: an object created between an informer's list and its
	// watch is never seen. Tests wait for the pods' watch before they
	// create pods (podsWatched).
	started := make(chan struct{})
	var once sync.Once
	podWatches.Store(cs, started)
	cs.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(started) })
		return true, w, nil
	})
	return cs
}

// podWatches holds, for each fake clientset, a channel closed once pods
// are watched.
var podWatches sync.Map

// podsWatched waits until an informer watches the pods of cs.
func podsWatched(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	ch, _ := podWatches.Load(cs)
	select {
	case <-ch.(chan struct{}):
	case <-time.After(settle):
		t.Fatal("no informer watches pods")
	}
}

func runKubelet(t *testing.T, cs *fake.Clientset, rt *fakeRuntime) {
	t.Helper()
	k, err := New(Config{Lab: "x", Client: cs, Runtime: rt, Zones: 2,
		HeartbeatPeriod: 50 * time.Millisecond, StatusPeriod: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("kubelet: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("kubelet did not stop")
		}
	})
}

// settle bounds the waits for the kubelet to act on the fake API.
const settle = 15 * time.Second

func rsPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-web", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(30)),
			Containers: []corev1.Container{{Name: "app", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
				{Name: "side", Image: "busybox"}},
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// The kubelet against a fake API: it registers the nodes with leases,
// binds pending pods spread over the nodes, starts them with their ports,
// reports addresses and readiness, restarts a dead server, and stops and
// removes pods on graceful and immediate deletion.
func TestKubeletLifecycle(t *testing.T) {
	ctx := context.Background()
	cs := fakeClient(t)
	rt := newFakeRuntime(1, 2)
	runKubelet(t, cs, rt)

	testutil.Eventually(t, settle, "nodes registered, ready, with leases", func() (bool, string) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 2 {
			return false, fmt.Sprint(len(nodes.Items), err)
		}
		for _, n := range nodes.Items {
			if !nodeReady(&n) || n.Labels[LabelLab] != "x" {
				return false, fmt.Sprintf("%s: %+v", n.Name, n.Status.Conditions)
			}
			if _, err := cs.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})

	podsWatched(t, cs)
	for k := range 4 {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, rsPod(fmt.Sprintf("web-%d", k)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var pods []corev1.Pod
	testutil.Eventually(t, settle, "4 pods bound, running and ready", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		var desc []string
		ok := len(pods) == 4
		for _, p := range pods {
			ok = ok && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && podReady(&p)
			desc = append(desc, fmt.Sprintf("%s node=%s phase=%s ip=%s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, podReady(&p)))
		}
		return ok, fmt.Sprint(desc)
	})
	perNode := map[string]int{}
	hostOf := map[string]string{}
	running, _ := rt.Pods()
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		var host string
		for h, kp := range running {
			if kp.UID == string(p.UID) {
				host = h
			}
		}
		if host == "" {
			t.Fatalf("pod %s runs nowhere: %v", p.Name, running)
		}
		hostOf[p.Name] = host
		kind, i, j, err := lab.ParseHost(host)
		if err != nil || kind != "pod" || lab.NodeName(i) != p.Spec.NodeName || p.Status.PodIP != lab.PodAddr(i, j).String() ||
			p.Status.HostIP != lab.NodeAddr(i).String() {
			t.Errorf("pod %s on %s runs as %s with IP %s, host IP %s", p.Name, p.Spec.NodeName, host, p.Status.PodIP, p.Status.HostIP)
		}
		kp := running[host]
		if kp.Namespace != "default" || kp.Name != p.Name || !slices.Equal(kp.TCP, []int{8080}) || !slices.Equal(kp.UDP, []int{53}) {
			t.Errorf("pod %s started as %+v", p.Name, kp)
		}
		if len(p.Status.ContainerStatuses) != 2 {
			t.Errorf("pod %s container statuses %+v", p.Name, p.Status.ContainerStatuses)
		}
	}
	if perNode["n1"] != 2 || perNode["n2"] != 2 {
		t.Errorf("4 replicas over 2 nodes: %v", perNode)
	}

	// A dead server is restarted and counted.
	victim := pods[0]
	rt.setUp(hostOf[victim.Name], false)
	testutil.Eventually(t, settle, "dead server restarted", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, _, restarts, _ := rt.snapshot()
		return slices.Contains(restarts, hostOf[victim.Name]) && p.Status.ContainerStatuses[0].RestartCount == 1 && podReady(p),
			fmt.Sprintf("restarts %v, status %+v", restarts, p.Status.ContainerStatuses)
	})

	// Graceful deletion (as the API server records it): the preStop
	// wait, then the server stopped with the grace left, the lab pod
	// removed and the object deleted for good.
	graceful := pods[1]
	p, err := cs.CoreV1().Pods("default").Get(ctx, graceful.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
	t0 := time.Now()
	del := metav1.NewTime(t0.Add(5 * time.Second))
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &del, ptr.To(int64(5))
	if _, err := cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, settle, "terminating pod removed and deleted", func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, graceful.Name, metav1.GetOptions{})
		_, removed, _, stops := rt.snapshot()
		return apierrors.IsNotFound(err) && slices.Contains(removed, hostOf[graceful.Name]), fmt.Sprintf("get: %v, removed %v, stops %v", err, removed, stops)
	})
	if d := time.Since(t0); d < 900*time.Millisecond {
		t.Errorf("pod with a 1s preStop sleep gone after %s", d)
	}
	_, _, _, stops := rt.snapshot()
	if g, ok := stops[hostOf[graceful.Name]]; !ok || g <= 0 || g > 4*time.Second {
		t.Errorf("server stopped with grace %s (stopped %v), want the ~4s left of 5s after the 1s preStop", g, ok)
	}

	// Immediate deletion: the pod is gone from the API, the lab pod goes.
	gone := pods[2]
	if err := cs.CoreV1().Pods("default").Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, settle, "deleted pod removed from the lab", func() (bool, string) {
		_, removed, _, _ := rt.snapshot()
		return slices.Contains(removed, hostOf[gone.Name]), fmt.Sprint(removed)
	})
	if _, ok := stops[hostOf[pods[3].Name]]; ok {
		t.Errorf("untouched pod %s was stopped", pods[3].Name)
	}
}

// A restarted kubelet adopts the lab pods of pods still in the API and
// removes the others.
func TestKubeletAdopts(t *testing.T) {
	ctx := context.Background()
	kept := rsPod("kept")
	kept.Spec.NodeName = "n1"
	kept.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: lab.PodAddr(1, 3).String()}
	cs := fakeClient(t, kept)
	rt := newFakeRuntime(1, 2)
	rt.pods["n1-p3"] = lab.KubePod{Namespace: "default", Name: "kept", UID: string(kept.UID), TCP: []int{8080}}
	rt.pods["n2-p1"] = lab.KubePod{Namespace: "default", Name: "gone", UID: "uid-gone"}
	rt.pods["n2-p2"] = lab.KubePod{Namespace: "default", Name: "kept", UID: "uid-of-an-older-kept"}
	rt.up["n1-p3"], rt.up["n2-p1"], rt.up["n2-p2"] = true, true, true
	runKubelet(t, cs, rt)

	testutil.Eventually(t, settle, "orphans removed, kept pod ready", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, removed, _, _ := rt.snapshot()
		slices.Sort(removed)
		return slices.Equal(removed, []string{"n2-p1", "n2-p2"}) && podReady(p) && p.Status.PodIP == lab.PodAddr(1, 3).String(),
			fmt.Sprintf("removed %v, ip %s, ready %v", removed, p.Status.PodIP, podReady(p))
	})
	adds, _, _, _ := rt.snapshot()
	if len(adds) != 0 {
		t.Errorf("adopted pod started again: %v", adds)
	}
}
