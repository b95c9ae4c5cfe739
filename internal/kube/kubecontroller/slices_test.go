package kubecontroller

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestSliceService(t *testing.T) {
	other := epSlice("web", "198.18.17.2")
	other.Namespace = "other"
	unlabelled := epSlice("web")
	unlabelled.Labels = nil
	for _, c := range []struct {
		name string
		obj  any
		want string
	}{
		{"a Service's slice", epSlice("web", "198.18.17.2"), "default/web"},
		{"the same Service name in another namespace", other, "other/web"},
		{"a slice without the Service label (managed by hand)", unlabelled, ""},
		{"not a slice", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}, ""},
	} {
		if got := sliceService(c.obj); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSlicesOf: the index finds a Service's slices, and only its own:
// not another Service's, nor those of a Service of the same name in
// another namespace, nor slices without the Service label.
func TestSlicesOf(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byService: sliceServiceIndex})
	web6 := epSlice("web", "2001:2:0:17::2")
	web6.Name, web6.AddressType = "web-v6", discoveryv1.AddressTypeIPv6
	other := epSlice("web", "198.18.17.9")
	other.Namespace = "other"
	unlabelled := epSlice("web", "198.18.17.8")
	unlabelled.Name, unlabelled.Labels = "by-hand", nil
	for _, s := range []*discoveryv1.EndpointSlice{epSlice("web", "198.18.17.2"), web6, epSlice("api", "198.18.17.3"), other, unlabelled} {
		if err := idx.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	c := &Controller{slices: idx}
	for key, want := range map[string][]string{"default/web": {"web-abc", "web-v6"}, "default/api": {"api-abc"}, "other/web": {"web-abc"}, "default/none": {}} {
		got, err := c.slicesOf(key)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{}
		for _, s := range got {
			names = append(names, s.Namespace+"/"+s.Name)
		}
		slices.Sort(names)
		ns, _, _ := cache.SplitMetaNamespaceKey(key)
		wantNames := []string{}
		for _, n := range want {
			wantNames = append(wantNames, ns+"/"+n)
		}
		if !slices.Equal(names, wantNames) {
			t.Errorf("%s: %v, want %v", key, names, wantNames)
		}
	}
}

func TestSliceWaitLeft(t *testing.T) {
	born := time.Unix(1000, 0)
	selected := svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10")
	selected.Spec.Selector = map[string]string{"app": "web"}
	manual := svc("manual", corev1.ServiceTypeClusterIP, "198.19.64.11")
	for _, c := range []struct {
		name   string
		svc    *corev1.Service
		slices int
		isNew  bool
		now    time.Time
		want   time.Duration
	}{
		{"new, with a selector, no slice yet: waits the rest of the grace", selected, 0, true, born.Add(300 * time.Millisecond), 700 * time.Millisecond},
		{"the same, just seen", selected, 0, true, born, time.Second},
		{"the same, grace over", selected, 0, true, born.Add(time.Second), 0},
		{"the same, long after", selected, 0, true, born.Add(time.Hour), 0},
		{"its slice came", selected, 1, true, born.Add(300 * time.Millisecond), 0},
		{"from the initial list: its slices are in the cache already", selected, 0, false, born, 0},
		{"no selector: slices made by hand, if any", manual, 0, true, born, 0},
	} {
		if got := sliceWaitLeft(c.svc, c.slices, born, c.isNew, c.now, time.Second); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
