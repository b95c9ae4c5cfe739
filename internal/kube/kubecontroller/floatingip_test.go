package kubecontroller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestFloatingIPs: with --floating-network (by name), LoadBalancer
// Services keep their cluster IP as the only VIP and are reached through
// a floating IP on its port, in their ingress; one named by loadBalancerIP
// is associated and kept when the Service goes; the internal annotation
// opts out; a restarted controller creates nothing new; the controller's
// own floating IPs are deleted when their Service goes or stops being a
// LoadBalancer.
func TestFloatingIPs(t *testing.T) {
	api := apitest.New(t)
	public := api.FloatingNetwork(t, "public", "198.19.0.0/24")
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	n := &kubelb.Neutron{Client: api.Client}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet, FloatingNetwork: "public"}
	ctx := t.Context()

	// A floating IP reserved by hand, for a Service to name.
	reserved, err := floatingips.Create(ctx, api.Client, floatingips.CreateOpts{FloatingNetworkID: public, Description: "reserved by hand"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	named := svc("named", corev1.ServiceTypeLoadBalancer, "198.19.64.41")
	named.Spec.LoadBalancerIP = reserved.FloatingIP
	internal := svc("internal", corev1.ServiceTypeLoadBalancer, "198.19.64.42")
	internal.Annotations = map[string]string{kubelb.AnnInternal: "true"}
	client := fake.NewClientset(svc("pub", corev1.ServiceTypeLoadBalancer, "198.19.64.40"), named, internal,
		svc("flip", corev1.ServiceTypeLoadBalancer, "198.19.64.43"))
	names := []string{"pub", "named", "internal", "flip"}

	fips := func() []floatingips.FloatingIP {
		t.Helper()
		pages, err := floatingips.List(api.Client, floatingips.ListOpts{}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := floatingips.ExtractFloatingIPs(pages)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(all, func(a, b floatingips.FloatingIP) int { return strings.Compare(a.ID, b.ID) })
		return all
	}
	ingress := func(name string) string {
		s, err := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) != 1 {
			return ""
		}
		return s.Status.LoadBalancer.Ingress[0].IP
	}
	start := func() (*Controller, func()) {
		c := New(client, o, n, opts, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx, 2) }()
		return c, func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}

	_, stop := start()
	defer func() { stop() }()
	for _, name := range names {
		testutil.Eventually(t, within, name+"'s ingress", func() (bool, string) { return ingress(name) != "", "none" })
	}
	// The floating IP of each Service is on its load balancer's VIP port,
	// whose only VIP is the cluster IP.
	byPort := map[string]floatingips.FloatingIP{}
	for _, f := range fips() {
		byPort[f.PortID] = f
	}
	pool := netip.MustParsePrefix("198.19.0.0/24")
	for _, name := range []string{"pub", "named", "flip"} {
		lb, err := o.Find(ctx, kubelb.Name("lab", "default", name))
		if err != nil || lb == nil {
			t.Fatalf("%s's LB: %v %v", name, lb, err)
		}
		s, _ := client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if lb.VIPAddress != s.Spec.ClusterIP || lb.VIPSubnetID != api.ClusterSubnet || len(lb.AdditionalVIPs) != 0 {
			t.Errorf("%s's LB VIPs %s on %s + %v, want only the cluster IP %s", name, lb.VIPAddress, lb.VIPSubnetID, lb.AdditionalVIPs, s.Spec.ClusterIP)
		}
		f, ok := byPort[lb.VIPPortID]
		if !ok {
			t.Fatalf("no floating IP on %s's VIP port %s", name, lb.VIPPortID)
		}
		if f.FloatingIP != ingress(name) || !pool.Contains(netip.MustParseAddr(f.FloatingIP)) || f.FloatingNetworkID != public || f.FixedIP != s.Spec.ClusterIP {
			t.Errorf("%s: floating IP %+v, ingress %s", name, f, ingress(name))
		}
		wantDesc := kubelb.FIPDescription(lb.Name)
		if name == "named" {
			wantDesc = "reserved by hand"
		}
		if f.ID != reserved.ID && name == "named" || f.Description != wantDesc {
			t.Errorf("%s: floating IP %s %q, want description %q (the reserved one %s for named)", name, f.ID, f.Description, wantDesc, reserved.ID)
		}
	}
	if got := ingress("internal"); !strings.HasPrefix(got, "198.19.1") {
		t.Errorf("internal's ingress %q, want an address of the external subnet", got)
	}
	if got := len(fips()); got != 3 {
		t.Errorf("%d floating IPs, want 3", got)
	}

	// A restarted controller resyncs every Service and changes nothing.
	before := fips()
	stop()
	c, stop := start()
	testutil.Eventually(t, within, "every Service reconciled again", func() (bool, string) {
		ok := promtest.ToFloat64(c.m.reconciles.WithLabelValues("ok"))
		return ok >= float64(len(names)), fmt.Sprintf("%v reconciles", ok)
	})
	if after := fips(); !slices.EqualFunc(before, after, func(a, b floatingips.FloatingIP) bool {
		return a.ID == b.ID && a.PortID == b.PortID && a.FloatingIP == b.FloatingIP
	}) {
		t.Errorf("floating IPs changed on restart:\n%+v\n%+v", before, after)
	}

	// Gone while no controller ran: the garbage collection at start
	// deletes pub's own floating IP with its LB.
	pubFIP := ingress("pub")
	stop()
	if err := client.CoreV1().Services("default").Delete(ctx, "pub", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, stop = start()
	testutil.Eventually(t, within, "pub's floating IP deleted", func() (bool, string) {
		all := fips()
		return !slices.ContainsFunc(all, func(f floatingips.FloatingIP) bool { return f.FloatingIP == pubFIP }), fmt.Sprintf("%+v", all)
	})

	// Deleted: the reserved floating IP stays, disassociated.
	if err := client.CoreV1().Services("default").Delete(ctx, "named", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Stopping being a LoadBalancer: flip's is deleted, its LB stays.
	flip, _ := client.CoreV1().Services("default").Get(ctx, "flip", metav1.GetOptions{})
	flipFIP := ingress("flip")
	flip.Spec.Type = corev1.ServiceTypeClusterIP
	if _, err := client.CoreV1().Services("default").Update(ctx, flip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "only the reserved floating IP left, free", func() (bool, string) {
		all := fips()
		return len(all) == 1 && all[0].ID == reserved.ID && all[0].PortID == "", fmt.Sprintf("%+v", all)
	})
	for _, a := range []string{pubFIP, flipFIP} {
		if a == reserved.FloatingIP || a == "" {
			t.Errorf("floating IP %q of a deleted Service", a)
		}
	}
	testutil.Eventually(t, within, "flip's LB kept, without "+kubelb.TagFloatingIP, func() (bool, string) {
		lb, err := o.Find(ctx, kubelb.Name("lab", "default", "flip"))
		if err != nil || lb == nil {
			return false, fmt.Sprintf("LB %v, %v", lb, err)
		}
		return !slices.Contains(lb.Tags, kubelb.TagFloatingIP), fmt.Sprintf("tags %v", lb.Tags)
	})
}
