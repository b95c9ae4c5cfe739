package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The watch decides at the stop signal: deletion of the DaemonSet or its
// namespace is seen while the agent runs, and a DaemonSet created again
// is not doomed.
func TestDeletionWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "flowlb-system", Name: "flowlb-agent"}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flowlb-system"}}
	c := fake.NewClientset(ds, ns)
	// The fake misses what happens between a list and its watch: start
	// changing things once both watches are open.
	watching := make(chan struct{}, 8)
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
		watching <- struct{}{}
		return true, w, err
	})
	w := watchDeletion(ctx, c, "flowlb-system", "flowlb-agent")
	for range 2 {
		select {
		case <-watching:
		case <-time.After(5 * time.Second):
			t.Fatal("the watches did not start")
		}
	}
	wait := func(what string, want bool) {
		t.Helper()
		testutil.Eventually(t, 5*time.Second, what, func() (bool, string) {
			return w.doomed() == want, fmt.Sprintf("doomed %v", w.doomed())
		})
	}
	if w.doomed() {
		t.Fatal("doomed before anything was deleted")
	}
	if err := c.AppsV1().DaemonSets("flowlb-system").Delete(ctx, "flowlb-agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("DaemonSet deleted", true)
	if _, err := c.AppsV1().DaemonSets("flowlb-system").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("DaemonSet created again", false)
	now := metav1.Now()
	ns.DeletionTimestamp = &now
	if _, err := c.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("namespace being deleted", true)
}

func TestDaemonSetGone(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "flowlb-system", Name: "flowlb-agent"}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flowlb-system"}}
	now := metav1.Now()
	dying := ds.DeepCopy()
	dying.DeletionTimestamp = &now
	for _, tc := range []struct {
		name string
		objs []any
		want bool
	}{
		{"both there", []any{ds, ns}, false},
		{"DaemonSet gone", []any{ns}, true},
		{"DaemonSet being deleted", []any{dying, ns}, true},
		{"namespace gone", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			for _, o := range tc.objs {
				switch o := o.(type) {
				case *appsv1.DaemonSet:
					_ = c.Tracker().Add(o)
				case *corev1.Namespace:
					_ = c.Tracker().Add(o)
				}
			}
			got, err := daemonSetGone(c, "flowlb-system", "flowlb-agent")
			if err != nil || got != tc.want {
				t.Fatalf("daemonSetGone = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestReadNode: the agent reads its zone and pod networks from its Node
// (--zone-from-node, --pod-cidrs-from-node), the single podCIDR of an
// older Node too.
func TestReadNode(t *testing.T) {
	nodes := map[string]string{
		"n1": `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","labels":{"topology.kubernetes.io/zone":"zone-a"}},
			"spec":{"podCIDR":"198.18.17.0/24","podCIDRs":["198.18.17.0/24","2001:2:0:4001::/64"]}}`,
		"old": `{"kind":"Node","apiVersion":"v1","metadata":{"name":"old"},"spec":{"podCIDR":"198.18.18.0/24"}}`,
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := nodes[strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	defer api.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "+api.URL+"}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	got, err := readNode(t.Context(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got.zone != "zone-a" || !slices.Equal(got.podCIDRs, []string{"198.18.17.0/24", "2001:2:0:4001::/64"}) {
		t.Errorf("n1: %+v", got)
	}
	if got, err := readNode(t.Context(), "old"); err != nil || got.zone != "" || !slices.Equal(got.podCIDRs, []string{"198.18.18.0/24"}) {
		t.Errorf("old: %+v, %v", got, err)
	}
	if _, err := readNode(t.Context(), "gone"); err == nil || !strings.Contains(err.Error(), "read node gone") {
		t.Errorf("a missing node: %v", err)
	}
}
