package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/flowlb/flowlb/internal/testutil"
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
