package neutron

import (
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

func TestNoopAllocator(t *testing.T) {
	tests := []struct {
		name string
		req  lbaas.VIPRequest
		addr string
	}{
		{"address and IDs as given", lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: "s", NetworkID: "n", PortID: "p", Address: "198.18.33.33"}, "198.18.33.33"},
		{"derived address", lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: "s"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NoopAllocator{}.Allocate(nil, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.addr != "" && v.Address != tc.addr {
				t.Errorf("address %s, want %s", v.Address, tc.addr)
			}
			if v.Address == "" || v.SubnetID != tc.req.SubnetID || v.NetworkID == "" || v.PortID == "" || v.Owned {
				t.Errorf("VIP %+v", v)
			}
			again, _ := NoopAllocator{}.Allocate(nil, tc.req)
			if again.Address != v.Address {
				t.Errorf("address not stable: %s then %s", v.Address, again.Address)
			}
		})
	}
}
