package kubecontroller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/server/octavia"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestIngressWaitsForAnnouncement: with the gate on, a LoadBalancer
// Service's external address stays out of its status while no node
// announces it (an event says so), and is written once one does.
func TestIngressWaitsForAnnouncement(t *testing.T) {
	var announcedBy atomic.Value // string: the node announcing, "" none
	announcedBy.Store("")
	var api *apitest.API
	api = apitest.NewWithConfig(t, octavia.Config{Announced: func(id string) octavia.Announced {
		// The address is the load balancer's VIP (the external one).
		lb, err := loadbalancers.Get(t.Context(), api.Client, id).Extract()
		if err != nil {
			return octavia.Announced{}
		}
		v := netip.MustParseAddr(lb.VipAddress)
		a := octavia.Announced{Addresses: map[netip.Addr][]string{v: {}}, InRanges: map[netip.Addr]bool{v: true}, Announcing: 2}
		if n := announcedBy.Load().(string); n != "" {
			a.Addresses[v] = []string{n}
		}
		return a
	}})
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet, AnnounceWait: 30 * time.Second}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset(svc("pub", corev1.ServiceTypeLoadBalancer, "198.19.64.11"))
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	defer func() {
		cancel()
		<-done
	}()

	testutil.Eventually(t, within, "an AwaitingAnnouncement event", event(ctx, client, "pub", "AwaitingAnnouncement", "no node announces it yet"))
	ingress := func() []corev1.LoadBalancerIngress {
		s, err := client.CoreV1().Services("default").Get(ctx, "pub", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Status.LoadBalancer.Ingress
	}
	// Held across several looks (the first comes after 250 ms).
	testutil.Eventually(t, within, "the gate looked again", func() (bool, string) {
		n := promtest.ToFloat64(c.m.reconciles.WithLabelValues("awaiting_announcement"))
		return n >= 3, fmt.Sprintf("%v awaiting_announcement reconciles", n)
	})
	if got := ingress(); len(got) != 0 {
		t.Fatalf("ingress %+v written while no node announces it", got)
	}
	announcedBy.Store("n2")
	testutil.Eventually(t, within, "the ingress written once n2 announces it", func() (bool, string) {
		got := ingress()
		return len(got) == 1, fmt.Sprintf("ingress %+v", got)
	})
	testutil.Eventually(t, within, "an Announced event", event(ctx, client, "pub", "Announced", "announced by n2"))
}
