package kubelb

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/server/octavia"
)

func TestIngressGate(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.19.128.7"), netip.MustParseAddr("2001:2:0:c000::7")
	ingress := []string{v4.String(), v6.String()}
	limit := 30 * time.Second
	for _, tc := range []struct {
		name          string
		a             Announced
		waited        time.Duration
		publish, warn bool
	}{
		{"the API does not tell", Announced{Unknown: true}, 0, true, false},
		{"announced by a node", Announced{Nodes: map[netip.Addr][]string{v6: {"n2"}}, InRanges: map[netip.Addr]bool{v4: true, v6: true}, Announcing: 3}, 0, true, false},
		{"no node announces anything", Announced{Nodes: map[netip.Addr][]string{v4: {}}}, 0, true, false},
		{"outside every node's ranges", Announced{Nodes: map[netip.Addr][]string{v4: {}}, Announcing: 3}, 0, true, false},
		{"within the ranges, not announced yet", Announced{Nodes: map[netip.Addr][]string{v4: {}}, InRanges: map[netip.Addr]bool{v4: true}, Announcing: 3}, 0, false, false},
		{"within the L2 ranges (no node announces by BGP), no owner yet: held", Announced{Nodes: map[netip.Addr][]string{v4: {}}, InRanges: map[netip.Addr]bool{v4: true}}, 0, false, false},
		{"within the ranges, never announced: still held", Announced{Nodes: map[netip.Addr][]string{v4: {}}, InRanges: map[netip.Addr]bool{v4: true}, Announcing: 3}, time.Hour, false, false},
		{"other replicas' nodes unseen: wait", Announced{Nodes: map[netip.Addr][]string{v4: {}}, InRanges: map[netip.Addr]bool{v4: true}, Announcing: 1, Unseen: 2}, limit - time.Second, false, false},
		{"other replicas' nodes unseen, outside this replica's ranges: wait", Announced{Nodes: map[netip.Addr][]string{v4: {}}, Unseen: 2}, 0, false, false},
		{"other replicas' nodes unseen: published after the limit, warned", Announced{Nodes: map[netip.Addr][]string{v4: {}}, InRanges: map[netip.Addr]bool{v4: true}, Announcing: 1, Unseen: 2}, limit, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := IngressGate(tc.a, ingress, tc.waited, limit)
			if g.Publish != tc.publish || g.Warn != tc.warn || g.Why == "" {
				t.Errorf("got %+v, want publish %v, warn %v, and a reason", g, tc.publish, tc.warn)
			}
		})
	}
}

// TestAnnouncedRead: the client reads flowlb's extension, and takes an
// API without it (Octavia's 405) as one that cannot tell.
func TestAnnouncedRead(t *testing.T) {
	v := netip.MustParseAddr("198.19.128.7")
	api := apitest.NewWithConfig(t, octavia.Config{Announced: func(string) octavia.Announced {
		return octavia.Announced{Addresses: map[netip.Addr][]string{v: {"n1"}}, InRanges: map[netip.Addr]bool{v: true}, Announcing: 2, Unseen: 1}
	}})
	o := &Octavia{Client: api.Client}
	lb := &LB{Name: "kube_service_lab_default_web", VIP: VIP{SubnetID: api.ExternalSubnet, Address: "198.19.128.7"}, External: true}
	vip, _, err := o.Apply(t.Context(), lb)
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.Announced(t.Context(), vip.ID)
	want := Announced{Nodes: map[netip.Addr][]string{v: {"n1"}}, InRanges: map[netip.Addr]bool{v: true}, Announcing: 2, Unseen: 1}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}

	plain := apitest.New(t)
	o = &Octavia{Client: plain.Client}
	lb.VIP.SubnetID = plain.ExternalSubnet
	if vip, _, err = o.Apply(t.Context(), lb); err != nil {
		t.Fatal(err)
	}
	if got, err := o.Announced(t.Context(), vip.ID); err != nil || !got.Unknown {
		t.Errorf("an API without the extension: %+v, %v; want Unknown", got, err)
	}
}
