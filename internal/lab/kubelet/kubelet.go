// Package kubelet is the lab's kubelet: one process for all lab nodes that
// registers them as Kubernetes Nodes (with leases and Ready conditions),
// schedules pending pods onto them, and runs each pod bound to one of them
// as a lab pod (a network namespace on the node with the lab echo server
// listening on the pod's ports). It reports pod addresses and readiness
// (from TCP and HTTP readiness probes, or the server being up) and honours
// graceful deletion with preStop waits, so that the real control plane's
// EndpointSlice controller sees pods come, get ready, terminate and go as
// it would in a cluster. See docs/lab.md, "Kubernetes".
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
)

// Runtime is what the kubelet needs from the lab; *lab.Lab provides it
// through LabRuntime, unit tests fake it.
type Runtime interface {
	// Nodes are the lab's node indices.
	Nodes() []int
	// AddPod creates the lab pod of kp on node i and starts its server
	// (the echo server; a flowlb pod waits for StartProcs). A hostNetwork
	// pod gets the node's address and a key (lab.HostPodKey) for a host.
	AddPod(ctx context.Context, node int, kp lab.KubePod) (host string, ip netip.Addr, err error)
	// StartProcs starts the processes of a flowlb pod.
	StartProcs(host string, procs []lab.KubeProc) error
	// Pods lists the lab pods that run Kubernetes pods, by host name.
	Pods() (map[string]lab.KubePod, error)
	// Up reports whether the pod's server runs; Restart starts it again.
	Up(host string) bool
	Restart(ctx context.Context, host string) error
	// Stop stops the pod's server (SIGTERM, SIGKILL after grace); Remove
	// deletes the lab pod.
	Stop(host string, grace time.Duration) error
	Remove(host string) error
	// Dial connects from node i's namespace (for probes).
	Dial(ctx context.Context, node int, network, addr string) (net.Conn, error)
}

// LabRuntime runs pods in a lab.
type LabRuntime struct{ Lab *lab.Lab }

func (r LabRuntime) Nodes() []int {
	var out []int
	for _, n := range r.Lab.State().Nodes {
		out = append(out, n.Index)
	}
	return out
}

func (r LabRuntime) AddPod(ctx context.Context, node int, kp lab.KubePod) (string, netip.Addr, error) {
	if kp.HostNetwork {
		key, err := r.Lab.AddKubeHostPod(node, kp)
		return key, lab.NodeAddr(node), err
	}
	h, err := r.Lab.AddKubePod(ctx, node, kp)
	return h.Name, h.Addr, err
}

func (r LabRuntime) StartProcs(host string, procs []lab.KubeProc) error {
	return r.Lab.StartKubeProcs(host, procs)
}
func (r LabRuntime) Pods() (map[string]lab.KubePod, error) { return r.Lab.KubePods() }
func (r LabRuntime) Up(host string) bool                   { return r.Lab.KubePodUp(host) }
func (r LabRuntime) Restart(ctx context.Context, host string) error {
	return r.Lab.RestartKubePod(ctx, host)
}
func (r LabRuntime) Stop(host string, grace time.Duration) error {
	return r.Lab.StopKubePod(host, grace)
}
func (r LabRuntime) Remove(host string) error { return r.Lab.RemoveKubePod(host) }
func (r LabRuntime) Dial(ctx context.Context, node int, network, addr string) (net.Conn, error) {
	return r.Lab.Node(node).Dial(ctx, network, addr)
}

// Config of the kubelet.
type Config struct {
	Lab     string // lab name (node labels)
	Client  kubernetes.Interface
	Runtime Runtime
	Zones   int // topology zones the nodes are dealt into (default lab.DefaultZones)
	// APIListener, if set, is forwarded to APIAddr (kubectl on the
	// machine's loopback reaches the API server in the fabric this way).
	APIListener net.Listener
	APIAddr     string
	// FlowlbBin runs the pods of flowlb's image (default: none, they run
	// the echo server like any pod); VolumeDir holds their volumes;
	// APIHost and APIPort are their KUBERNETES_SERVICE_HOST and _PORT.
	FlowlbBin, VolumeDir string
	APIHost              string
	APIPort              int
	// HostPaths, if set, are the directories that stand for node i's
	// kernel file systems, by their path on a real node
	// (lab.Lab.NodeHostPaths): a hostPath volume at or below one of those
	// paths is that directory, not one of the node's tree, so that the
	// agent DaemonSet on eBPF finds its node's cgroup and bpffs where the
	// manifests mount them.
	HostPaths func(node int) map[string]string
	// NodeIPs, by lab node, replace the IPv4 InternalIP a node reports
	// (its fabric address otherwise): on the OpenStack test bed a node's
	// address on the tenant network, where a cloud's load balancer finds
	// its node ports (cloud-provider-openstack's members are the nodes'
	// InternalIPs).
	NodeIPs map[int]netip.Addr
	// Timing (defaults: lease 40s renewed every 10s, status every 60s).
	LeaseDuration   time.Duration
	HeartbeatPeriod time.Duration
	StatusPeriod    time.Duration
	Log             *slog.Logger
}

// Kubelet is a running lab kubelet.
type Kubelet struct {
	cfg    Config
	client kubernetes.Interface
	rt     Runtime
	log    *slog.Logger
	nodes  []int

	podLister  corelisters.PodLister
	nodeLister corelisters.NodeLister
	queue      workqueue.TypedRateLimitingInterface[string] // pods to sync
	schedQ     workqueue.TypedRateLimitingInterface[string] // pods to schedule

	mu      sync.Mutex
	runs    map[types.UID]*podRun
	assumed map[types.UID]string // bound, not yet seen bound by the informer
	rr      int
}

// podRun is a pod the kubelet runs.
type podRun struct {
	key         string
	uid         types.UID
	node        int
	host        string // lab host name, nI-pJ
	ip          netip.Addr
	started     time.Time
	ready       map[string]bool // container → readiness
	restarts    int32
	terminating bool
	stopProbes  context.CancelFunc
}

// New makes a kubelet; Run starts it.
func New(cfg Config) (*Kubelet, error) {
	if cfg.Client == nil || cfg.Runtime == nil {
		return nil, errors.New("kubelet: client and runtime are required")
	}
	if cfg.Zones == 0 {
		cfg.Zones = lab.DefaultZones
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.HeartbeatPeriod == 0 {
		cfg.HeartbeatPeriod = 10 * time.Second
	}
	if cfg.StatusPeriod == 0 {
		cfg.StatusPeriod = time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Kubelet{
		cfg: cfg, client: cfg.Client, rt: cfg.Runtime, log: cfg.Log, nodes: cfg.Runtime.Nodes(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		schedQ: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "scheduling"}),
		runs:    map[types.UID]*podRun{},
		assumed: map[types.UID]string{},
	}, nil
}

// Run serves until ctx ends. Pods keep running when it returns (a
// restarted kubelet adopts them); `lab down` removes them.
func (k *Kubelet) Run(ctx context.Context) error {
	defer k.queue.ShutDown()
	defer k.schedQ.ShutDown()
	if k.cfg.APIListener != nil {
		go k.forward(ctx)
	}
	f := informers.NewSharedInformerFactory(k.client, 0)
	pods := f.Core().V1().Pods()
	nodes := f.Core().V1().Nodes()
	k.podLister, k.nodeLister = pods.Lister(), nodes.Lister()
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.onPod,
		UpdateFunc: func(_, obj any) { k.onPod(obj) },
		DeleteFunc: k.onPod,
	}); err != nil {
		return err
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A node turning ready may unblock pending pods.
		AddFunc:    func(any) { k.requeuePending() },
		UpdateFunc: func(_, _ any) { k.requeuePending() },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	go k.nodeLoop(ctx)
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache of %v not synced", typ)
		}
	}
	if err := k.adopt(ctx); err != nil {
		k.log.Warn("adopting running pods", "err", err)
	}
	k.log.Info("kubelet running", "lab", k.cfg.Lab, "nodes", len(k.nodes))
	var wg sync.WaitGroup
	wg.Go(func() { k.work(ctx, k.schedQ, k.schedule) })
	for range 4 {
		wg.Go(func() { k.work(ctx, k.queue, k.sync) })
	}
	<-ctx.Done()
	k.queue.ShutDown()
	k.schedQ.ShutDown()
	wg.Wait()
	return nil
}

func (k *Kubelet) onPod(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	if pod, ok := obj.(*corev1.Pod); ok && schedulable(pod) {
		k.schedQ.Add(key)
	}
	k.queue.Add(key)
}

func (k *Kubelet) requeuePending() {
	pods, err := k.podLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		if schedulable(p) {
			k.schedQ.Add(p.Namespace + "/" + p.Name)
		}
	}
}

// work runs fn for the keys of q, retrying failures with backoff.
func (k *Kubelet) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], fn func(context.Context, string) error) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		if err := fn(ctx, key); err != nil {
			// A conflict only means our cached copy was behind (the
			// controllers write pods too): retry quietly.
			if ctx.Err() == nil && !apierrors.IsConflict(err) {
				k.log.Warn("sync", "key", key, "err", err)
			}
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

func namespaceOf(key string) string { ns, _, _ := strings.Cut(key, "/"); return ns }
func nameOf(key string) string      { _, n, _ := strings.Cut(key, "/"); return n }

// labNodes are the Node objects of this lab, in node order.
func (k *Kubelet) labNodes() ([]*corev1.Node, error) {
	var out []*corev1.Node
	for _, i := range k.nodes {
		n, err := k.nodeLister.Get(lab.NodeName(i))
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// nodeIndex returns the lab node index of a node name, or 0.
func (k *Kubelet) nodeIndex(name string) int {
	for _, i := range k.nodes {
		if lab.NodeName(i) == name {
			return i
		}
	}
	return 0
}

// sync brings the lab in line with one pod: start it, report its status,
// or stop it.
func (k *Kubelet) sync(ctx context.Context, key string) error {
	pod, err := k.podLister.Pods(namespaceOf(key)).Get(nameOf(key))
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}
	// Runs of this key that are not this pod (it is gone, or was
	// replaced by one of the same name) stop at once: the API server no
	// longer waits for them.
	k.mu.Lock()
	var stale []*podRun
	for _, r := range k.runs {
		if r.key == key && (pod == nil || r.uid != pod.UID) {
			stale = append(stale, r)
		}
	}
	k.mu.Unlock()
	for _, r := range stale {
		k.teardown(r, 0)
	}
	if pod == nil || pod.Spec.NodeName == "" {
		return nil
	}
	node := k.nodeIndex(pod.Spec.NodeName)
	if node == 0 {
		return nil
	}
	k.mu.Lock()
	r := k.runs[pod.UID]
	k.mu.Unlock()

	if pod.DeletionTimestamp != nil {
		if r == nil {
			return k.finalDelete(ctx, pod)
		}
		k.mu.Lock()
		started := r.terminating
		r.terminating = true
		k.mu.Unlock()
		if !started {
			go k.terminate(ctx, pod, r)
		}
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		if r != nil {
			k.teardown(r, 0)
		}
		return nil
	}
	if r == nil {
		if r, err = k.start(ctx, pod, node); err != nil {
			return err
		}
	}
	return k.postStatus(ctx, pod, r)
}

// start runs pod on lab node i.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod, node int) (*podRun, error) {
	tcp, udp := podPorts(pod)
	kp := lab.KubePod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), TCP: tcp, UDP: udp}
	if k.cfg.FlowlbBin != "" && flowlbPod(pod) {
		kp.Flowlb, kp.HostNetwork, kp.Node = true, pod.Spec.HostNetwork, node
	}
	host, ip, err := k.rt.AddPod(ctx, node, kp)
	if err != nil {
		return nil, fmt.Errorf("start pod %s/%s on %s: %w", pod.Namespace, pod.Name, lab.NodeName(node), err)
	}
	if kp.Flowlb {
		if err := k.startFlowlb(ctx, pod, node, ip, host); err != nil {
			if rerr := k.rt.Remove(host); rerr != nil {
				k.log.Warn("remove pod", "host", host, "err", rerr)
			}
			return nil, fmt.Errorf("start pod %s/%s on %s: %w", pod.Namespace, pod.Name, lab.NodeName(node), err)
		}
	}
	k.log.Info("pod started", "pod", pod.Namespace+"/"+pod.Name, "host", host, "ip", ip, "tcp", tcp, "udp", udp)
	return k.track(ctx, pod, node, host, ip), nil
}

// track records a running pod and starts its probes.
func (k *Kubelet) track(ctx context.Context, pod *corev1.Pod, node int, host string, ip netip.Addr) *podRun {
	pctx, cancel := context.WithCancel(ctx)
	r := &podRun{key: pod.Namespace + "/" + pod.Name, uid: pod.UID, node: node, host: host, ip: ip,
		started: time.Now(), ready: map[string]bool{}, stopProbes: cancel}
	k.mu.Lock()
	k.runs[pod.UID] = r
	k.mu.Unlock()
	go k.probe(pctx, pod.DeepCopy(), r)
	return r
}

// adopt takes over the lab pods a previous kubelet started: pods still in
// the API keep running, the others are removed.
func (k *Kubelet) adopt(ctx context.Context) error {
	running, err := k.rt.Pods()
	if err != nil {
		return err
	}
	for host, kp := range running {
		pod, err := k.podLister.Pods(kp.Namespace).Get(kp.Name)
		_, node, _, perr := lab.ParseHost(host)
		if kp.HostNetwork {
			node, perr = kp.Node, nil
		}
		if err != nil || perr != nil || string(pod.UID) != kp.UID || k.nodeIndex(pod.Spec.NodeName) != node {
			k.log.Info("removing orphaned lab pod", "host", host, "pod", kp.Namespace+"/"+kp.Name)
			if err := k.rt.Remove(host); err != nil {
				k.log.Warn("remove lab pod", "host", host, "err", err)
			}
			continue
		}
		ip := netip.Addr{}
		if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			ip = a
		}
		k.track(ctx, pod, node, host, ip)
		k.log.Info("adopted pod", "pod", kp.Namespace+"/"+kp.Name, "host", host)
	}
	return nil
}

// view is the run's status input.
func (k *Kubelet) view(r *podRun) runView {
	k.mu.Lock()
	defer k.mu.Unlock()
	ready := make(map[string]bool, len(r.ready))
	for c, ok := range r.ready {
		ready[c] = ok
	}
	return runView{hostIPs: dualStack(lab.NodeAddr(r.node)), podIPs: dualStack(r.ip), started: r.started,
		ready: ready, running: k.rt.Up(r.host), restarts: r.restarts}
}

// dualStack is a lab host's IPv4 address a and its IPv6 twin, as
// Kubernetes lists a dual-stack pod's or node's addresses.
func dualStack(a netip.Addr) []string {
	if !a.IsValid() {
		return nil
	}
	if a6, ok := lab.Twin6(a); ok {
		return []string{a.String(), a6.String()}
	}
	return []string{a.String()}
}

// postStatus writes the pod's status if it changed.
func (k *Kubelet) postStatus(ctx context.Context, pod *corev1.Pod, r *podRun) error {
	st := podStatus(pod, k.view(r), metav1.NewTime(time.Now()))
	if equality.Semantic.DeepEqual(st, pod.Status) {
		return nil
	}
	p := pod.DeepCopy()
	p.Status = st
	_, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// terminate stops a deleted pod the way a kubelet does: preStop hooks
// (here: their sleeps) while the pod keeps serving, then SIGTERM, SIGKILL
// at the end of the grace period, then the pod is removed from the node
// and its object deleted for good.
func (k *Kubelet) terminate(ctx context.Context, pod *corev1.Pod, r *podRun) {
	grace := gracePeriod(pod)
	deadline := time.Now().Add(grace)
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		// The grace period runs from the deletion, not from when we saw it.
		deadline = pod.DeletionTimestamp.Time
	}
	wait := min(preStopWait(pod), time.Until(deadline))
	k.log.Info("pod terminating", "pod", r.key, "host", r.host, "grace", grace, "preStop", wait)
	if wait > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	k.teardown(r, max(time.Until(deadline), 0))
	if err := k.finalDelete(ctx, pod); err != nil {
		k.log.Warn("delete pod", "pod", r.key, "err", err)
		k.queue.AddRateLimited(r.key)
	}
}

// teardown stops the pod's server (giving it grace to exit) and removes
// the lab pod.
func (k *Kubelet) teardown(r *podRun, grace time.Duration) {
	r.stopProbes()
	if err := k.rt.Stop(r.host, grace); err != nil {
		k.log.Warn("stop pod", "host", r.host, "err", err)
	}
	if err := k.rt.Remove(r.host); err != nil {
		k.log.Warn("remove pod", "host", r.host, "err", err)
	}
	if k.cfg.VolumeDir != "" {
		if err := os.RemoveAll(filepath.Join(k.cfg.VolumeDir, "pods", string(r.uid))); err != nil {
			k.log.Warn("remove pod volumes", "host", r.host, "err", err)
		}
	}
	k.mu.Lock()
	delete(k.runs, r.uid)
	k.mu.Unlock()
	k.log.Info("pod removed", "pod", r.key, "host", r.host)
}

// finalDelete removes a terminated pod's object (grace 0, this UID only).
func (k *Kubelet) finalDelete(ctx context.Context, pod *corev1.Pod) error {
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// forward copies connections of the API listener to the API server.
func (k *Kubelet) forward(ctx context.Context) {
	ln := k.cfg.APIListener
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			u, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", k.cfg.APIAddr)
			if err != nil {
				k.log.Warn("forward to API", "err", err)
				return
			}
			defer u.Close()
			// Either side closing ends both.
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}
