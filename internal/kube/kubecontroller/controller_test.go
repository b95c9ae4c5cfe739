package kubecontroller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func svc(name string, typ corev1.ServiceType, ip string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.ServiceSpec{Type: typ, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
}

func epSlice(service string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: service + "-abc",
		Labels: map[string]string{discoveryv1.LabelServiceName: service}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr.To("n1"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// event is the condition that Service name has an event of reason whose
// message contains text.
func event(ctx context.Context, client *fake.Clientset, name, reason, text string) func() (bool, string) {
	return func() (bool, string) {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name != name {
				continue
			}
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("events of %s: %q", name, seen)
	}
}

type harness struct {
	t      *testing.T
	api    *apitest.API
	o      *kubelb.Octavia
	client *fake.Clientset
}

// members returns the member addresses of the LB of Service name, or nil
// if it has no LB.
func (h *harness) members(name string) []string {
	h.t.Helper()
	lb, err := h.o.Find(context.Background(), kubelb.Name("lab", "default", name))
	if err != nil {
		h.t.Fatal(err)
	}
	if lb == nil {
		return nil
	}
	var st struct {
		Statuses struct {
			LB struct {
				Listeners []struct {
					Pools []struct {
						Members []struct {
							Address string `json:"address"`
						} `json:"members"`
					} `json:"pools"`
				} `json:"listeners"`
			} `json:"loadbalancer"`
		} `json:"statuses"`
	}
	_, err = h.api.Client.Get(context.Background(), h.api.Client.ServiceURL("lbaas", "loadbalancers", lb.ID, "status"), &st, nil)
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return nil // deleted since
	}
	if err != nil {
		h.t.Fatal(err)
	}
	out := []string{}
	for _, l := range st.Statuses.LB.Listeners {
		for _, p := range l.Pools {
			for _, m := range p.Members {
				out = append(out, m.Address)
			}
		}
	}
	return out
}

// within is how long the controller may take to reach what a test waits
// for.
const within = 10 * time.Second

// memberCount is a condition on the number of members of name's LB.
func (h *harness) memberCount(name string, want int) func() (bool, string) {
	return func() (bool, string) {
		got := h.members(name)
		return len(got) == want, fmt.Sprintf("members %v", got)
	}
}

// lbGone is the condition that name has no LB.
func (h *harness) lbGone(name string) func() (bool, string) {
	return func() (bool, string) {
		got := h.members(name)
		return got == nil, fmt.Sprintf("members %v", got)
	}
}

func TestController(t *testing.T) {
	api := apitest.New(t)
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// A load balancer left behind by a Service deleted while no
	// controller ran.
	stale, err := kubelb.Desired(svc("gone", corev1.ServiceTypeClusterIP, "198.19.64.99"), nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.Apply(ctx, stale); err != nil {
		t.Fatal(err)
	}
	// And one of a Service made headless meanwhile.
	headless := svc("headless", corev1.ServiceTypeClusterIP, "198.19.64.98")
	if stale, err := kubelb.Desired(headless, nil, opts); err != nil {
		t.Fatal(err)
	} else if _, _, err := o.Apply(ctx, stale); err != nil {
		t.Fatal(err)
	}
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	old := svc("old", corev1.ServiceTypeNodePort, "198.19.64.97")
	old.Spec.Ports[0].NodePort = 30097
	old.Finalizers = []string{Finalizer}
	client := fake.NewClientset(svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10"), epSlice("web", "198.18.17.2", "198.18.18.2"), headless, old,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}})
	h := &harness{t: t, api: api, o: o, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	testutil.Eventually(t, within, "web's LB with its two pods", h.memberCount("web", 2))
	testutil.Eventually(t, within, "the stale LB collected", h.lbGone("gone"))
	testutil.Eventually(t, within, "the headless Service's LB collected", h.lbGone("headless"))
	if h.members("ext") != nil {
		t.Error("an ExternalName Service got a load balancer")
	}
	// A ClusterIP Service gets no finalizer (kube-proxy puts none: its
	// delete is not held up), and one an older version put there is taken
	// off.
	if got, _ := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); len(got.Finalizers) != 0 {
		t.Errorf("web's finalizers %v, want none", got.Finalizers)
	}
	testutil.Eventually(t, within, "old's finalizer taken off", func() (bool, string) {
		got, err := client.CoreV1().Services("default").Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(got.Finalizers) == 0 && h.members("old") != nil, fmt.Sprintf("finalizers %v, members %v", got.Finalizers, h.members("old"))
	})

	// Scaling: the slice changes, the members follow.
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, epSlice("web", "198.18.17.2", "198.18.18.2", "198.18.19.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "three members", h.memberCount("web", 3))

	// A LoadBalancer Service gets an external address in its status.
	if _, err := client.CoreV1().Services("default").Create(ctx, svc("pub", corev1.ServiceTypeLoadBalancer, "198.19.64.11"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ingress []corev1.LoadBalancerIngress
	testutil.Eventually(t, within, "pub's ingress", func() (bool, string) {
		s, err := client.CoreV1().Services("default").Get(ctx, "pub", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ingress = s.Status.LoadBalancer.Ingress
		return len(ingress) == 1, fmt.Sprintf("ingress %+v", ingress)
	})
	if !strings.HasPrefix(ingress[0].IP, "198.19.1") || ingress[0].IPMode == nil || *ingress[0].IPMode != corev1.LoadBalancerIPModeVIP {
		t.Errorf("ingress %+v, want an address of the external subnet with ipMode VIP", ingress[0])
	}
	// The LoadBalancer Service is told its load balancer is ACTIVE; the
	// ClusterIP one, made before it, is not (no event: kube-proxy
	// records none, and each is a write to the API). The recorder sends
	// events in order, so web's would be there by now.
	testutil.Eventually(t, within, "pub's EnsuredLoadBalancer", event(ctx, client, "pub", "EnsuredLoadBalancer", "ACTIVE"))
	if evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	} else {
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "web" {
				t.Errorf("the ClusterIP Service has an event: %s: %s", e.Reason, e.Message)
			}
		}
	}
	// A LoadBalancer Service whose address is the controller's has the
	// finalizer until its load balancer and address are released.
	if got, _ := client.CoreV1().Services("default").Get(ctx, "pub", metav1.GetOptions{}); !slices.Equal(got.Finalizers, []string{Finalizer}) {
		t.Errorf("pub's finalizers %v, want %s", got.Finalizers, Finalizer)
	}

	// An invalid Service gets a warning event and no LB.
	bad := svc("bad", corev1.ServiceTypeClusterIP, "198.19.64.12")
	bad.Annotations = map[string]string{kubelb.AnnLBMethod: "LEAST_CONNECTIONS"}
	if _, err := client.CoreV1().Services("default").Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "an InvalidService event", event(ctx, client, "bad", "InvalidService", "LEAST_CONNECTIONS"))
	if h.members("bad") != nil {
		t.Error("an invalid Service got a load balancer")
	}

	// Deleting the Service deletes its LB.
	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web's LB deleted", h.lbGone("web"))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDualStack: a dual-stack LoadBalancer Service (IPv6 first) is one
// load balancer with the EndpointSlices of both families as members and
// both external addresses in its ingress, IPv6 first; made single-stack
// IPv4, its load balancer is replaced and the ingress keeps the IPv4
// address only.
func TestDualStack(t *testing.T) {
	api := apitest.New(t)
	cluster6, ext6 := api.IPv6(t)
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet, ClusterIPSubnet6: cluster6, ExternalSubnet6: ext6}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pub := svc("pub", corev1.ServiceTypeLoadBalancer, "2001:2:0:a000::10")
	pub.Spec.ClusterIPs = []string{"2001:2:0:a000::10", "198.19.64.20"}
	pub.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	pub.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	v6 := epSlice("pub", "2001:2:0:17::2", "2001:2:0:18::2")
	v6.Name, v6.AddressType = "pub-v6", discoveryv1.AddressTypeIPv6
	client := fake.NewClientset(pub, epSlice("pub", "198.18.17.2", "198.18.18.2"), v6)
	h := &harness{t: t, api: api, o: o, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	ingress := func(want int) func() (bool, string) {
		return func() (bool, string) {
			s, err := client.CoreV1().Services("default").Get(ctx, "pub", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var ips []string
			for _, in := range s.Status.LoadBalancer.Ingress {
				if in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeVIP {
					return false, fmt.Sprintf("ingress %+v without ipMode VIP", in)
				}
				ips = append(ips, in.IP)
			}
			ok := len(ips) == want && strings.HasPrefix(ips[len(ips)-1], "198.19.1")
			if want == 2 {
				ok = ok && strings.HasPrefix(ips[0], "2001:2:0:c000:")
			}
			return ok, fmt.Sprintf("ingress %v", ips)
		}
	}
	testutil.Eventually(t, within, "the members of both families", h.memberCount("pub", 4))
	testutil.Eventually(t, within, "the IPv6 and the IPv4 external address in the ingress", ingress(2))
	lb, err := o.Find(ctx, kubelb.Name("lab", "default", "pub"))
	if err != nil || lb == nil || lb.VIPSubnetID != ext6 || len(lb.AdditionalVIPs) != 3 {
		t.Fatalf("load balancer %+v (%v), want its VIP on the IPv6 external subnet and three additional VIPs", lb, err)
	}

	// Made single-stack IPv4 (as Kubernetes allows): one family left.
	pub, err = client.CoreV1().Services("default").Get(ctx, "pub", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub.Spec.ClusterIP, pub.Spec.ClusterIPs, pub.Spec.IPFamilies = "198.19.64.20", []string{"198.19.64.20"}, []corev1.IPFamily{corev1.IPv4Protocol}
	pub.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	if _, err := client.CoreV1().Services("default").Update(ctx, pub, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "the IPv4 members only", h.memberCount("pub", 2))
	testutil.Eventually(t, within, "the IPv4 external address alone in the ingress", ingress(1))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestProviderRefusalAndTimeouts: a 501 from the Octavia API (a provider
// that does not support what the Service asks) is an InvalidService event,
// not an endless retry; timeout annotations reach the listeners, and a
// Service whose load balancer is flowlb's flow provider's is told that
// they are not applied.
func TestProviderRefusalAndTimeouts(t *testing.T) {
	api := apitest.New(t)
	target, _ := url.Parse(api.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var refusals atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/loadbalancers") {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if bytes.Contains(b, []byte("kube_service_lab_default_refused")) {
				refusals.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotImplemented)
				_, _ = w.Write([]byte(`{"faultcode": "Server", "faultstring": "Provider 'other' does not support a requested option: SCTP.", "debuginfo": null}`))
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	o := &kubelb.Octavia{Client: apitest.NoAuthClient(front.URL), Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	timed := svc("timed", corev1.ServiceTypeClusterIP, "198.19.64.20")
	timed.Annotations = map[string]string{kubelb.AnnTimeoutClientData: "180000", kubelb.AnnTimeoutMemberConnect: "2000"}
	client := fake.NewClientset(svc("refused", corev1.ServiceTypeClusterIP, "198.19.64.21"), timed)
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	testutil.Eventually(t, within, "an InvalidService event for the refused Service", event(ctx, client, "refused", "InvalidService", "does not support a requested option"))
	testutil.Eventually(t, within, "a TimeoutsNotApplied event", event(ctx, client, "timed", "TimeoutsNotApplied", `"flow" provider forwards with NAT`))
	lb, err := o.Find(ctx, kubelb.Name("lab", "default", "timed"))
	if err != nil || lb == nil {
		t.Fatalf("timed's LB: %v %v", lb, err)
	}
	var ls struct {
		Listeners []struct {
			ClientData    int `json:"timeout_client_data"`
			MemberConnect int `json:"timeout_member_connect"`
			MemberData    int `json:"timeout_member_data"`
			TCPInspect    int `json:"timeout_tcp_inspect"`
		} `json:"listeners"`
	}
	if _, err := api.Client.Get(ctx, api.Client.ServiceURL("lbaas", "listeners")+"?loadbalancer_id="+lb.ID, &ls, nil); err != nil || len(ls.Listeners) != 1 {
		t.Fatalf("listeners %v %v", ls, err)
	}
	if got := ls.Listeners[0]; got.ClientData != 180000 || got.MemberConnect != 2000 || got.MemberData != 50000 || got.TCPInspect != 0 {
		t.Errorf("listener timeouts %+v", got)
	}
	// A refusal counts as invalid (dropped until the Service changes),
	// never as an error to retry.
	testutil.Eventually(t, within, "the refusal counted as invalid", func() (bool, string) {
		n := promtest.ToFloat64(c.m.reconciles.WithLabelValues("invalid"))
		return n >= 1, fmt.Sprintf("%v invalid", n)
	})
	if n := promtest.ToFloat64(c.m.reconciles.WithLabelValues("error")); n != 0 || refusals.Load() == 0 {
		t.Errorf("%v reconciles failed with an error, %d refusals", n, refusals.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNodesPodNetworks: a LoadBalancer Service restricted by source ranges
// lets the pod networks through; they are --pod-cidrs and every Node's
// spec.podCIDRs, followed as Nodes come and go.
func TestNodesPodNetworks(t *testing.T) {
	api := apitest.New(t)
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet,
		PodCIDRs: []string{"198.18.30.0/24"}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	node := func(name string, cidrs ...string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	}
	restricted := svc("pub", corev1.ServiceTypeLoadBalancer, "198.19.64.30")
	restricted.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24"}
	open := svc("open", corev1.ServiceTypeLoadBalancer, "198.19.64.31")
	client := fake.NewClientset(restricted, open, node("n1", "198.18.17.0/24", "fd00:17::/64"))
	h := &harness{t: t, api: api, o: o, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	allowed := func(name string) []string {
		lb, err := o.Find(ctx, kubelb.Name("lab", "default", name))
		if err != nil || lb == nil {
			return nil
		}
		var ls struct {
			Listeners []struct {
				AllowedCIDRs []string `json:"allowed_cidrs"`
			} `json:"listeners"`
		}
		if _, err := api.Client.Get(ctx, api.Client.ServiceURL("lbaas", "listeners")+"?loadbalancer_id="+lb.ID, &ls, nil); err != nil || len(ls.Listeners) != 1 {
			return nil
		}
		got := slices.Clone(ls.Listeners[0].AllowedCIDRs)
		slices.Sort(got)
		return got
	}
	steps := []struct {
		name   string
		change func() error
		want   []string
	}{
		{"n1's pod network and the configured one", func() error { return nil },
			[]string{"198.18.1.0/24", "198.18.17.0/24", "198.18.30.0/24"}},
		{"n2 joins", func() error {
			_, err := client.CoreV1().Nodes().Create(ctx, node("n2", "198.18.18.0/24"), metav1.CreateOptions{})
			return err
		}, []string{"198.18.1.0/24", "198.18.17.0/24", "198.18.18.0/24", "198.18.30.0/24"}},
		{"n2 gets another pod network", func() error {
			_, err := client.CoreV1().Nodes().Update(ctx, node("n2", "198.18.19.0/24"), metav1.UpdateOptions{})
			return err
		}, []string{"198.18.1.0/24", "198.18.17.0/24", "198.18.19.0/24", "198.18.30.0/24"}},
		{"n1 leaves", func() error { return client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}) },
			[]string{"198.18.1.0/24", "198.18.19.0/24", "198.18.30.0/24"}},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		testutil.Eventually(t, within, s.name, func() (bool, string) {
			got := allowed("pub")
			return slices.Equal(got, s.want), fmt.Sprintf("allowed_cidrs %v", got)
		})
	}
	testutil.Eventually(t, within, "open's LB", func() (bool, string) { return h.members("open") != nil, "no LB" })
	if got := allowed("open"); len(got) != 0 {
		t.Errorf("a Service without source ranges has allowed_cidrs %v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestKubeProxyOptOuts: a Service labelled service-proxy-name loses its
// load balancer, finalizer and ingress; a LoadBalancer Service of another
// class is served on its cluster IP with its ingress, written by its own
// implementation, left alone.
func TestKubeProxyOptOuts(t *testing.T) {
	api := apitest.New(t)
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	other := svc("other", corev1.ServiceTypeLoadBalancer, "198.19.64.11")
	other.Spec.LoadBalancerClass = ptr.To("example.com/other")
	theirs := []corev1.LoadBalancerIngress{{IP: "198.18.99.1"}}
	other.Status.LoadBalancer.Ingress = theirs
	client := fake.NewClientset(svc("pub", corev1.ServiceTypeLoadBalancer, "198.19.64.10"), epSlice("pub", "198.18.17.2"), other, epSlice("other", "198.18.17.3"))
	statusOnly(client)
	h := &harness{t: t, api: api, o: o, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	ingressOf := func(name string) []corev1.LoadBalancerIngress {
		s, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Status.LoadBalancer.Ingress
	}
	testutil.Eventually(t, within, "pub's LB and ingress", func() (bool, string) {
		return len(h.members("pub")) == 1 && len(ingressOf("pub")) == 1, fmt.Sprintf("members %v, ingress %v", h.members("pub"), ingressOf("pub"))
	})
	testutil.Eventually(t, within, "other's LB on its cluster IP", h.memberCount("other", 1))
	lb, err := o.Find(ctx, kubelb.Name("lab", "default", "other"))
	if err != nil || lb == nil || lb.VIPAddress != "198.19.64.11" || len(lb.AdditionalVIPs) != 0 {
		t.Fatalf("other's LB %+v (%v): want the cluster IP as its only VIP", lb, err)
	}
	if got := ingressOf("other"); !reflect.DeepEqual(got, theirs) {
		t.Errorf("other's ingress %+v, want its own implementation's %+v", got, theirs)
	}

	pub, err := client.CoreV1().Services("default").Get(ctx, "pub", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub.Labels = map[string]string{kubelb.LabelServiceProxyName: "someone-else"}
	if _, err := client.CoreV1().Services("default").Update(ctx, pub, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "pub's LB deleted", h.lbGone("pub"))
	testutil.Eventually(t, within, "pub's finalizer and ingress gone", func() (bool, string) {
		s, err := client.CoreV1().Services("default").Get(ctx, "pub", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(s.Finalizers) == 0 && len(s.Status.LoadBalancer.Ingress) == 0, fmt.Sprintf("finalizers %v, ingress %v", s.Finalizers, s.Status.LoadBalancer.Ingress)
	})

	// Deleting the other class's Service removes its LB, not its ingress.
	if err := client.CoreV1().Services("default").Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "other's LB deleted", h.lbGone("other"))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestUnchangedServiceReadsNothing: a Service queued again with nothing
// changed for its load balancer (its own finalizer and status updates
// queue it right after it is made) costs no API call within appliedTTL;
// after it, the reconcile reads the load balancer again and repairs what
// was changed behind the controller's back.
// statusOnly makes the fake clientset's Service status updates change the
// status alone, as the API server's status subresource does: the fake
// stores the whole object sent, so a status write made from an informer's
// older copy would undo a label or finalizer written since.
func statusOnly(client *fake.Clientset) {
	client.PrependReactor("update", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		u, ok := action.(k8stesting.UpdateAction)
		if !ok || u.GetSubresource() != "status" {
			return false, nil, nil
		}
		sent := u.GetObject().(*corev1.Service)
		cur, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("services"), sent.Namespace, sent.Name)
		if err != nil {
			return true, nil, err
		}
		out := cur.(*corev1.Service).DeepCopy()
		out.Status = sent.Status
		if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("services"), out, sent.Namespace); err != nil {
			return true, nil, err
		}
		return true, out, nil
	})
}

// TestNoWorkerWaitsForActive: while the API reports the load balancers'
// changes under way (as while the agents program them), one worker still
// applies every Service, publishes no ingress and says nothing ACTIVE;
// once they are ACTIVE, each Service gets its event and its ingress. A
// load balancer that goes to ERROR instead is reported on its Service.
func TestNoWorkerWaitsForActive(t *testing.T) {
	api := apitest.New(t)
	target, _ := url.Parse(api.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	// status is what every read of a load balancer's status answers
	// ("" passes the API's answer through).
	var status atomic.Value
	status.Store("PENDING_CREATE")
	gated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := status.Load().(string)
		if r.Method != http.MethodGet || !strings.Contains(r.URL.RawQuery, "provisioning_status") || s == "" {
			proxy.ServeHTTP(w, r)
			return
		}
		id := path.Base(r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"loadbalancer": {"id": %q, "provisioning_status": %q}}`, id, s)
	}))
	defer gated.Close()
	o := &kubelb.Octavia{Client: apitest.NoAuthClient(gated.URL), Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset(svc("a", corev1.ServiceTypeLoadBalancer, "198.19.64.10"), epSlice("a", "198.18.17.2"),
		svc("b", corev1.ServiceTypeLoadBalancer, "198.19.64.11"), epSlice("b", "198.18.17.3"))
	statusOnly(client)
	h := &harness{t: t, api: api, o: &kubelb.Octavia{Client: api.Client}, client: client}
	reg := prometheus.NewRegistry()
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 1) }()

	testutil.Eventually(t, within, "a's LB", h.memberCount("a", 1))
	testutil.Eventually(t, within, "b's LB, with a's still under way", h.memberCount("b", 1))
	ingress := func(name string) []corev1.LoadBalancerIngress {
		s, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Status.LoadBalancer.Ingress
	}
	testutil.Eventually(t, within, "status checks of both", func() (bool, string) {
		n := promtest.ToFloat64(c.m.reconciles.WithLabelValues("awaiting"))
		return n >= 4, fmt.Sprint(n)
	})
	for _, name := range []string{"a", "b"} {
		if ing := ingress(name); len(ing) != 0 {
			t.Errorf("%s's ingress %+v published before its load balancer is ACTIVE", name, ing)
		}
		if ok, _ := event(ctx, client, name, "EnsuredLoadBalancer", "ACTIVE")(); ok {
			t.Errorf("%s: EnsuredLoadBalancer before ACTIVE", name)
		}
	}
	if n := promtest.ToFloat64(c.m.reconciles.WithLabelValues("ok")); n != 0 {
		t.Errorf("%v reconciles ok before ACTIVE", n)
	}

	status.Store("")
	for _, name := range []string{"a", "b"} {
		testutil.Eventually(t, within, name+"'s EnsuredLoadBalancer", event(ctx, client, name, "EnsuredLoadBalancer", "ACTIVE"))
		testutil.Eventually(t, within, name+"'s ingress", func() (bool, string) {
			ing := ingress(name)
			return len(ing) == 1, fmt.Sprintf("%+v", ing)
		})
	}

	// A load balancer that goes to ERROR is reported on its Service.
	status.Store("ERROR")
	if _, err := client.CoreV1().Services("default").Create(ctx, svc("c", corev1.ServiceTypeLoadBalancer, "198.19.64.12"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "c's SyncLoadBalancerFailed", event(ctx, client, "c", "SyncLoadBalancerFailed", "ERROR after"))
	if ing := ingress("c"); len(ing) != 0 {
		t.Errorf("c's ingress %+v published for a load balancer in ERROR", ing)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestClassOnly: with ClassOnly, a LoadBalancer Service of no class (the
// cloud provider's: cloud-provider-openstack takes exactly those) is
// served on its cluster IP and node port only, its ingress left to the
// cloud provider; one of the controller's class is still its own.
func TestClassOnly(t *testing.T) {
	api := apitest.New(t)
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet, ClassOnly: true}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cloud := svc("cloud", corev1.ServiceTypeLoadBalancer, "198.19.64.11")
	cloud.Spec.Ports[0].NodePort = 30080
	theirs := []corev1.LoadBalancerIngress{{IP: "198.18.99.1"}}
	cloud.Status.LoadBalancer.Ingress = theirs
	ours := svc("ours", corev1.ServiceTypeLoadBalancer, "198.19.64.10")
	ours.Spec.LoadBalancerClass = ptr.To(kubelb.DefaultClass)
	client := fake.NewClientset(cloud, epSlice("cloud", "198.18.17.3"), ours, epSlice("ours", "198.18.17.2"))
	statusOnly(client)
	h := &harness{t: t, api: api, o: o, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	ingressOf := func(name string) []corev1.LoadBalancerIngress {
		s, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Status.LoadBalancer.Ingress
	}
	testutil.Eventually(t, within, "ours' LB and ingress", func() (bool, string) {
		in := ingressOf("ours")
		return len(h.members("ours")) == 1 && len(in) == 1 && in[0].IP != "198.19.64.10", fmt.Sprintf("members %v, ingress %v", h.members("ours"), in)
	})
	// Both ports' listeners (the Service port's and the node port's).
	testutil.Eventually(t, within, "cloud's LB on its cluster IP and node port", h.memberCount("cloud", 2))
	lb, err := o.Find(ctx, kubelb.Name("lab", "default", "cloud"))
	if err != nil || lb == nil || lb.VIPAddress != "198.19.64.11" || len(lb.AdditionalVIPs) != 0 {
		t.Fatalf("cloud's LB %+v (%v): want the cluster IP as its only VIP", lb, err)
	}
	if got := ingressOf("cloud"); !reflect.DeepEqual(got, theirs) {
		t.Errorf("cloud's ingress %+v, want the cloud provider's %+v", got, theirs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestForeignLoadBalancerOfOurName: a load balancer that has the name the
// controller gives a Service's but not its cluster tag (another
// controller's, such as cloud-provider-openstack's under the same cluster
// name) is neither replaced nor deleted: the Service gets a warning event,
// and its deletion leaves that load balancer alone.
func TestForeignLoadBalancerOfOurName(t *testing.T) {
	api := apitest.New(t)
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	name := kubelb.Name("lab", "default", "web")
	var created struct {
		LB kubelb.ActualLB `json:"loadbalancer"`
	}
	if _, err := api.Client.Post(ctx, api.Client.ServiceURL("lbaas", "loadbalancers"), map[string]any{"loadbalancer": map[string]any{
		"name": name, "vip_subnet_id": api.ExternalSubnet, "tags": []string{name}}}, &created, nil); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(svc("web", corev1.ServiceTypeLoadBalancer, "198.19.64.10"), epSlice("web", "198.18.17.2"),
		svc("mine", corev1.ServiceTypeClusterIP, "198.19.64.11"), epSlice("mine", "198.18.17.3"))
	statusOnly(client)
	h := &harness{t: t, api: api, o: o, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	// One worker: web's deletion is done before mine's, queued after it.
	go func() { done <- c.Run(ctx, 1) }()

	testutil.Eventually(t, within, "web's warning", event(ctx, client, "web", "SyncLoadBalancerFailed", "left alone"))
	testutil.Eventually(t, within, "mine's LB", h.memberCount("mine", 1))
	same := func(when string) {
		t.Helper()
		lb, err := o.Find(ctx, name)
		if err != nil || lb == nil || lb.ID != created.LB.ID || lb.VIPSubnetID != api.ExternalSubnet || !reflect.DeepEqual(lb.Tags, []string{name}) {
			t.Fatalf("%s: %s is %+v (%v), want the other controller's %+v unchanged", when, name, lb, err, created.LB)
		}
		if got := h.members("web"); len(got) != 0 {
			t.Errorf("%s: %s has members %v", when, name, got)
		}
	}
	same("served")
	if s, _ := client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("web's ingress %+v: none is the controller's", s.Status.LoadBalancer.Ingress)
	}

	for _, n := range []string{"web", "mine"} {
		if err := client.CoreV1().Services("default").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, within, "mine's LB deleted", h.lbGone("mine"))
	same("deleted")
}

// TestNewServiceWaitsForItsSlice: a Service with a selector created while
// the controller runs is applied when its EndpointSlice comes, in one
// create with its members (not a create without them and a batch member
// update); one whose slice does not come is applied, without members,
// once sliceGrace is over.
func TestNewServiceWaitsForItsSlice(t *testing.T) {
	api := apitest.New(t)
	target, _ := url.Parse(api.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var calls []string
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer counted.Close()
	count := func(method, suffix string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range calls {
			if strings.HasPrefix(c, method+" ") && strings.HasSuffix(c, suffix) {
				n++
			}
		}
		return n
	}
	o := &kubelb.Octavia{Client: apitest.NoAuthClient(counted.URL), Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset()
	h := &harness{t: t, api: api, o: &kubelb.Octavia{Client: api.Client}, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.sliceGrace = time.Hour // the first Service can only be applied once its slice comes
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	testutil.Eventually(t, within, "caches synced", func() (bool, string) { return c.queue.Len() == 0 && c.synced[0](), "" })

	web := svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10")
	web.Spec.Selector = map[string]string{"app": "web"}
	if _, err := client.CoreV1().Services("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web waiting for its slice", func() (bool, string) {
		n := promtest.ToFloat64(c.m.reconciles.WithLabelValues("awaiting_slice"))
		return n >= 1, fmt.Sprint(n)
	})
	if n := count("POST", "/loadbalancers"); n != 0 || h.members("web") != nil {
		t.Fatalf("web applied before its slice came (%d creates)", n)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, epSlice("web", "198.18.17.2", "198.18.18.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web's LB with its two pods", h.memberCount("web", 2))
	if creates, updates := count("POST", "/loadbalancers"), count("PUT", "/members"); creates != 1 || updates != 0 {
		t.Errorf("web: %d creates and %d batch member updates, want one create with the members", creates, updates)
	}

	c.mu.Lock()
	c.sliceGrace = 100 * time.Millisecond
	c.mu.Unlock()
	lonely := svc("lonely", corev1.ServiceTypeClusterIP, "198.19.64.11")
	lonely.Spec.Selector = map[string]string{"app": "nothing"}
	if _, err := client.CoreV1().Services("default").Create(ctx, lonely, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "lonely's LB, without members, after the grace", func() (bool, string) {
		got := h.members("lonely")
		return got != nil && len(got) == 0, fmt.Sprintf("members %v", got)
	})
	c.mu.Lock()
	left := len(c.born)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d Services still noted as new after being applied", left)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSettledReadsWhenDue: a Service queued while its load balancer's
// change is awaited (its own finalizer or status update) reads the
// status only when the read is due, unless it has a new change to send;
// a read that does not see ACTIVE makes the next one due on the settle
// schedule.
func TestSettledReadsWhenDue(t *testing.T) {
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"loadbalancer": {"id": %q, "provisioning_status": "PENDING_UPDATE"}}`, path.Base(r.URL.Path))
	}))
	defer srv.Close()
	o := &kubelb.Octavia{Client: apitest.NoAuthClient(srv.URL)}
	client := fake.NewClientset()
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, kubelb.Options{Cluster: "lab"}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s := svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10")
	c.remember("default/web", applied{want: &kubelb.LB{}, pending: "lb-1"})
	a := c.applied["default/web"]
	if first := time.Until(a.due); first <= 0 || first > minFirstCheck {
		t.Fatalf("first read due in %s, want within %s", first, minFirstCheck)
	}
	a.due = time.Now().Add(time.Hour)
	c.keep("default/web", a)
	if _, err := c.settled(t.Context(), s, "default/web", "lb", a, false); !errors.Is(err, errAwaiting) || reads.Load() != 0 {
		t.Fatalf("before the read is due: %v and %d reads, want awaiting and none", err, reads.Load())
	}
	if after := c.checkAfter("default/web"); after < 59*time.Minute {
		t.Errorf("queued again after %s, want when the read is due (1 h)", after)
	}
	// With a new change to send, the read is now.
	if _, err := c.settled(t.Context(), s, "default/web", "lb", a, true); !errors.Is(err, errAwaiting) || reads.Load() != 1 {
		t.Fatalf("with a new change: %v and %d reads, want awaiting after one", err, reads.Load())
	}
	reads.Store(0)
	a.due = time.Now().Add(-time.Millisecond)
	c.keep("default/web", a)
	if _, err := c.settled(t.Context(), s, "default/web", "lb", a, false); !errors.Is(err, errAwaiting) || reads.Load() != 1 {
		t.Fatalf("when due: %v and %d reads, want awaiting after one", err, reads.Load())
	}
	a = c.applied["default/web"]
	if a.checks != 1 || a.checked.IsZero() {
		t.Errorf("after a read: %d checks, last at %v", a.checks, a.checked)
	}
	if next := a.due.Sub(a.checked); next != c.settle.after(1) {
		t.Errorf("next read due %s after the last, want %s", next, c.settle.after(1))
	}
}

// TestEndpointChangeSendsMembersOnly: an endpoint change after the
// controller applied the Service is one batch member update, with
// nothing read first; not before the change under way is ACTIVE (Octavia
// refuses a change while PENDING). A conflict (409) or a load balancer
// gone behind the controller's back fails that update, and the retry
// reads everything and converges.
func TestEndpointChangeSendsMembersOnly(t *testing.T) {
	api := apitest.New(t)
	target, _ := url.Parse(api.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var calls []string
	var pending atomic.Bool // status reads answer PENDING_UPDATE
	var conflicts atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		status := r.Method == http.MethodGet && strings.Contains(r.URL.RawQuery, "provisioning_status")
		switch {
		case status && pending.Load():
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"loadbalancer": {"id": %q, "provisioning_status": "PENDING_UPDATE"}}`, path.Base(r.URL.Path))
		case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/members") && conflicts.Load() > 0:
			conflicts.Add(-1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"faultcode": "Client", "faultstring": "Load Balancer is immutable and cannot be updated.", "debuginfo": null}`)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	defer front.Close()
	since := func() func(what string) int {
		mu.Lock()
		from := len(calls)
		mu.Unlock()
		return func(what string) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, c := range calls[from:] {
				if strings.Contains(c, what) {
					n++
				}
			}
			return n
		}
	}
	o := &kubelb.Octavia{Client: apitest.NoAuthClient(front.URL), Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pending.Store(true)
	client := fake.NewClientset(svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10"), epSlice("web", "198.18.17.2"))
	h := &harness{t: t, api: api, o: &kubelb.Octavia{Client: api.Client}, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	awaiting := func() float64 { return promtest.ToFloat64(c.m.reconciles.WithLabelValues("awaiting")) }
	testutil.Eventually(t, within, "web's LB", h.memberCount("web", 1))
	testutil.Eventually(t, within, "web awaiting ACTIVE", func() (bool, string) { return awaiting() >= 2, fmt.Sprint(awaiting()) })
	slice := func(addrs ...string) {
		t.Helper()
		if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, epSlice("web", addrs...), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// While the create is under way, the new members wait.
	count := since()
	before := awaiting()
	slice("198.18.17.2", "198.18.18.2")
	testutil.Eventually(t, within, "the change read as under way", func() (bool, string) { return awaiting() >= before+2, fmt.Sprint(awaiting()) })
	if n := count("PUT"); n != 0 {
		t.Errorf("%d updates sent while the load balancer is PENDING", n)
	}
	pending.Store(false)
	testutil.Eventually(t, within, "two members once ACTIVE", h.memberCount("web", 2))
	testutil.Eventually(t, within, "the change ACTIVE", func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		a := c.applied["default/web"]
		return a.pending == "" && len(a.want.Listeners[0].Pool.Members) == 2, fmt.Sprintf("pending %q", a.pending)
	})
	for what, want := range map[string]int{"PUT /v2.0/lbaas/pools/": 1, "GET /v2.0/lbaas/loadbalancers?name=": 0, "/listeners": 0, "GET /v2.0/lbaas/pools/": 0} {
		if n := count(what); n != want {
			t.Errorf("members change: %d calls %q, want %d", n, what, want)
		}
	}

	// Another's change under way: the batch is refused once, the retry
	// reads everything.
	count = since()
	conflicts.Store(1)
	slice("198.18.17.2", "198.18.18.2", "198.18.19.2")
	testutil.Eventually(t, within, "three members after the conflict", h.memberCount("web", 3))
	if n := count("GET /v2.0/lbaas/listeners"); n == 0 || conflicts.Load() != 0 {
		t.Errorf("after a 409: %d listener reads, %d conflicts left; want the retry to read the load balancer", n, conflicts.Load())
	}

	// The load balancer deleted behind the controller's back: the next
	// change's batch finds no pool, the retry makes it again.
	testutil.Eventually(t, within, "the change ACTIVE", func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		a, ok := c.applied["default/web"]
		return ok && a.pending == "", fmt.Sprintf("pending %q", a.pending)
	})
	lb, err := h.o.Find(ctx, kubelb.Name("lab", "default", "web"))
	if err != nil || lb == nil {
		t.Fatalf("find: %v %v", lb, err)
	}
	if err := h.o.Delete(ctx, lb.ID); err != nil {
		t.Fatal(err)
	}
	count = since()
	slice("198.18.17.2")
	testutil.Eventually(t, within, "web's LB made again with its one member", h.memberCount("web", 1))
	if n := count("POST /v2.0/lbaas/loadbalancers"); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
