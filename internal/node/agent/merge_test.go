package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flowpb"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// lbSvc is a TCP :80 service of load balancer lb on vip.
func lbSvc(lb, vip string, backends ...string) flows.Service {
	s := flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80}, LoadBalancerID: lb, Algorithm: flows.RoundRobin}
	for _, b := range backends {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.MustParseAddr(b), Port: 8080, Weight: 1})
	}
	return s
}

func svc(vip string, backends ...string) flows.Service { return lbSvc("", vip, backends...) }

func key(vip string) flows.Key {
	return flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80}
}

func lb(id string, services ...flows.Service) flows.LoadBalancerServices {
	return flows.LoadBalancerServices{ID: id, Services: services}
}

// wireLB is lb as the server sends it.
func wireLB(id string, services ...flows.Service) *agentv1.LoadBalancerServices {
	return flowpb.LoadBalancerServicesToProto(id, services)
}

// describe writes an update as lines: "snapshot", "lb ID: VIP/LB/backends
// ...", "+VIP/LB/backends", "-VIP".
func describe(u flows.Update) []string {
	var out []string
	if u.Snapshot {
		out = append(out, "snapshot")
	}
	short := func(s flows.Service) string {
		return fmt.Sprintf("%s/%s/%d", s.Key.VIP, s.LoadBalancerID, len(s.Backends))
	}
	for _, e := range u.LoadBalancers {
		line := "lb " + e.ID + ":"
		for _, p := range e.Services {
			line += " " + short(p)
		}
		out = append(out, line)
	}
	for _, p := range u.Upserts {
		out = append(out, "+"+short(p))
	}
	for _, p := range u.Deletes {
		out = append(out, "-"+p.VIP.String())
	}
	return out
}

// TestMerge: queued updates fold into one whose effect equals applying
// them in order (TestMergeEqualsSequence checks that on random queues).
func TestMerge(t *testing.T) {
	const b1, b2 = "198.18.17.2", "198.18.17.3"
	cases := []struct {
		name  string
		batch []flows.Update
		want  []string
	}{
		{"one update passes as is",
			[]flows.Update{{Revision: 3, Upserts: []flows.Service{svc("198.19.0.1", b1)}}},
			[]string{"+198.19.0.1//1"}},
		{"later upsert wins",
			[]flows.Update{
				{Upserts: []flows.Service{svc("198.19.0.1", b1)}},
				{Upserts: []flows.Service{svc("198.19.0.1", b1, b2)}},
			}, []string{"+198.19.0.1//2"}},
		{"delete after upsert deletes",
			[]flows.Update{
				{Upserts: []flows.Service{svc("198.19.0.1", b1), svc("198.19.0.2", b1)}},
				{Deletes: []flows.Key{key("198.19.0.1")}},
			}, []string{"+198.19.0.2//1", "-198.19.0.1"}},
		{"upsert after delete recreates",
			[]flows.Update{
				{Deletes: []flows.Key{key("198.19.0.1")}},
				{Upserts: []flows.Service{svc("198.19.0.1", b2)}},
			}, []string{"+198.19.0.1//1"}},
		{"a snapshot drops what came before it",
			[]flows.Update{
				{Upserts: []flows.Service{svc("198.19.0.9", b1)}},
				{Snapshot: true, Upserts: []flows.Service{svc("198.19.0.1", b1)}},
				{Upserts: []flows.Service{svc("198.19.0.2", b1)}, Deletes: []flows.Key{key("198.19.0.1")}},
			}, []string{"snapshot", "+198.19.0.2//1"}},
		{"the last replacement of a load balancer wins, and deletes what the earlier one listed",
			[]flows.Update{
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))}},
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1", b1))}},
			}, []string{"lb a: 198.19.0.1/a/1", "-198.19.0.2"}},
		{"an upsert after a replacement stays",
			[]flows.Update{
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
				{Upserts: []flows.Service{lbSvc("a", "198.19.0.2")}},
			}, []string{"lb a: 198.19.0.1/a/0", "+198.19.0.2/a/0"}},
		{"an upsert into a load balancer that is then replaced without it goes",
			[]flows.Update{
				{Upserts: []flows.Service{lbSvc("a", "198.19.0.2")}},
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
			}, []string{"lb a: 198.19.0.1/a/0", "-198.19.0.2"}},
		{"an upsert into another load balancer survives a replacement",
			[]flows.Update{
				{Upserts: []flows.Service{lbSvc("b", "198.19.0.2")}},
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
			}, []string{"lb a: 198.19.0.1/a/0", "+198.19.0.2/b/0"}},
		{"a replacement overrides an earlier upsert or delete of a key it lists",
			[]flows.Update{
				{Upserts: []flows.Service{lbSvc("b", "198.19.0.1")}, Deletes: []flows.Key{key("198.19.0.2")}},
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))}},
			}, []string{"lb a: 198.19.0.1/a/0 198.19.0.2/a/0"}},
		{"a key moved to another load balancer leaves the first one's list",
			[]flows.Update{
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
				{LoadBalancers: []flows.LoadBalancerServices{lb("b", lbSvc("b", "198.19.0.1"))}},
			}, []string{"lb a:", "lb b: 198.19.0.1/b/0"}},
		{"a delete after a replacement takes the key out of its list",
			[]flows.Update{
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))}},
				{Deletes: []flows.Key{key("198.19.0.1")}},
			}, []string{"lb a: 198.19.0.2/a/0", "-198.19.0.1"}},
		{"an upsert into another load balancer, then a replacement of the first, keeps the key",
			[]flows.Update{
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
				{Upserts: []flows.Service{lbSvc("b", "198.19.0.1")}},
				{LoadBalancers: []flows.LoadBalancerServices{lb("a")}},
			}, []string{"lb a:", "+198.19.0.1/b/0"}},
		{"a snapshot resets; later replacements fold into it",
			[]flows.Update{
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.9"))}},
				{Snapshot: true, Upserts: []flows.Service{lbSvc("a", "198.19.0.1"), lbSvc("b", "198.19.0.2")}},
				{LoadBalancers: []flows.LoadBalancerServices{lb("a"), lb("c", lbSvc("c", "198.19.0.3"))}},
			}, []string{"snapshot", "+198.19.0.3/c/0", "+198.19.0.2/b/0"}},
		{"a service listed under another load balancer's entry is that one's",
			[]flows.Update{
				{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("x", "198.19.0.1"))}},
				{},
			}, []string{"lb a: 198.19.0.1/a/0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.batch {
				tc.batch[i].Revision, tc.batch[i].Epoch = int64(i+3), "e"
			}
			u := merge(tc.batch)
			if got := describe(u); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if u.Revision != int64(len(tc.batch)+2) || u.Epoch != "e" {
				t.Errorf("revision %d epoch %q: want the last update's", u.Revision, u.Epoch)
			}
		})
	}
}

// TestMergeProbes: the last probe list wins, and none stays none.
func TestMergeProbes(t *testing.T) {
	p1, p2 := []flows.Probe{{MemberID: "m1"}}, []flows.Probe{{MemberID: "m2"}}
	u := merge([]flows.Update{{ProbesSet: true, Probes: p1}, {Snapshot: true}, {ProbesSet: true, Probes: p2}, {}})
	if !u.ProbesSet || len(u.Probes) != 1 || u.Probes[0].MemberID != "m2" {
		t.Errorf("probes %v (set %v), want m2's", u.Probes, u.ProbesSet)
	}
	if u := merge([]flows.Update{{}, {}}); u.ProbesSet {
		t.Error("probes set without any list")
	}
}
