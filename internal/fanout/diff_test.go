package fanout

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/flows"
)

// svc is a service of load balancer lb on VIP 198.19.0.<vip>:80 with n
// backends.
func svc(lb string, vip byte, n int) flows.Service {
	s := flows.Service{LoadBalancerID: lb, Key: flows.Key{VIP: netip.AddrFrom4([4]byte{198, 19, 0, vip}), Protocol: flows.TCP, Port: 80}}
	for i := range n {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, byte(2 + i)}), Port: 8080, Weight: 1})
	}
	return s
}

// table is the hub's table holding the given services.
func table(ss ...flows.Service) map[flows.Key]flows.Service {
	t := map[flows.Key]flows.Service{}
	for _, s := range ss {
		t[s.Key] = s
	}
	return t
}

// briefServices renders services as "vip/backends" and keys as "vip".
func briefServices(ss []flows.Service) string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s/%d", s.Key.VIP, len(s.Backends)))
	}
	return strings.Join(out, " ")
}

func briefKeys(ks []flows.Key) string {
	var out []string
	for _, k := range ks {
		out = append(out, k.VIP.String())
	}
	return strings.Join(out, " ")
}

func TestDiffLB(t *testing.T) {
	a1, a2, a3 := svc("a", 1, 2), svc("a", 2, 2), svc("a", 3, 1)
	b1 := svc("b", 1, 5) // holds a1's key
	for _, tc := range []struct {
		name                   string
		old, now               []flows.Service
		table                  map[flows.Key]flows.Service
		upserts, deletes, kept string
	}{
		{"a new load balancer: every service is an upsert", nil, []flows.Service{a1, a2}, table(),
			"198.19.0.1/2 198.19.0.2/2", "", "198.19.0.1/2 198.19.0.2/2"},
		{"unchanged: nothing to send", []flows.Service{a1, a2}, []flows.Service{a1, a2}, table(a1, a2),
			"", "", "198.19.0.1/2 198.19.0.2/2"},
		{"a changed service is an upsert", []flows.Service{a1, a2}, []flows.Service{a1, svc("a", 2, 3)}, table(a1, a2),
			"198.19.0.2/3", "", "198.19.0.1/2 198.19.0.2/3"},
		{"a service gone is a delete", []flows.Service{a1, a2, a3}, []flows.Service{a2}, table(a1, a2, a3),
			"", "198.19.0.1 198.19.0.3", "198.19.0.2/2"},
		{"a deleted load balancer: every service is a delete", []flows.Service{a1, a2}, nil, table(a1, a2),
			"", "198.19.0.1 198.19.0.2", ""},
		{"a key another load balancer holds stays with it", nil, []flows.Service{a1, a2}, table(b1),
			"198.19.0.2/2", "", "198.19.0.2/2"},
		{"a change of a field other than the backends counts", []flows.Service{a1}, []flows.Service{func() flows.Service {
			s := a1
			s.ConnectionLimit = 5
			return s
		}()}, table(a1), "198.19.0.1/2", "", "198.19.0.1/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := holders(tc.table)
			c := diffLB("a", tc.old, tc.now, tc.table)
			if got := briefServices(c.upserts); got != tc.upserts {
				t.Errorf("upserts %q, want %q", got, tc.upserts)
			}
			if got := briefKeys(c.deletes); got != tc.deletes {
				t.Errorf("deletes %q, want %q", got, tc.deletes)
			}
			if got := briefServices(c.kept); got != tc.kept {
				t.Errorf("kept %q, want %q", got, tc.kept)
			}
			if after := holders(tc.table); !slices.Equal(before, after) {
				t.Errorf("diffLB changed the table: %v, was %v", after, before)
			}
		})
	}
}

// holders renders a table's holders, sorted, to check it is left alone.
func holders(t map[flows.Key]flows.Service) []string {
	var out []string
	for k, s := range t {
		out = append(out, fmt.Sprintf("%s=%s/%d", k.VIP, s.LoadBalancerID, len(s.Backends)))
	}
	slices.Sort(out)
	return out
}
