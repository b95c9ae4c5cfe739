package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flowpb"
	"github.com/flowlb/flowlb/internal/flows"
)

// lbSvc is a TCP :80 service of load balancer lb on vip.
func lbSvc(lb, vip string, backends ...string) *agentv1.Service {
	s := flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80}, LoadBalancerID: lb, Algorithm: flows.RoundRobin}
	for _, b := range backends {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.MustParseAddr(b), Port: 8080, Weight: 1})
	}
	return flowpb.ServiceToProto(s)
}

func svc(vip string, backends ...string) *agentv1.Service { return lbSvc("", vip, backends...) }

func key(vip string) *agentv1.ServiceKey {
	return flowpb.KeyToProto(flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: 80})
}

func lb(id string, services ...*agentv1.Service) *agentv1.LoadBalancerServices {
	return &agentv1.LoadBalancerServices{LoadbalancerId: id, Services: services}
}

// describe writes an update as lines: "snapshot", "lb ID: VIP/LB/backends
// ...", "+VIP/LB/backends", "-VIP".
func describe(u *agentv1.Update) []string {
	var out []string
	if u.GetSnapshot() {
		out = append(out, "snapshot")
	}
	short := func(p *agentv1.Service) string {
		s := flowpb.ServiceFromProto(p)
		return fmt.Sprintf("%s/%s/%d", s.Key.VIP, s.LoadBalancerID, len(s.Backends))
	}
	for _, e := range u.GetLoadbalancers() {
		line := "lb " + e.GetLoadbalancerId() + ":"
		for _, p := range e.GetServices() {
			line += " " + short(p)
		}
		out = append(out, line)
	}
	for _, p := range u.GetUpserts() {
		out = append(out, "+"+short(p))
	}
	for _, p := range u.GetDeletes() {
		out = append(out, "-"+flowpb.KeyFromProto(p).VIP.String())
	}
	return out
}

// TestMerge: queued updates fold into one whose effect equals applying
// them in order (TestMergeEqualsSequence checks that on random queues).
func TestMerge(t *testing.T) {
	const b1, b2 = "198.18.17.2", "198.18.17.3"
	cases := []struct {
		name  string
		batch []*agentv1.Update
		want  []string
	}{
		{"one update passes as is",
			[]*agentv1.Update{{Revision: 3, Upserts: []*agentv1.Service{svc("198.19.0.1", b1)}}},
			[]string{"+198.19.0.1//1"}},
		{"later upsert wins",
			[]*agentv1.Update{
				{Upserts: []*agentv1.Service{svc("198.19.0.1", b1)}},
				{Upserts: []*agentv1.Service{svc("198.19.0.1", b1, b2)}},
			}, []string{"+198.19.0.1//2"}},
		{"delete after upsert deletes",
			[]*agentv1.Update{
				{Upserts: []*agentv1.Service{svc("198.19.0.1", b1), svc("198.19.0.2", b1)}},
				{Deletes: []*agentv1.ServiceKey{key("198.19.0.1")}},
			}, []string{"+198.19.0.2//1", "-198.19.0.1"}},
		{"upsert after delete recreates",
			[]*agentv1.Update{
				{Deletes: []*agentv1.ServiceKey{key("198.19.0.1")}},
				{Upserts: []*agentv1.Service{svc("198.19.0.1", b2)}},
			}, []string{"+198.19.0.1//1"}},
		{"a snapshot drops what came before it",
			[]*agentv1.Update{
				{Upserts: []*agentv1.Service{svc("198.19.0.9", b1)}},
				{Snapshot: true, Upserts: []*agentv1.Service{svc("198.19.0.1", b1)}},
				{Upserts: []*agentv1.Service{svc("198.19.0.2", b1)}, Deletes: []*agentv1.ServiceKey{key("198.19.0.1")}},
			}, []string{"snapshot", "+198.19.0.2//1"}},
		{"the last replacement of a load balancer wins, and deletes what the earlier one listed",
			[]*agentv1.Update{
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))}},
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1", b1))}},
			}, []string{"lb a: 198.19.0.1/a/1", "-198.19.0.2"}},
		{"an upsert after a replacement stays",
			[]*agentv1.Update{
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
				{Upserts: []*agentv1.Service{lbSvc("a", "198.19.0.2")}},
			}, []string{"lb a: 198.19.0.1/a/0", "+198.19.0.2/a/0"}},
		{"an upsert into a load balancer that is then replaced without it goes",
			[]*agentv1.Update{
				{Upserts: []*agentv1.Service{lbSvc("a", "198.19.0.2")}},
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
			}, []string{"lb a: 198.19.0.1/a/0", "-198.19.0.2"}},
		{"an upsert into another load balancer survives a replacement",
			[]*agentv1.Update{
				{Upserts: []*agentv1.Service{lbSvc("b", "198.19.0.2")}},
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
			}, []string{"lb a: 198.19.0.1/a/0", "+198.19.0.2/b/0"}},
		{"a replacement overrides an earlier upsert or delete of a key it lists",
			[]*agentv1.Update{
				{Upserts: []*agentv1.Service{lbSvc("b", "198.19.0.1")}, Deletes: []*agentv1.ServiceKey{key("198.19.0.2")}},
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))}},
			}, []string{"lb a: 198.19.0.1/a/0 198.19.0.2/a/0"}},
		{"a key moved to another load balancer leaves the first one's list",
			[]*agentv1.Update{
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("b", lbSvc("b", "198.19.0.1"))}},
			}, []string{"lb a:", "lb b: 198.19.0.1/b/0"}},
		{"a delete after a replacement takes the key out of its list",
			[]*agentv1.Update{
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))}},
				{Deletes: []*agentv1.ServiceKey{key("198.19.0.1")}},
			}, []string{"lb a: 198.19.0.2/a/0", "-198.19.0.1"}},
		{"an upsert into another load balancer, then a replacement of the first, keeps the key",
			[]*agentv1.Update{
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"))}},
				{Upserts: []*agentv1.Service{lbSvc("b", "198.19.0.1")}},
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a")}},
			}, []string{"lb a:", "+198.19.0.1/b/0"}},
		{"a snapshot resets; later replacements fold into it",
			[]*agentv1.Update{
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.9"))}},
				{Snapshot: true, Upserts: []*agentv1.Service{lbSvc("a", "198.19.0.1"), lbSvc("b", "198.19.0.2")}},
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a"), lb("c", lbSvc("c", "198.19.0.3"))}},
			}, []string{"snapshot", "+198.19.0.3/c/0", "+198.19.0.2/b/0"}},
		{"a service listed under another load balancer's entry is that one's",
			[]*agentv1.Update{
				{Loadbalancers: []*agentv1.LoadBalancerServices{lb("a", lbSvc("x", "198.19.0.1"))}},
				{},
			}, []string{"lb a: 198.19.0.1/a/0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i, u := range tc.batch {
				u.Revision, u.Epoch = int64(i+3), "e"
			}
			u := merge(tc.batch)
			if got := describe(u); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if u.GetRevision() != int64(len(tc.batch)+2) || u.GetEpoch() != "e" {
				t.Errorf("revision %d epoch %q: want the last update's", u.GetRevision(), u.GetEpoch())
			}
		})
	}
}

// TestMergeProbes: the last probe list wins, and none stays none.
func TestMergeProbes(t *testing.T) {
	p1, p2 := []*agentv1.Probe{{MemberId: "m1"}}, []*agentv1.Probe{{MemberId: "m2"}}
	u := merge([]*agentv1.Update{{ProbesSet: true, Probes: p1}, {Snapshot: true}, {ProbesSet: true, Probes: p2}, {}})
	if !u.GetProbesSet() || len(u.GetProbes()) != 1 || u.GetProbes()[0].GetMemberId() != "m2" {
		t.Errorf("probes %v (set %v), want m2's", u.GetProbes(), u.GetProbesSet())
	}
	if u := merge([]*agentv1.Update{{}, {}}); u.GetProbesSet() {
		t.Error("probes set without any list")
	}
}
