// Package kubecontroller is `flowlb kube-controller`: it watches Services,
// EndpointSlices and Nodes and keeps one Octavia load balancer per served
// Service, with the pods as members (docs/kubernetes.md).
package kubecontroller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Finalizer keeps a LoadBalancer Service whose external address is this
// controller's until its load balancer and floating IP are released, as a
// cloud provider's service controller keeps its own. ClusterIP and
// NodePort Services get none, as kube-proxy puts none on them: Kubernetes
// deletes them at once (its own conformance tests expect so), and their
// load balancers are removed on the delete event, or at the next start's
// garbage collection when no controller saw it.
const Finalizer = "flowlb.io/load-balancer"

// wantsFinalizer says whether svc, served, carries Finalizer.
func wantsFinalizer(svc *corev1.Service, o kubelb.Options) bool {
	return kubelb.OwnsExternal(svc, o)
}

// Controller reconciles Services into load balancers.
type Controller struct {
	client  kubernetes.Interface
	octavia *kubelb.Octavia
	neutron *kubelb.Neutron
	opts    kubelb.Options
	log     *slog.Logger

	factory  informers.SharedInformerFactory
	services corelisters.ServiceLister
	// slices are the EndpointSlices indexed by their Service's key
	// (byService): a lister's label selection walks every slice of the
	// namespace, which made each reconcile O(Services) and took a third of
	// the controller's CPU with 1,000 Services in one namespace.
	slices   cache.Indexer
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder

	// seen is when each queued key's oldest unprocessed change arrived,
	// for the change → ACTIVE latency.
	mu   sync.Mutex
	seen map[string]time.Time
	// applied: see appliedTTL; now is the clock (tests move it).
	applied map[string]applied
	now     func() time.Time
	// settle is when awaited load balancers are read.
	settle settle
	// born is when each Service created since the start was seen, until
	// its first load balancer is applied; sliceGrace how long such a
	// Service waits for its EndpointSlice (sliceWait).
	born       map[string]time.Time
	sliceGrace time.Duration
	// gated is since when each Service's new external addresses have
	// been held for a node to announce them (gate).
	gated map[string]time.Time
	// made are the Services that have (or may have) a load balancer of
	// this controller's: the garbage collection's list at start, and
	// every Service applied since. A Service that stops being served, or
	// goes, is looked up only if it is here: an unserved Service
	// (ExternalName, headless, another proxy's) costs no API read.
	made map[string]bool
	// namesChecked: the API said it refuses a load balancer's create
	// whose name is in use (apply).
	namesChecked atomic.Bool
	// listed are this cluster's load balancers by Service key as the
	// list at start found them, for restoring what each Service's
	// annotation says was applied (restored); each is dropped once used.
	listed   map[string]kubelb.ActualLB
	listedAt time.Time
	// auditEvery is how often the load balancers are listed to find
	// those changed behind the controller's back (audit); recordDelay
	// how long after a change is seen ACTIVE its Service's AnnApplied is
	// written.
	auditEvery, recordDelay time.Duration
	// picks are the Stages of the reconciles under way; stages each
	// Service's last applied change's (StagesHandler).
	picks, stages map[string]Stages

	m *metrics
}

type metrics struct {
	reconciles *prometheus.CounterVec
	latency    prometheus.Histogram
	drifted    prometheus.Counter
	stage      *prometheus.HistogramVec
}

// New builds a controller; Run starts it. neutron gives LoadBalancer
// Services their floating IPs (docs/kubernetes.md, the Kuryr model). The
// controller uses a copy of octavia with Defer: no worker waits while a
// Service's change reaches the nodes, so many Services made at once are
// applied at the API's pace, not at the nodes'.
func New(client kubernetes.Interface, octavia *kubelb.Octavia, neutron *kubelb.Neutron, opts kubelb.Options, reg prometheus.Registerer, log *slog.Logger) *Controller {
	deferred := *octavia
	deferred.Defer = true
	octavia = &deferred
	f := informers.NewSharedInformerFactory(client, 10*time.Minute)
	svcInf := f.Core().V1().Services()
	sliceInf := f.Discovery().V1().EndpointSlices()
	nodeInf := f.Core().V1().Nodes()
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	c := &Controller{
		client: client, octavia: octavia, neutron: neutron, opts: opts, log: log, factory: f,
		services: svcInf.Lister(), slices: sliceInf.Informer().GetIndexer(), nodes: nodeInf.Lister(),
		synced:      []cache.InformerSynced{svcInf.Informer().HasSynced, sliceInf.Informer().HasSynced, nodeInf.Informer().HasSynced},
		queue:       workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "flowlb-kube-controller"}),
		seen:        map[string]time.Time{},
		applied:     map[string]applied{},
		born:        map[string]time.Time{},
		gated:       map[string]time.Time{},
		made:        map[string]bool{},
		listed:      map[string]kubelb.ActualLB{},
		picks:       map[string]Stages{},
		stages:      map[string]Stages{},
		sliceGrace:  defaultSliceGrace,
		auditEvery:  defaultAuditEvery,
		recordDelay: defaultRecordDelay,
		now:         time.Now,
		m: &metrics{
			reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_kube_reconciles_total",
				Help: "Service reconciliations by result (ok, error, invalid, awaiting: the load balancer took the change and is not ACTIVE yet, " +
					"awaiting_slice: a new Service waits for its EndpointSlice, awaiting_announcement: its external address waits for a node to announce it)."}, []string{"result"}),
			latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_kube_sync_latency_seconds",
				Help:    "From a Service or EndpointSlice change to its load balancer ACTIVE.",
				Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
			drifted: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_kube_drifted_total",
				Help: "Load balancers the periodic list found changed or gone behind the controller's back, each then read in full and repaired."}),
			stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flowlb_kube_stage_seconds",
				Help: "A change's stages in the controller: queue (informer event to a worker taking the reconcile that applies it, " +
					"a new Service's wait for its EndpointSlice included), calls (the API's answers), active (answered to ACTIVE seen).",
				Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"stage"}),
		},
	}
	if reg != nil {
		reg.MustRegister(c.m.reconciles, c.m.latency, c.m.drifted, c.m.stage)
	}
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{byService: sliceServiceIndex}); err != nil {
		panic(err) // only before the informer starts, which New does not do
	}
	_, _ = svcInf.Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, initial bool) {
			if !initial {
				c.created(o)
			}
			c.enqueue(o)
		},
		UpdateFunc: func(old, o any) {
			if !onlyRecorded(old, o) {
				c.enqueue(o)
			}
		},
		DeleteFunc: func(o any) { c.enqueue(o) },
	})
	_, _ = sliceInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.enqueueSlice(o) },
		UpdateFunc: func(_, o any) { c.enqueueSlice(o) },
		DeleteFunc: func(o any) { c.enqueueSlice(o) },
	})
	_, _ = nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		// The Nodes of the initial list need no requeue: every Service is
		// queued by its own initial add.
		AddFunc: func(o any, initial bool) {
			if !initial {
				c.enqueueRestricted()
			}
		},
		UpdateFunc: func(old, o any) {
			a, b := old.(*corev1.Node), o.(*corev1.Node)
			if !slices.Equal(a.Spec.PodCIDRs, b.Spec.PodCIDRs) || a.Spec.PodCIDR != b.Spec.PodCIDR {
				c.enqueueRestricted()
			}
		},
		DeleteFunc: func(o any) { c.enqueueRestricted() },
	})
	return c
}

// enqueueRestricted queues the Services whose source ranges let the pod
// networks through, after a Node came, went or changed its pod networks.
func (c *Controller) enqueueRestricted() {
	all, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, s := range all {
		if kubelb.SourceRestricted(s) {
			c.enqueue(s)
		}
	}
}

// podCIDRs are the pod networks: --pod-cidrs and every Node's
// spec.podCIDRs, so that a node joining with a new one needs no restart.
func (c *Controller) podCIDRs() []string {
	out := slices.Clone(c.opts.PodCIDRs)
	nodes, _ := c.nodes.List(labels.Everything())
	for _, n := range nodes {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, s := range cidrs {
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked().String()) // Desired keeps the load balancer's families
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (c *Controller) add(key string) {
	c.mu.Lock()
	if _, ok := c.seen[key]; !ok {
		c.seen[key] = time.Now()
	}
	c.mu.Unlock()
	c.queue.Add(key)
}

func (c *Controller) enqueue(o any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
	if err == nil {
		c.add(key)
	}
}

func (c *Controller) enqueueSlice(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if key := sliceService(o); key != "" {
		c.add(key)
	}
}

// byService indexes EndpointSlices by sliceService.
const byService = "service"

// sliceService is the key (namespace/name) of the Service an
// EndpointSlice belongs to, "" for none.
func sliceService(o any) string {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return ""
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return ""
	}
	return s.Namespace + "/" + name
}

func sliceServiceIndex(o any) ([]string, error) {
	if key := sliceService(o); key != "" {
		return []string{key}, nil
	}
	return nil, nil
}

// slicesOf returns the EndpointSlices of the Service key.
func (c *Controller) slicesOf(key string) ([]*discoveryv1.EndpointSlice, error) {
	objs, err := c.slices.ByIndex(byService, key)
	if err != nil {
		return nil, err
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// Run serves until ctx ends: informers, a garbage collection of load
// balancers whose Service is gone, then workers.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return errors.New("informer caches did not sync")
	}
	if err := c.collectGarbage(ctx); err != nil {
		c.log.Error("garbage collection", "err", err)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	wg.Go(func() {
		t := time.NewTicker(c.auditEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := c.audit(ctx); err != nil && ctx.Err() == nil {
					c.log.Error("listing the load balancers for changes behind the controller's back", "err", err)
				}
			}
		}
	})
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// collectGarbage deletes this cluster's load balancers whose Service no
// longer exists or is no longer served (deleted or changed while no
// controller ran), and notes the others' Services as made.
func (c *Controller) collectGarbage(ctx context.Context) error {
	start := time.Now()
	owned, err := c.octavia.Owned(ctx, kubelb.TagCluster+c.opts.Cluster)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.listedAt = start
	c.mu.Unlock()
	for _, lb := range owned {
		key := ""
		for _, t := range lb.Tags {
			if k, ok := strings.CutPrefix(t, kubelb.TagService); ok {
				key = k
			}
		}
		ns, name, _ := strings.Cut(key, "/")
		if key == "" || lb.Name != kubelb.Name(c.opts.Cluster, ns, name) {
			continue // not one of ours after all
		}
		svc, err := c.services.Services(ns).Get(name)
		switch {
		case apierrors.IsNotFound(err):
			c.log.Info("deleting the load balancer of a Service that is gone", "service", key, "loadbalancer", lb.ID)
		case err == nil && !kubelb.Serves(svc, c.opts):
			c.log.Info("deleting the load balancer of a Service no longer served", "service", key, "loadbalancer", lb.ID)
		default:
			c.noteMade(key, true)
			c.mu.Lock()
			c.listed[key] = lb
			c.mu.Unlock()
			continue
		}
		if _, err := c.releaseFloatingIPs(ctx, &lb); err != nil {
			return err
		}
		if err := c.octavia.Delete(ctx, lb.ID); err != nil {
			return err
		}
	}
	return nil
}

// noteMade notes whether the Service key has a load balancer.
func (c *Controller) noteMade(key string, made bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if made {
		c.made[key] = true
	} else {
		delete(c.made, key)
	}
}

func (c *Controller) isMade(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.made[key]
}

// release deletes the load balancer of the Service key, gone or no longer
// served, when it has one.
func (c *Controller) release(ctx context.Context, key, lbName string) error {
	if !c.isMade(key) {
		return nil
	}
	if err := c.deleteLB(ctx, lbName); err != nil {
		return err
	}
	c.noteMade(key, false)
	return nil
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	c.mu.Lock()
	since := c.seen[key]
	delete(c.seen, key)
	c.mu.Unlock()
	c.picked(key, since)
	err := c.reconcile(ctx, key)
	c.unpicked(key)
	switch {
	case err == nil:
		c.queue.Forget(key)
		c.m.reconciles.WithLabelValues("ok").Inc()
		if !since.IsZero() {
			c.m.latency.Observe(time.Since(since).Seconds())
		}
	case errors.Is(err, errInvalid):
		c.queue.Forget(key) // retrying cannot help; a change to the Service will
		c.m.reconciles.WithLabelValues("invalid").Inc()
	case errors.Is(err, errAwaiting):
		c.m.reconciles.WithLabelValues("awaiting").Inc()
		c.keepSeen(key, since)
		c.queue.Forget(key)
		c.queue.AddAfter(key, c.checkAfter(key))
	case errors.As(err, new(waiting)):
		// A wait of a known length: looked at again after it (or
		// sooner, when what it waits for queues the key).
		var w waiting
		errors.As(err, &w)
		c.m.reconciles.WithLabelValues(w.result()).Inc()
		c.keepSeen(key, since)
		c.queue.Forget(key)
		c.queue.AddAfter(key, w.after())
	default:
		c.m.reconciles.WithLabelValues("error").Inc()
		c.log.Error("reconcile", "service", key, "err", err)
		c.keepSeen(key, since)
		c.queue.AddRateLimited(key)
	}
	return true
}

// keepSeen keeps when key's change arrived for the reconcile that
// finishes it, unless a newer change arrived meanwhile.
func (c *Controller) keepSeen(key string, since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[key]; !ok && !since.IsZero() {
		c.seen[key] = since
	}
}

var (
	errInvalid = errors.New("invalid Service")
	// errAwaiting: the Service's load balancer took its change and is
	// not ACTIVE yet. The key is checked again later, without a worker
	// waiting for it (see confirm).
	errAwaiting = errors.New("load balancer not ACTIVE yet")
)

// waiting is a reconcile that waits for something for a known time: its
// result label and when to look again.
type waiting interface {
	error
	result() string
	after() time.Duration
}

// awaitingSlice: a new Service with a selector has no EndpointSlice yet;
// it is reconciled when one comes, or after this long.
type awaitingSlice time.Duration

func (w awaitingSlice) result() string       { return "awaiting_slice" }
func (w awaitingSlice) after() time.Duration { return time.Duration(w) }

func (w awaitingSlice) Error() string {
	return fmt.Sprintf("no EndpointSlice yet, waiting %s for one", time.Duration(w))
}

func (c *Controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	lbName := kubelb.Name(c.opts.Cluster, ns, name)
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		c.mu.Lock()
		delete(c.stages, key)
		c.mu.Unlock()
		return c.release(ctx, key, lbName)
	}
	if err != nil {
		return err
	}
	served := kubelb.Serves(svc, c.opts)
	if svc.DeletionTimestamp != nil || !served {
		c.forget(key)
		finalized := slices.Contains(svc.Finalizers, Finalizer)
		if !finalized && !c.isMade(key) {
			return nil
		}
		if finalized {
			c.noteMade(key, true) // an older controller's, or another replica's
		}
		if err := c.release(ctx, key, lbName); err != nil {
			c.recorder.Eventf(svc, corev1.EventTypeWarning, "DeleteLoadBalancerFailed", "deleting load balancer %s: %v", lbName, err)
			return err
		}
		if c.normalEvents(svc) {
			c.recorder.Eventf(svc, corev1.EventTypeNormal, "DeletedLoadBalancer", "deleted load balancer %s", lbName)
		}
		if err := c.setFinalizer(ctx, svc, false); err != nil {
			return err
		}
		if !kubelb.OwnsExternal(svc, c.opts) {
			return nil // the ingress, if any, is not ours to clear
		}
		return c.setIngress(ctx, svc, nil)
	}
	eps, err := c.slicesOf(key)
	if err != nil {
		return err
	}
	if wait := c.sliceWait(key, svc, eps); wait > 0 {
		return awaitingSlice(wait)
	}
	// Set before the load balancer is made, so that no LoadBalancer
	// Service can go without its release; taken off a Service that no
	// longer needs one (type changed, or set by an older version on every
	// Service).
	if err := c.setFinalizer(ctx, svc, wantsFinalizer(svc, c.opts)); err != nil {
		return err
	}
	// Known not to have a load balancer: none at the start's list, none
	// applied since, and no other controller's finalizer on it.
	absent := !c.isMade(key) && !slices.Contains(svc.Finalizers, Finalizer)
	c.noteMade(key, true)
	opts := c.opts
	if kubelb.SourceRestricted(svc) {
		opts.PodCIDRs = c.podCIDRs() // only source ranges list them
	}
	want, err := kubelb.Desired(svc, eps, opts)
	if err != nil {
		c.forget(key)
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "InvalidService", "%v", err)
		return fmt.Errorf("%w: %v", errInvalid, err)
	}
	a, known := c.last(key)
	if !known {
		a, known = c.restored(key, svc, want)
	}
	// fresh: a's stamp was read in this reconcile.
	fresh := false
	if known && a.pending != "" {
		// The last change first: at ACTIVE it is complete (the event,
		// then the ingress: an address is published once every node
		// serves it), and Octavia takes the next, whose ingress comes
		// when it is ACTIVE in turn. A new change is worth a read now.
		same := reflect.DeepEqual(a.want, want)
		stamp, err := c.settled(ctx, svc, key, lbName, a, !same)
		if err != nil {
			return err
		}
		a.pending = ""
		a.stamp, a.stampedAt = stamp, time.Now()
		fresh = true
		c.keep(key, a)
		if same {
			return c.done(ctx, svc, a)
		}
	}
	if known && c.trusted(a) {
		if reflect.DeepEqual(a.want, want) {
			return c.done(ctx, svc, a)
		}
		if calls, ok := kubelb.PlanMembers(a.lbID, a.pools, a.want, want); ok {
			if err := c.sendMembers(ctx, svc, key, lbName, a, want, calls, fresh); !errors.Is(err, errDrifted) {
				return err
			}
		}
	}
	a, err = c.ensure(ctx, svc, lbName, want, absent && !known)
	if err != nil {
		c.forget(key)
		return err
	}
	c.remember(key, a)
	if a.pending != "" {
		return errAwaiting
	}
	return c.done(ctx, svc, a)
}

// done ends a reconcile whose load balancer holds a.want, ACTIVE: the
// Service's ingress, then (later) its AnnApplied.
func (c *Controller) done(ctx context.Context, svc *corev1.Service, a applied) error {
	if err := c.setIngressOf(ctx, svc, a.want, a.lbID, a.ingress); err != nil {
		return err
	}
	return c.record(ctx, svc, a)
}

// trusted says whether a, what the last reconcile applied, may be taken
// as what the API holds without reading it: when its load balancer's
// updated_at is known (the periodic audit compares it with the API's),
// or, without one, within appliedTTL of the last full read.
func (c *Controller) trusted(a applied) bool {
	return a.stamp != "" || c.now().Sub(a.loaded) < appliedTTL
}

// errDrifted: the load balancer was changed behind the controller's back
// since what it last applied; it is read in full.
var errDrifted = errors.New("load balancer changed since it was last applied")

// sendMembers applies want, which differs from what the last reconcile
// applied (a, trusted) in its members alone, with calls
// (kubelb.PlanMembers): a batch member update per changed pool, with
// the load balancer's row read first (errDrifted when it is not as a
// left it: the caller reads it in full) and nothing else. The batch sets
// the pool's members to the list, so sending it again changes nothing; a
// pool gone behind the controller's back (404), or another's change
// under way (409), fails the reconcile, which forgets a and so reads
// everything at its retry.
func (c *Controller) sendMembers(ctx context.Context, svc *corev1.Service, key, lbName string, a applied, want *kubelb.LB, calls []kubelb.Call, fresh bool) error {
	if a.stamp != "" && !fresh {
		// One row read first (unless this reconcile just read it): the
		// completion of the batch stamps the load balancer anew, which
		// would hide from the audit a change made behind the
		// controller's back since a.stamp.
		chk, err := c.octavia.Check(ctx, a.lbID)
		if err != nil {
			return err
		}
		if chk.Gone || chk.Status != "ACTIVE" || chk.UpdatedAt != a.stamp {
			c.forget(key)
			c.m.drifted.Inc()
			return errDrifted
		}
	}
	pending, n, err := c.octavia.Send(ctx, calls)
	if err != nil {
		c.forget(key)
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "load balancer %s: %v", lbName, err)
		return err
	}
	c.sent(key)
	c.remember(key, applied{want: want, ingress: a.ingress, calls: n, pending: pending, lbID: a.lbID, pools: a.pools, loaded: a.loaded})
	if pending != "" {
		return errAwaiting
	}
	return c.setIngressOf(ctx, svc, want, a.lbID, a.ingress)
}

// settled reads once, when the read is due or now, how a's pending
// change is going: nil at ACTIVE (the Service told, when the change made
// calls), errAwaiting while under way (read again later), an error at
// ERROR, when the load balancer is gone or after activeTimeout.
//
// A Service queued with nothing new before the read is due (its own
// finalizer update comes right after the change was sent) reads
// nothing: such reads were one in three when 1,000 Services were made at
// once. One with a new change to send reads now: the due read comes
// after the time changes have recently taken, which a bulk of Services
// can make long.
func (c *Controller) settled(ctx context.Context, svc *corev1.Service, key, lbName string, a applied, now bool) (stamp string, err error) {
	if !now && time.Now().Before(a.due) {
		return "", errAwaiting
	}
	chk, err := c.octavia.Check(ctx, a.pending)
	status := chk.Status
	switch {
	case err != nil:
		return "", err
	case chk.Gone || status == "ERROR" || c.now().Sub(a.at) > c.activeTimeout():
		c.forget(key)
		err := fmt.Errorf("load balancer %s: %s after %s", lbName, cmp.Or(status, "gone"), c.now().Sub(a.at).Round(time.Millisecond))
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "%v", err)
		return "", err
	case status != "ACTIVE":
		c.mu.Lock()
		defer c.mu.Unlock()
		a.checks++
		a.checked = time.Now()
		a.due = a.checked.Add(c.settle.after(a.checks))
		c.applied[key] = a
		return "", errAwaiting
	}
	c.learnSettle(a)
	c.activeSeen(key)
	c.ensured(ctx, svc, lbName, a)
	return chk.UpdatedAt, nil
}

// checkAfter is when a load balancer awaited for key is read next: at
// first after the time changes have recently taken to become ACTIVE,
// then more often (settle).
func (c *Controller) checkAfter(key string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(time.Until(c.applied[key].due), 0)
}

// learnSettle learns from a, just read ACTIVE, how long its change took.
func (c *Controller) learnSettle(a applied) {
	notYet := time.Duration(0)
	if !a.checked.IsZero() {
		notYet = a.checked.Sub(a.sent)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle.observe(notYet, time.Since(a.sent))
}

func (c *Controller) activeTimeout() time.Duration {
	return cmp.Or(c.octavia.Timeout, 2*time.Minute)
}

// ensure makes the API hold want (the load balancer, then its floating
// IP) and returns what was applied: the Service's external addresses
// (the floating IP, else the external VIPs', one per family) and the
// load balancer still to become ACTIVE, if any.
func (c *Controller) ensure(ctx context.Context, svc *corev1.Service, lbName string, want *kubelb.LB, absent bool) (applied, error) {
	vip, calls, err := c.apply(ctx, svc, want, absent)
	if gophercloud.ResponseCodeIs(err, http.StatusNotImplemented) {
		// The provider refuses an option (Octavia's 501): retrying cannot
		// help, a change to the Service can.
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "InvalidService", "load balancer %s: the provider does not support what the Service asks: %v", lbName, err)
		return applied{}, fmt.Errorf("%w: %v", errInvalid, err)
	}
	if err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "load balancer %s: %v", lbName, err)
		return applied{}, err
	}
	a := applied{want: want, calls: calls, pending: vip.Pending, lbID: vip.ID, pools: vip.Pools, stamp: vip.UpdatedAt}
	if calls > 0 {
		c.sent(svc.Namespace + "/" + svc.Name)
	}
	if a.pending == "" {
		if calls > 0 {
			c.activeSeen(svc.Namespace + "/" + svc.Name)
		}
		c.ensured(ctx, svc, lbName, a)
	}
	if want.FloatingIP == nil {
		a.ingress = want.IngressIPs(vip)
		return a, nil
	}
	fip, calls, err := c.neutron.Apply(ctx, lbName, vip.VIPPortID, want.FloatingIP)
	if err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "floating IP of load balancer %s: %v", lbName, err)
		return applied{}, err
	}
	if calls > 0 {
		c.recorder.Eventf(svc, corev1.EventTypeNormal, "EnsuredFloatingIP", "floating IP %s on the VIP port of load balancer %s (%d API calls)", fip, lbName, calls)
	}
	a.ingress = []string{fip}
	return a, nil
}

// ensured says on the Service that its load balancer is ACTIVE, when the
// reconcile changed it: on a LoadBalancer Service (normalEvents).
func (c *Controller) ensured(ctx context.Context, svc *corev1.Service, lbName string, a applied) {
	if a.calls == 0 {
		return
	}
	if c.normalEvents(svc) {
		c.recorder.Eventf(svc, corev1.EventTypeNormal, "EnsuredLoadBalancer", "load balancer %s ACTIVE (%d API calls)", lbName, a.calls)
	}
	c.warnUnappliedTimeouts(ctx, svc, a.want)
}

// normalEvents says whether svc is told of its load balancer's progress
// (made, deleted), and not only of what went wrong: a Service whose
// external address is this controller's, as a cloud provider's service
// controller tells it. A ClusterIP or NodePort Service is what kube-proxy
// serves without a word, and each event is one more write to the
// Kubernetes API and its etcd: with 1,000 Services created at once, as
// many writes again as the Services' own.
func (c *Controller) normalEvents(svc *corev1.Service) bool {
	return kubelb.OwnsExternal(svc, c.opts)
}

// setIngressOf writes the Service's external addresses when it has them
// from flowlb: a floating IP, or external VIPs; new ones once the ingress
// gate lets them through (gate).
func (c *Controller) setIngressOf(ctx context.Context, svc *corev1.Service, want *kubelb.LB, lbID string, ingress []string) error {
	if want.FloatingIP == nil && !want.External {
		return nil
	}
	if len(ingress) > 0 && c.opts.AnnounceWait > 0 && !sameIngress(svc.Status.LoadBalancer.Ingress, ingressOf(ingress)) {
		if err := c.gate(ctx, svc, lbID, ingress); err != nil {
			return err
		}
	}
	return c.setIngress(ctx, svc, ingress)
}

// gate holds a Service's new external addresses until a node announces
// one of them (kubelb.IngressGate), so that what the status names is
// routed to the cluster: awaitingAnnouncement while it holds them. Each
// wait and its end are told in an event.
func (c *Controller) gate(ctx context.Context, svc *corev1.Service, lbID string, ingress []string) error {
	key := svc.Namespace + "/" + svc.Name
	a, err := c.octavia.Announced(ctx, lbID)
	if err != nil {
		return err
	}
	now := c.now()
	c.mu.Lock()
	since, held := c.gated[key]
	if !held {
		since = now
		c.gated[key] = since
	}
	c.mu.Unlock()
	waited := now.Sub(since)
	g := kubelb.IngressGate(a, ingress, waited, c.opts.AnnounceWait)
	if !g.Publish {
		if !held {
			c.recorder.Eventf(svc, corev1.EventTypeNormal, "AwaitingAnnouncement", "%s: %s", strings.Join(ingress, ", "), g.Why)
		}
		return awaitingAnnouncement(min(max(waited/2, 250*time.Millisecond), 5*time.Second))
	}
	c.mu.Lock()
	delete(c.gated, key)
	c.mu.Unlock()
	switch {
	case g.Warn:
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "NotAnnounced", "%s written to the status: %s", strings.Join(ingress, ", "), g.Why)
	case held:
		c.recorder.Eventf(svc, corev1.EventTypeNormal, "Announced", "%s after %s", g.Why, waited.Round(time.Millisecond))
	}
	return nil
}

// awaitingAnnouncement: a Service's external address waits for a node
// to announce it; it is looked at again after this long.
type awaitingAnnouncement time.Duration

func (w awaitingAnnouncement) result() string       { return "awaiting_announcement" }
func (w awaitingAnnouncement) after() time.Duration { return time.Duration(w) }

func (w awaitingAnnouncement) Error() string {
	return fmt.Sprintf("no node announces the external address yet, looking again in %s", time.Duration(w))
}

// appliedTTL is how long a Service's last successful reconcile is trusted
// when its load balancer's updated_at is not known (see trusted): within
// it, a reconcile that wants the same reads nothing from the API. Every
// reconcile that sees its load balancer ACTIVE knows it, so this is the
// exception; with it, the audit (not a timer per Service) finds what was
// changed behind the controller's back.
const appliedTTL = 5 * time.Minute

// applied is what the last successful reconcile of a Service made the API
// hold, the external address it wrote, and when; or, while pending names
// its load balancer, what the reconcile under way applied (after calls
// API calls) and waits to see ACTIVE. loaded is when the load balancer
// was last read (or created) in full: within appliedTTL of it, a
// reconcile that wants the same reads nothing, and one that wants other
// members sends them alone, to lbID's pools (kubelb.Result.Pools).
type applied struct {
	want    *kubelb.LB
	ingress []string
	at      time.Time
	loaded  time.Time
	lbID    string
	pools   map[string]string
	pending string
	calls   int
	// The pending change's status reads, on the real clock whatever c.now
	// is (they are scheduled): when the change was sent, how many reads
	// were made, the last at checked, and when the next is due.
	sent, checked, due time.Time
	checks             int
	// stamp is the load balancer's updated_at when it was last seen
	// ACTIVE holding want, at stampedAt (real clock): the audit and the
	// read before a batch member update compare it with the API's.
	stamp     string
	stampedAt time.Time
}

// last is what the last reconcile of key applied, if it succeeded or
// awaits ACTIVE.
func (c *Controller) last(key string) (applied, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.applied[key]
	return a, ok
}

// remember keeps a as what key's reconcile applied now (and read in full
// now, unless a says when), with the first read of its pending change
// due, if any.
func (c *Controller) remember(key string, a applied) {
	a.at = c.now()
	if a.loaded.IsZero() {
		a.loaded = a.at
	}
	if a.stamp != "" && a.stampedAt.IsZero() {
		a.stampedAt = time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.pending != "" {
		a.sent = time.Now()
		a.due = a.sent.Add(c.settle.after(0))
	}
	c.applied[key] = a
}

// keep stores a for key as it is (its time too).
func (c *Controller) keep(key string, a applied) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applied[key] = a
}

func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.applied, key)
	delete(c.born, key)
	delete(c.gated, key)
}

// defaultSliceGrace is how long a new Service with a selector waits for
// its EndpointSlice. Kubernetes' EndpointSlice controller makes one for
// every such Service (without endpoints if no pod is ready) within
// milliseconds to a few hundred when Services arrive in bulk; a Service
// applied before it came cost a second change, the batch member update,
// with the reads before it and the agents programming twice (a third of
// the Services when 1,000 were made at once).
const defaultSliceGrace = time.Second

// created notes when a Service created since the start was first seen.
func (c *Controller) created(o any) {
	key, err := cache.MetaNamespaceKeyFunc(o)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.born[key] = c.now()
}

// sliceWait is how long the Service key, with its EndpointSlices eps,
// waits for its first EndpointSlice before it is applied (0: not at
// all); see sliceWaitLeft.
func (c *Controller) sliceWait(key string, svc *corev1.Service, eps []*discoveryv1.EndpointSlice) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	born, ok := c.born[key]
	wait := sliceWaitLeft(svc, len(eps), born, ok, c.now(), c.sliceGrace)
	if wait == 0 {
		delete(c.born, key) // waits once: the slice came, or the grace ended
	}
	return wait
}

// sliceWaitLeft is how much of grace a Service first seen at born (new:
// created since the controller started) still waits for its first
// EndpointSlice, with slices of them: only a new Service with a selector,
// whose slices Kubernetes makes. A Service without one (its slices, if
// any, are made by hand) and the Services of the initial list (their
// slices are in the same cache) are applied at once.
func sliceWaitLeft(svc *corev1.Service, slices int, born time.Time, isNew bool, now time.Time, grace time.Duration) time.Duration {
	if !isNew || slices > 0 || len(svc.Spec.Selector) == 0 {
		return 0
	}
	return max(born.Add(grace).Sub(now), 0)
}

// apply makes Octavia hold want. A load balancer that had a floating IP
// and is to have none (the Service opted out or stopped being a
// LoadBalancer) first has its floating IPs released: the tag that says it
// had them goes with the change.
//
// One absent (the caller knows of none) is created without a list by
// name first once the API has said it refuses a create whose name is in
// use (kubelb.ErrNameTaken): a Service made now costs one call, not two.
// Refused, the name is someone's (another controller's, or a create whose
// answer was lost), and is read as for any Service.
func (c *Controller) apply(ctx context.Context, svc *corev1.Service, want *kubelb.LB, absent bool) (kubelb.Result, int, error) {
	if absent && c.namesChecked.Load() {
		vip, calls, err := c.octavia.Sync(ctx, &kubelb.Actual{}, want)
		if !errors.Is(err, kubelb.ErrNameTaken) {
			return vip, calls, err
		}
		c.log.Info("the name of a new Service's load balancer is taken; reading it", "loadbalancer", want.Name)
	}
	vip, calls, err := c.load(ctx, svc, want)
	if vip.NameChecked {
		c.namesChecked.Store(true)
	}
	return vip, calls, err
}

// load is apply for a load balancer that may exist: found by name first.
func (c *Controller) load(ctx context.Context, svc *corev1.Service, want *kubelb.LB) (kubelb.Result, int, error) {
	actual, err := c.octavia.Load(ctx, want)
	if err != nil {
		return kubelb.Result{}, 0, err
	}
	if actual.LB != nil && !kubelb.Ours(actual.LB, c.opts.Cluster) {
		// Retried with backoff: the name is free once the other goes.
		return kubelb.Result{}, 0, fmt.Errorf("load balancer %s (%s) has the name this controller gives the Service's own but not its tag %s%s: "+
			"another controller's (cloud-provider-openstack with the same --cluster-name?), left alone", want.Name, actual.LB.ID, kubelb.TagCluster, c.opts.Cluster)
	}
	if actual.LB != nil && want.FloatingIP == nil {
		n, err := c.releaseFloatingIPs(ctx, actual.LB)
		if err != nil {
			return kubelb.Result{}, 0, err
		}
		if n > 0 {
			c.recorder.Eventf(svc, corev1.EventTypeNormal, "ReleasedFloatingIP", "released the floating IP of load balancer %s (%d API calls)", want.Name, n)
		}
	}
	return c.octavia.Sync(ctx, actual, want)
}

// releaseFloatingIPs deletes the floating IPs the controller created for
// lb and disassociates the others from its VIP port, if it has had any.
func (c *Controller) releaseFloatingIPs(ctx context.Context, lb *kubelb.ActualLB) (int, error) {
	if !slices.Contains(lb.Tags, kubelb.TagFloatingIP) {
		return 0, nil
	}
	_, n, err := c.neutron.Apply(ctx, lb.Name, lb.VIPPortID, nil)
	if err != nil {
		return n, fmt.Errorf("release the floating IPs of load balancer %s: %w", lb.ID, err)
	}
	return n, nil
}

// warnUnappliedTimeouts says, on the Service, that the timeouts its
// annotations set are stored but not applied when the load balancer is
// flowlb's flow provider's: a NAT data plane has no client or member
// connection of its own to time out.
func (c *Controller) warnUnappliedTimeouts(ctx context.Context, svc *corev1.Service, want *kubelb.LB) {
	if !slices.ContainsFunc(want.Listeners, func(l kubelb.Listener) bool { return l.Timeouts != kubelb.DefaultTimeouts }) {
		return
	}
	cur, err := c.octavia.Find(ctx, want.Name)
	if err != nil || cur == nil || cur.Provider != flows.ProviderName {
		return
	}
	c.recorder.Eventf(svc, corev1.EventTypeWarning, "TimeoutsNotApplied",
		"load balancer %s: the timeout annotations are set on its listeners, but the %q provider forwards with NAT and applies none of them", want.Name, flows.ProviderName)
}

func (c *Controller) deleteLB(ctx context.Context, name string) error {
	cur, err := c.octavia.Find(ctx, name)
	if err != nil || cur == nil {
		return err
	}
	if !kubelb.Ours(cur, c.opts.Cluster) {
		c.log.Warn("not deleting a load balancer of this controller's name that it did not make", "loadbalancer", cur.ID, "name", name)
		return nil
	}
	if _, err := c.releaseFloatingIPs(ctx, cur); err != nil {
		return err
	}
	return c.octavia.Delete(ctx, cur.ID)
}

func (c *Controller) setFinalizer(ctx context.Context, svc *corev1.Service, on bool) error {
	has := slices.Contains(svc.Finalizers, Finalizer)
	if has == on {
		return nil
	}
	cp := svc.DeepCopy()
	if on {
		cp.Finalizers = append(cp.Finalizers, Finalizer)
	} else {
		cp.Finalizers = slices.DeleteFunc(cp.Finalizers, func(f string) bool { return f == Finalizer })
	}
	_, err := c.client.CoreV1().Services(cp.Namespace).Update(ctx, cp, metav1UpdateOptions)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// setIngress writes the load balancer's addresses (one per IP family) to
// the Service's status (none clears it).
func (c *Controller) setIngress(ctx context.Context, svc *corev1.Service, ips []string) error {
	want := ingressOf(ips)
	if sameIngress(svc.Status.LoadBalancer.Ingress, want) {
		return nil
	}
	cp := svc.DeepCopy()
	cp.Status.LoadBalancer.Ingress = want
	_, err := c.client.CoreV1().Services(cp.Namespace).UpdateStatus(ctx, cp, metav1UpdateOptions)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ingressOf is the status of a Service reached at ips.
func ingressOf(ips []string) []corev1.LoadBalancerIngress {
	var out []corev1.LoadBalancerIngress
	for _, ip := range ips {
		mode := corev1.LoadBalancerIPModeVIP
		out = append(out, corev1.LoadBalancerIngress{IP: ip, IPMode: &mode})
	}
	return out
}

// sameIngress reports whether a Service's status, has, is want.
func sameIngress(has, want []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(has, want, func(a, b corev1.LoadBalancerIngress) bool {
		return a.IP == b.IP && a.IPMode != nil && *a.IPMode == *b.IPMode && a.Hostname == "" && len(a.Ports) == 0
	})
}

var metav1UpdateOptions = metav1.UpdateOptions{FieldManager: "flowlb-kube-controller"}
