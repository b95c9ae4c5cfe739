package kubelb

import (
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/apitest"
)

// TestNeutronApply: the floating IP calls against a real flowlb API, by
// network ID and by name, with the fewest calls, and the refusals.
func TestNeutronApply(t *testing.T) {
	api := apitest.New(t)
	public := api.FloatingNetwork(t, "public", "198.19.0.0/24")
	api.FloatingNetwork(t, "twin", "198.19.1.0/24")
	api.FloatingNetwork(t, "twin", "198.19.2.0/24")
	o, n := &Octavia{Client: api.Client}, &Neutron{Client: api.Client}
	ctx := t.Context()
	want := &LB{Name: "kube_service_lab_default_web", VIP: VIP{SubnetID: api.ClusterSubnet, Address: "198.19.64.10"}}
	vip, _, err := o.Apply(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		want  *FloatingIP
		calls int
		addr  string
		err   string
	}{
		{"create, by network ID", &FloatingIP{Network: public}, 1, "198.19.0.", ""},
		{"again: nothing", &FloatingIP{Network: public}, 0, "198.19.0.", ""},
		{"by name: the same network, nothing", &FloatingIP{Network: "public"}, 0, "198.19.0.", ""},
		{"an unknown network", &FloatingIP{Network: "nowhere"}, 0, "", `floating network "nowhere": no such network`},
		{"an ambiguous name", &FloatingIP{Network: "twin"}, 0, "", "2 networks have that name"},
		{"release", nil, 1, "", ""},
		{"release again: nothing", nil, 0, "", ""},
	}
	for _, s := range steps {
		addr, calls, err := n.Apply(ctx, want.Name, vip.VIPPortID, s.want)
		if s.err != "" {
			if err == nil || !strings.Contains(err.Error(), s.err) {
				t.Errorf("%s: err %v, want %q", s.name, err, s.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if calls != s.calls || !strings.HasPrefix(addr, s.addr) || (s.addr == "") != (addr == "") {
			t.Errorf("%s: %d calls, address %q; want %d calls, an address %q...", s.name, calls, addr, s.calls, s.addr)
		}
	}
	if _, _, err := n.Apply(ctx, want.Name, "", &FloatingIP{Network: public}); err == nil || !strings.Contains(err.Error(), "no VIP port") {
		t.Errorf("no VIP port: err %v", err)
	}
}
