package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// zoneLabel is the well-known label of a Node's topology zone.
const zoneLabel = "topology.kubernetes.io/zone"

// nodeZone reads node's zone label through the Kubernetes API ($KUBECONFIG,
// else in-cluster config). The downward API cannot give a pod its node's
// labels, hence the one read at start (zones of nodes do not change).
func nodeZone(ctx context.Context, node string) (string, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return "", fmt.Errorf("--zone-from-node: kubeconfig: %w", err)
	}
	rc.UserAgent = "flowlb-agent"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return "", err
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("--zone-from-node: %w", err)
	}
	return n.Labels[zoneLabel], nil
}

// daemonSetGone reports whether the DaemonSet ref (NAMESPACE/NAME), or
// its namespace, is gone or being deleted: the agent's pod is then stopped for good, not
// updated or restarted. Asked with its own short deadline, as the agent's
// context has ended.
func daemonSetGone(ref string) (bool, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return false, fmt.Errorf("--remove-on-delete %q: want NAMESPACE/NAME", ref)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return false, err
	}
	rc.UserAgent = "flowlb-agent"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return false, err
	}
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

// readyz serves ready: 200 "ok" when it returns nil, else 503 with the
// reason.
func readyz(ready func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
