package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// zoneLabel is the well-known label of a Node's topology zone.
const zoneLabel = "topology.kubernetes.io/zone"

// nodeFacts are what the agent reads of its Node: its zone label and its
// pod networks.
type nodeFacts struct {
	zone     string
	podCIDRs []string
}

// readNode reads node's Node through the Kubernetes API ($KUBECONFIG,
// else in-cluster config). The downward API cannot give a pod its node's
// labels or pod networks, hence the one read at start (neither changes
// for a node).
func readNode(ctx context.Context, node string) (*nodeFacts, error) {
	c, err := kubeClient()
	if err != nil {
		return nil, fmt.Errorf("read node %s: kubeconfig: %w", node, err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", node, err)
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	return &nodeFacts{zone: n.Labels[zoneLabel], podCIDRs: cidrs}, nil
}

// kubeClient is a client of the Kubernetes API from $KUBECONFIG, else the
// in-cluster config.
func kubeClient() (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "flowlb-agent"
	return kubernetes.NewForConfig(rc)
}

// splitRef splits a --remove-on-delete NAMESPACE/NAME.
func splitRef(ref string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return "", "", fmt.Errorf("--remove-on-delete %q: want NAMESPACE/NAME", ref)
	}
	return ns, name, nil
}

// deletionWatch follows the agent's DaemonSet and its namespace while the
// agent runs, so that at the stop signal it knows whether it is being
// uninstalled without asking: by then `kubectl delete -k` may already have
// removed the agent's RBAC, and a question would be refused.
type deletionWatch struct {
	daemonSet, namespace atomic.Bool
}

// doomed reports whether the DaemonSet or its namespace was seen deleted
// or being deleted (and not created again since).
func (w *deletionWatch) doomed() bool { return w.daemonSet.Load() || w.namespace.Load() }

// watchDeletion starts following NAMESPACE/NAME until ctx ends.
func watchDeletion(ctx context.Context, c kubernetes.Interface, ns, name string) *deletionWatch {
	w := &deletionWatch{}
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	dsLW := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			byName(&o)
			return c.AppsV1().DaemonSets(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			byName(&o)
			return c.AppsV1().DaemonSets(ns).Watch(ctx, o)
		},
	}
	nsByName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ns).String()
	}
	nsLW := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			nsByName(&o)
			return c.CoreV1().Namespaces().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			nsByName(&o)
			return c.CoreV1().Namespaces().Watch(ctx, o)
		},
	}
	follow := func(lw cache.ListerWatcher, obj runtime.Object, flag *atomic.Bool) {
		set := func(o any) {
			if m, err := meta.Accessor(o); err == nil {
				flag.Store(m.GetDeletionTimestamp() != nil)
			}
		}
		inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    set,
			UpdateFunc: func(_, o any) { set(o) },
			DeleteFunc: func(any) { flag.Store(true) },
		})
		go inf.RunWithContext(ctx)
	}
	follow(dsLW, &appsv1.DaemonSet{}, &w.daemonSet)
	follow(nsLW, &corev1.Namespace{}, &w.namespace)
	return w
}

// daemonSetGone asks whether the DaemonSet ns/name, or its namespace, is
// gone or being deleted: the fallback when the watch saw nothing (it may
// not have started). Asked with its own short deadline, as the agent's
// context has ended.
func daemonSetGone(c kubernetes.Interface, ns, name string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Deleting the namespace may stop the pods before it deletes the
	// DaemonSet: a namespace on its way out counts as well.
	nsObj, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && nsObj.DeletionTimestamp != nil) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	ds, err := c.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return ds.DeletionTimestamp != nil, nil
}
