package kubecontroller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// testClock is a controller's c.now that a test moves.
type testClock struct{ ns atomic.Int64 }

func newClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *testClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *testClock) add(d time.Duration) { c.ns.Add(int64(d)) }

func TestAppliedAnnotation(t *testing.T) {
	want := &kubelb.LB{Name: "kube_service_lab_default_web", Listeners: []kubelb.Listener{{Name: "80", Protocol: "TCP", Port: 80}}}
	other := &kubelb.LB{Name: "kube_service_lab_default_web", Listeners: []kubelb.Listener{{Name: "81", Protocol: "TCP", Port: 81}}}
	v := appliedValue(want, "lb-1", "2026-11-29T11:00:00.123456")
	dig, id, stamp, ok := parseApplied(v)
	if !ok || dig != digest(want) || id != "lb-1" || stamp != "2026-11-29T11:00:00.123456" {
		t.Fatalf("parse(%q) = %q %q %q %v", v, dig, id, stamp, ok)
	}
	if digest(want) == digest(other) {
		t.Error("two desired load balancers with one digest")
	}
	for _, bad := range []string{"", "v1", "v2 a b c", "v1 a b", "v1 a b c d"} {
		if _, _, _, ok := parseApplied(bad); ok {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

func TestUnchanged(t *testing.T) {
	lb := &kubelb.ActualLB{ID: "lb-1", UpdatedAt: "t1", ProvisioningStatus: "ACTIVE"}
	for _, c := range []struct {
		name      string
		lb        *kubelb.ActualLB
		id, stamp string
		want      bool
	}{
		{"as seen", lb, "lb-1", "t1", true},
		{"gone", nil, "lb-1", "t1", false},
		{"replaced", lb, "lb-0", "t1", false},
		{"changed since", lb, "lb-1", "t0", false},
		{"no stamp known", lb, "lb-1", "", false},
		{"a change under way", &kubelb.ActualLB{ID: "lb-1", UpdatedAt: "t1", ProvisioningStatus: "PENDING_UPDATE"}, "lb-1", "t1", false},
	} {
		if got := unchanged(c.lb, c.id, c.stamp); got != c.want {
			t.Errorf("%s: unchanged = %v, want %v", c.name, got, c.want)
		}
	}
}

// counter is a front of the API that counts the calls by method and
// path (with the query).
type counter struct {
	*httptest.Server
	mu    sync.Mutex
	calls []string
}

func newCounter(t *testing.T, api *apitest.API) *counter {
	target, _ := url.Parse(api.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	c := &counter{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.calls = append(c.calls, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(c.Close)
	return c
}

// since returns the calls made from now on, when called.
func (c *counter) since() func() []string {
	c.mu.Lock()
	from := len(c.calls)
	c.mu.Unlock()
	return func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return append([]string(nil), c.calls[from:]...)
	}
}

// notLists are the calls of calls other than lists of this cluster's
// load balancers.
func notLists(calls []string) []string {
	var out []string
	for _, c := range calls {
		if !strings.HasPrefix(c, "GET /v2.0/lbaas/loadbalancers?") || !strings.Contains(c, "tags=") {
			out = append(out, c)
		}
	}
	return out
}

// countedController is a controller of cluster "lab" over client, on a
// fresh API whose calls it makes through a counting front; its audits run
// only when the test runs them.
func countedController(t *testing.T, client *fake.Clientset) (*Controller, *counter, *harness) {
	api := apitest.New(t)
	front := newCounter(t, api)
	o := &kubelb.Octavia{Client: apitest.NoAuthClient(front.URL), Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.auditEvery = 1 << 40
	return c, front, &harness{t: t, api: api, o: &kubelb.Octavia{Client: api.Client}, client: client}
}

// pool is the one pool of name's load balancer, as the API has it.
func (h *harness) pool(name string) (id, algorithm string) {
	h.t.Helper()
	lb, err := h.o.Find(context.Background(), kubelb.Name("lab", "default", name))
	if err != nil || lb == nil {
		h.t.Fatalf("find %s: %v %v", name, lb, err)
	}
	var out struct {
		Pools []struct {
			ID        string `json:"id"`
			Algorithm string `json:"lb_algorithm"`
		} `json:"pools"`
	}
	if _, err := h.api.Client.Get(context.Background(), h.api.Client.ServiceURL("lbaas", "pools")+"?loadbalancer_id="+lb.ID, &out, nil); err != nil {
		h.t.Fatal(err)
	}
	if len(out.Pools) != 1 {
		h.t.Fatalf("pools of %s: %+v", name, out.Pools)
	}
	return out.Pools[0].ID, out.Pools[0].Algorithm
}

// changeBehindBack sets the algorithm of name's pool through the API, as
// someone other than the controller would, and waits until it is ACTIVE.
func (h *harness) changeBehindBack(name, algorithm string) {
	h.t.Helper()
	id, _ := h.pool(name)
	body := map[string]any{"pool": map[string]any{"lb_algorithm": algorithm}}
	if _, err := h.api.Client.Put(context.Background(), h.api.Client.ServiceURL("lbaas", "pools", id), body, nil, &gophercloud.RequestOpts{OkCodes: []int{200, 202}}); err != nil {
		h.t.Fatal(err)
	}
	testutil.Eventually(h.t, within, name+"'s pool changed", func() (bool, string) {
		_, a := h.pool(name)
		lb, err := h.o.Find(context.Background(), kubelb.Name("lab", "default", name))
		return err == nil && a == algorithm && lb.ProvisioningStatus == "ACTIVE", a
	})
}

// algorithm is a condition on name's pool's algorithm.
func (h *harness) algorithm(name, want string) func() (bool, string) {
	return func() (bool, string) {
		_, a := h.pool(name)
		return a == want, a
	}
}

// TestResyncReadsNothing: a Service queued again with nothing changed
// (its own updates, the informers' resync) costs no API call, however
// long after the last full read; what was changed behind the
// controller's back is found by the audit's list and repaired, and by
// the read before a batch member update, which would otherwise stamp
// over it.
func TestResyncReadsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset(svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10"), epSlice("web", "198.18.17.2", "198.18.18.2"))
	c, front, h := countedController(t, client)
	clock := newClock()
	c.now = clock.now
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	testutil.Eventually(t, within, "web's LB with its two pods", h.memberCount("web", 2))
	reconciled := func() float64 { return promtest.ToFloat64(c.m.reconciles.WithLabelValues("ok")) }
	testutil.Eventually(t, within, "web's reconcile done", func() (bool, string) { return reconciled() >= 1, fmt.Sprint(reconciled()) })
	// resync queues web as the informers' resync does, and waits until
	// it was reconciled.
	resync := func() {
		t.Helper()
		before := reconciled()
		s, err := c.services.Services("default").Get("web")
		if err != nil {
			t.Fatal(err)
		}
		c.enqueue(s)
		testutil.Eventually(t, within, "web reconciled again", func() (bool, string) { return reconciled() > before, fmt.Sprint(reconciled()) })
	}

	calls := front.since()
	resync()
	clock.add(appliedTTL + defaultAuditEvery) // what read everything before
	resync()
	if n := calls(); len(n) != 0 {
		t.Errorf("a resync of an unchanged Service cost %d API calls: %q", len(n), n)
	}

	// Changed behind the controller's back: a resync still reads
	// nothing; the audit's list finds it, and the Service is repaired.
	h.changeBehindBack("web", "SOURCE_IP")
	calls = front.since()
	resync()
	if n := calls(); len(n) != 0 {
		t.Errorf("a resync cost %d API calls: %q", len(n), n)
	}
	if err := c.audit(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web's pool repaired", h.algorithm("web", "ROUND_ROBIN"))
	if n := promtest.ToFloat64(c.m.drifted); n != 1 {
		t.Errorf("drifted %v, want 1", n)
	}
	// Once repaired and seen ACTIVE, the next audit finds nothing.
	testutil.Eventually(t, within, "the repair seen ACTIVE", func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		a, ok := c.applied["default/web"]
		return ok && a.pending == "" && a.stamp != "", fmt.Sprintf("%+v", a.stamp)
	})
	calls = front.since()
	if err := c.audit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := notLists(calls()); len(n) != 0 || promtest.ToFloat64(c.m.drifted) != 1 {
		t.Errorf("an audit of an unchanged load balancer: calls %q, drifted %v", n, promtest.ToFloat64(c.m.drifted))
	}

	// Changed behind its back, then an endpoint change before any
	// audit: the read before the batch finds it, and the whole load
	// balancer is repaired (the batch alone would leave the pool as it
	// is, and stamp over the change so that no audit finds it).
	h.changeBehindBack("web", "SOURCE_IP")
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, epSlice("web", "198.18.17.2", "198.18.18.2", "198.18.19.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "three members", h.memberCount("web", 3))
	testutil.Eventually(t, within, "web's pool repaired", h.algorithm("web", "ROUND_ROBIN"))

	// Deleted behind its back: made again after the audit.
	lb, err := h.o.Find(ctx, kubelb.Name("lab", "default", "web"))
	if err != nil || lb == nil {
		t.Fatalf("find: %v %v", lb, err)
	}
	testutil.Eventually(t, within, "web ACTIVE", func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		a := c.applied["default/web"]
		return a.pending == "" && a.stamp != "", a.pending
	})
	if err := h.o.Delete(ctx, lb.ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web's LB gone", h.lbGone("web"))
	calls = front.since()
	resync()
	if n := calls(); len(n) != 0 {
		t.Errorf("a resync cost %d API calls: %q", len(n), n)
	}
	if err := c.audit(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web's LB made again", h.memberCount("web", 3))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRestartReadsNothing: a controller started again over Services that
// did not change lists the load balancers once and makes no other call,
// nor any Kubernetes write; a Service changed while it was down is
// applied, and a load balancer changed behind its back is found by the
// audit and repaired.
func TestRestartReadsNothing(t *testing.T) {
	api := apitest.New(t)
	front := newCounter(t, api)
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	const n = 6
	client := fake.NewClientset()
	for i := range n {
		name := fmt.Sprintf("web%d", i)
		if _, err := client.CoreV1().Services("default").Create(t.Context(), svc(name, corev1.ServiceTypeClusterIP, fmt.Sprintf("198.19.64.%d", 10+i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.DiscoveryV1().EndpointSlices("default").Create(t.Context(), epSlice(name, "198.18.17.2", "198.18.18.2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, api: api, o: &kubelb.Octavia{Client: api.Client}, client: client}
	start := func() (*Controller, context.CancelFunc, chan error) {
		o := &kubelb.Octavia{Client: apitest.NoAuthClient(front.URL), Poll: 5 * time.Millisecond}
		c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		c.auditEvery = 1 << 40
		c.recordDelay = 0
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx, 2) }()
		return c, cancel, done
	}
	stop := func(cancel context.CancelFunc, done chan error) {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	annotated := func() (bool, string) {
		list, err := client.CoreV1().Services("default").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		k := 0
		for _, s := range list.Items {
			if _, _, _, ok := parseApplied(s.Annotations[AnnApplied]); ok {
				k++
			}
		}
		return k == n, fmt.Sprintf("%d of %d annotated", k, n)
	}
	c, cancel, done := start()
	for i := range n {
		testutil.Eventually(t, within, "web's LB", h.memberCount(fmt.Sprintf("web%d", i), 2))
	}
	testutil.Eventually(t, within, "every Service annotated", annotated)
	_ = c
	stop(cancel, done)

	// While no controller runs: web0's endpoints change.
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(t.Context(), epSlice("web0", "198.18.17.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	calls := front.since()
	writes := len(client.Actions())
	c, cancel, done = start()
	defer stop(cancel, done)
	testutil.Eventually(t, within, "web0's change applied", h.memberCount("web0", 1))
	reconciled := func() float64 { return promtest.ToFloat64(c.m.reconciles.WithLabelValues("ok")) }
	testutil.Eventually(t, within, "every Service reconciled", func() (bool, string) { return reconciled() >= n, fmt.Sprint(reconciled()) })
	testutil.Eventually(t, within, "web0 annotated anew", annotated)
	var others []string
	for _, call := range notLists(calls()) {
		// web0's: the full read and the batch, then its status.
		lb0, _ := h.o.Find(t.Context(), kubelb.Name("lab", "default", "web0"))
		id0, _ := h.pool("web0")
		if strings.Contains(call, "web0") || strings.Contains(call, lb0.ID) || strings.Contains(call, id0) {
			continue
		}
		others = append(others, call)
	}
	if len(others) != 0 {
		t.Errorf("a restart over %d unchanged Services cost %d calls beside the list: %q", n-1, len(others), others)
	}
	var svcWrites []string
	for _, a := range client.Actions()[writes:] {
		if a.GetVerb() == "update" && a.GetResource().Resource == "services" {
			if u, ok := a.(k8stesting.UpdateAction); ok {
				if s, ok := u.GetObject().(*corev1.Service); ok && s.Name == "web0" {
					continue // its annotation, anew
				}
			}
			svcWrites = append(svcWrites, fmt.Sprint(a))
		}
	}
	if len(svcWrites) != 0 {
		t.Errorf("a restart wrote unchanged Services: %q", svcWrites)
	}

	// Changed behind the restarted controller's back: the audit repairs.
	h.changeBehindBack("web3", "SOURCE_IP")
	if err := c.audit(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web3's pool repaired", h.algorithm("web3", "ROUND_ROBIN"))
}

func TestOnlyRecorded(t *testing.T) {
	base := svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10")
	base.ResourceVersion = "1"
	with := func(f func(s *corev1.Service)) *corev1.Service {
		s := base.DeepCopy()
		s.ResourceVersion = "2"
		f(s)
		return s
	}
	recorded := func(s *corev1.Service) { s.Annotations = map[string]string{AnnApplied: "v1 d lb-1 t1"} }
	for _, c := range []struct {
		name     string
		old, cur *corev1.Service
		want     bool
	}{
		{"the annotation written", base, with(recorded), true},
		{"the annotation and a label", base, with(func(s *corev1.Service) { recorded(s); s.Labels = map[string]string{"a": "b"} }), false},
		{"the annotation and the spec", base, with(func(s *corev1.Service) { recorded(s); s.Spec.Ports[0].Port = 81 }), false},
		{"a label alone", base, with(func(s *corev1.Service) { s.Labels = map[string]string{"a": "b"} }), false},
		{"a resync: the same object", base, base, false},
	} {
		if got := onlyRecorded(c.old, c.cur); got != c.want {
			t.Errorf("%s: onlyRecorded = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRecordWaitsForDelay: the annotation is written by the first
// reconcile recordDelay after the change was seen ACTIVE, not sooner,
// and once.
func TestRecordWaitsForDelay(t *testing.T) {
	s := svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10")
	client := fake.NewClientset(s)
	c := New(client, &kubelb.Octavia{}, &kubelb.Neutron{}, kubelb.Options{Cluster: "lab"}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a := applied{want: &kubelb.LB{Name: "x"}, lbID: "lb-1", stamp: "t1", stampedAt: time.Now()}
	updates := func() int {
		n := 0
		for _, act := range client.Actions() {
			if act.GetVerb() == "update" {
				n++
			}
		}
		return n
	}
	if err := c.record(t.Context(), s, a); err != nil || updates() != 0 {
		t.Fatalf("within recordDelay: %v, %d updates", err, updates())
	}
	a.stampedAt = time.Now().Add(-defaultRecordDelay)
	if err := c.record(t.Context(), s, a); err != nil || updates() != 1 {
		t.Fatalf("after recordDelay: %v, %d updates", err, updates())
	}
	got, err := client.CoreV1().Services("default").Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil || got.Annotations[AnnApplied] != appliedValue(a.want, "lb-1", "t1") {
		t.Fatalf("annotation %q (%v)", got.Annotations[AnnApplied], err)
	}
	if err := c.record(t.Context(), got, a); err != nil || updates() != 1 {
		t.Fatalf("written already: %v, %d updates", err, updates())
	}
}

// TestNewServiceIsOneCall: once the API has said it refuses a create
// whose name is in use, a Service made while the controller runs costs
// one call, its load balancer's create, and no list by name; a name that
// is taken (another controller's load balancer, or one of this cluster's
// whose create answer was lost) is refused and read as before: the
// other's left alone, this cluster's adopted, and no second load
// balancer of either name made.
func TestNewServiceIsOneCall(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset(svc("first", corev1.ServiceTypeClusterIP, "198.19.64.10"), epSlice("first", "198.18.17.2"))
	c, front, h := countedController(t, client)
	api := h.api
	c.sliceGrace = 0
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 1) }()
	testutil.Eventually(t, within, "first's LB", h.memberCount("first", 1))
	if !c.namesChecked.Load() {
		t.Fatal("the API's answer to the first create did not say it checks names")
	}
	byName := func(calls []string) (lists, creates int) {
		for _, call := range calls {
			switch {
			case strings.HasPrefix(call, "GET /v2.0/lbaas/loadbalancers?") && strings.Contains(call, "name="):
				lists++
			case strings.HasPrefix(call, "POST /v2.0/lbaas/loadbalancers?"):
				creates++
			}
		}
		return lists, creates
	}
	add := func(name, ip, pod string) {
		t.Helper()
		if _, err := client.CoreV1().Services("default").Create(ctx, svc(name, corev1.ServiceTypeClusterIP, ip), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, epSlice(name, pod), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(name string) int {
		t.Helper()
		var out struct {
			LBs []kubelb.ActualLB `json:"loadbalancers"`
		}
		if _, err := api.Client.Get(ctx, api.Client.ServiceURL("lbaas", "loadbalancers")+"?name="+kubelb.Name("lab", "default", name), &out, nil); err != nil {
			t.Fatal(err)
		}
		return len(out.LBs)
	}

	calls := front.since()
	add("second", "198.19.64.11", "198.18.17.3")
	testutil.Eventually(t, within, "second's LB", h.memberCount("second", 1))
	if lists, creates := byName(calls()); lists != 0 || creates != 1 {
		t.Errorf("a new Service: %d lists by name and %d creates, want 0 and 1: %q", lists, creates, calls())
	}

	// Another controller's load balancer of the name a Service's gets.
	foreign := api.Client.ServiceURL("lbaas", "loadbalancers")
	body := map[string]any{"loadbalancer": map[string]any{"name": kubelb.Name("lab", "default", "third"), "vip_subnet_id": api.ExternalSubnet}}
	if _, err := api.Client.Post(ctx, foreign, body, nil, nil); err != nil {
		t.Fatal(err)
	}
	// One of this cluster's, made before this Service was seen (as a
	// create whose answer was lost would leave it).
	body = map[string]any{"loadbalancer": map[string]any{"name": kubelb.Name("lab", "default", "fourth"), "vip_subnet_id": api.ClusterSubnet,
		"tags": []string{kubelb.TagCluster + "lab", kubelb.TagService + "default/fourth"}}}
	if _, err := api.Client.Post(ctx, foreign, body, nil, nil); err != nil {
		t.Fatal(err)
	}
	calls = front.since()
	add("third", "198.19.64.12", "198.18.17.4")
	add("fourth", "198.19.64.13", "198.18.17.5")
	testutil.Eventually(t, within, "third's warning", event(ctx, client, "third", "SyncLoadBalancerFailed", "left alone"))
	testutil.Eventually(t, within, "fourth's LB adopted with its pod", h.memberCount("fourth", 1))
	if lists, creates := byName(calls()); lists < 2 || creates < 2 {
		t.Errorf("taken names: %d lists by name and %d creates, want the refused creates and then a list each: %q", lists, creates, calls())
	}
	for _, n := range []string{"third", "fourth"} {
		if got := count(n); got != 1 {
			t.Errorf("%d load balancers named for %s, want 1", got, n)
		}
	}
	if got := h.members("third"); len(got) != 0 {
		t.Errorf("the other controller's load balancer was given members %v", got)
	}
}
