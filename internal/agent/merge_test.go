package agent

import (
	"net/netip"
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flowpb"
	"github.com/flowlb/flowlb/internal/flows"
)

func svc(vip string, backends ...string) *agentv1.Service {
	s := flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80}, Algorithm: flows.RoundRobin}
	for _, b := range backends {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.MustParseAddr(b), Port: 8080, Weight: 1})
	}
	return flowpb.ServiceToProto(s)
}

func key(vip string) *agentv1.ServiceKey {
	return flowpb.KeyToProto(flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80})
}

// TestMerge: queued updates fold into one whose effect equals applying
// them in order.
func TestMerge(t *testing.T) {
	cases := []struct {
		name     string
		batch    []*agentv1.Update
		snapshot bool
		ups      map[string]int // VIP → backends
		dels     []string
		rev      int64
	}{
		{"one update passes as is",
			[]*agentv1.Update{{Revision: 3, Upserts: []*agentv1.Service{svc("198.19.0.1", "198.18.17.2")}}},
			false, map[string]int{"198.19.0.1": 1}, nil, 3},
		{"later upsert wins",
			[]*agentv1.Update{
				{Revision: 3, Upserts: []*agentv1.Service{svc("198.19.0.1", "198.18.17.2")}},
				{Revision: 4, Upserts: []*agentv1.Service{svc("198.19.0.1", "198.18.17.2", "198.18.17.3")}},
			}, false, map[string]int{"198.19.0.1": 2}, nil, 4},
		{"delete after upsert deletes",
			[]*agentv1.Update{
				{Revision: 3, Upserts: []*agentv1.Service{svc("198.19.0.1", "198.18.17.2"), svc("198.19.0.2", "198.18.17.2")}},
				{Revision: 4, Deletes: []*agentv1.ServiceKey{key("198.19.0.1")}},
			}, false, map[string]int{"198.19.0.2": 1}, []string{"198.19.0.1"}, 4},
		{"upsert after delete recreates",
			[]*agentv1.Update{
				{Revision: 3, Deletes: []*agentv1.ServiceKey{key("198.19.0.1")}},
				{Revision: 4, Upserts: []*agentv1.Service{svc("198.19.0.1", "198.18.17.4")}},
			}, false, map[string]int{"198.19.0.1": 1}, nil, 4},
		{"a snapshot drops what came before it",
			[]*agentv1.Update{
				{Revision: 3, Upserts: []*agentv1.Service{svc("198.19.0.9", "198.18.17.2")}},
				{Revision: 4, Snapshot: true, Upserts: []*agentv1.Service{svc("198.19.0.1", "198.18.17.2")}},
				{Revision: 5, Upserts: []*agentv1.Service{svc("198.19.0.2", "198.18.17.2")}, Deletes: []*agentv1.ServiceKey{key("198.19.0.1")}},
			}, true, map[string]int{"198.19.0.2": 1}, nil, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := merge(tc.batch)
			if u.GetSnapshot() != tc.snapshot || u.GetRevision() != tc.rev {
				t.Errorf("snapshot %v revision %d, want %v %d", u.GetSnapshot(), u.GetRevision(), tc.snapshot, tc.rev)
			}
			got := map[string]int{}
			for _, p := range u.GetUpserts() {
				s := flowpb.ServiceFromProto(p)
				got[s.Key.VIP.String()] = len(s.Backends)
			}
			if len(got) != len(tc.ups) {
				t.Errorf("upserts %v, want %v", got, tc.ups)
			}
			for vip, n := range tc.ups {
				if got[vip] != n {
					t.Errorf("upsert %s: %d backends, want %d", vip, got[vip], n)
				}
			}
			var dels []string
			for _, p := range u.GetDeletes() {
				dels = append(dels, flowpb.KeyFromProto(p).VIP.String())
			}
			if len(dels) != len(tc.dels) || (len(dels) > 0 && dels[0] != tc.dels[0]) {
				t.Errorf("deletes %v, want %v", dels, tc.dels)
			}
		})
	}
}
