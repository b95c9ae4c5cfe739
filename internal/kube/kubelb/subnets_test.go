package kubelb_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/octavia"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// TestEnsureSubnets against the real API with no network: the first call
// creates the network and both subnets (no gateway), the second finds
// the same, a CIDR changed under the same name is refused, and a
// cluster-IP range alone leaves no external subnet.
func TestEnsureSubnets(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New()
	svc, err := lbaas.New(st, neutron.Allocator{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(identity.NoAuth("kube", octavia.New(svc, neutron.NewHandler(st, log), log, octavia.Config{})))
	defer srv.Close()
	c := apitest.NoAuthClient(srv.URL)
	ctx := context.Background()
	want := kubelb.Subnets{ClusterIP: "198.19.64.0/18", External: "198.19.128.0/17"}

	ensure := func(cluster string, s kubelb.Subnets) (string, string, error) {
		o := kubelb.Options{Cluster: cluster}
		err := kubelb.EnsureSubnets(ctx, c, s, &o)
		return o.ClusterIPSubnet, o.ExternalSubnet, err
	}
	cip, ext, err := ensure("lab", want)
	if err != nil || cip == "" || ext == "" || cip == ext {
		t.Fatalf("first: %q %q %v", cip, ext, err)
	}
	first, err := subnets.Get(ctx, c, cip).Extract()
	if err != nil {
		t.Fatal(err)
	}
	for id, cidr := range map[string]string{cip: want.ClusterIP, ext: want.External} {
		s, err := subnets.Get(ctx, c, id).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if s.CIDR != cidr || s.GatewayIP != "" {
			t.Errorf("subnet %s: cidr %s gateway %q, want %s and none", s.Name, s.CIDR, s.GatewayIP, cidr)
		}
	}
	cip2, ext2, err := ensure("lab", want)
	if err != nil || cip2 != cip || ext2 != ext {
		t.Errorf("second: %q %q %v, want the same %q %q", cip2, ext2, err, cip, ext)
	}
	if _, _, err := ensure("lab", kubelb.Subnets{ClusterIP: "198.19.0.0/18"}); err == nil || !strings.Contains(err.Error(), "has CIDR 198.19.64.0/18") {
		t.Errorf("changed CIDR: %v", err)
	}
	cip3, ext3, err := ensure("other", kubelb.Subnets{ClusterIP: "198.18.200.0/24"})
	if err != nil || cip3 == "" || ext3 != "" {
		t.Errorf("cluster IPs only: %q %q %v", cip3, ext3, err)
	}
	// Both families on one network: the IPv6 subnets beside the IPv4 ones.
	dual := kubelb.Options{Cluster: "lab"}
	six := kubelb.Subnets{ClusterIP: want.ClusterIP, External: want.External, ClusterIP6: "2001:2:0:a000::/112", External6: "2001:2:0:c000::/64"}
	if err := kubelb.EnsureSubnets(ctx, c, six, &dual); err != nil || dual.ClusterIPSubnet != cip || dual.ExternalSubnet != ext ||
		dual.ClusterIPSubnet6 == "" || dual.ExternalSubnet6 == "" {
		t.Fatalf("dual-stack: %+v %v, want the IPv4 subnets kept and two IPv6 ones", dual, err)
	}
	for id, cidr := range map[string]string{dual.ClusterIPSubnet6: six.ClusterIP6, dual.ExternalSubnet6: six.External6} {
		s, err := subnets.Get(ctx, c, id).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if s.CIDR != cidr || s.IPVersion != 6 || s.GatewayIP != "" || s.NetworkID != first.NetworkID {
			t.Errorf("subnet %s: cidr %s version %d gateway %q network %s, want %s, 6, none, %s", s.Name, s.CIDR, s.IPVersion, s.GatewayIP, s.NetworkID, cidr, first.NetworkID)
		}
	}
	for _, s := range []kubelb.Subnets{{ClusterIP: "2001:2:0:a000::/112"}, {ClusterIP6: "198.18.201.0/24"}} {
		if _, _, err := ensure("fam", s); err == nil || !strings.Contains(err.Error(), "other IP family") {
			t.Errorf("%+v: %v, want the family refused", s, err)
		}
	}
}
