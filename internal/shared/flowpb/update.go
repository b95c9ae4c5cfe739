package flowpb

import (
	"net/netip"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// UpdateFromProto translates one message of the agent stream into flow
// terms: an agent translates what it receives once, here, and works on
// flow values from then on. Every service of a load balancer's entry is
// that load balancer's, whatever its own field says (the entry is the
// claim).
func UpdateFromProto(p *agentv1.Update) flows.Update {
	u := flows.Update{Epoch: p.GetEpoch(), Revision: p.GetRevision(), Snapshot: p.GetSnapshot(), ProbesSet: p.GetProbesSet()}
	if n := len(p.GetLoadbalancers()); n > 0 {
		u.LoadBalancers = make([]flows.LoadBalancerServices, 0, n)
	}
	for _, lb := range p.GetLoadbalancers() {
		id, services := LoadBalancerServicesFromProto(lb)
		u.LoadBalancers = append(u.LoadBalancers, flows.LoadBalancerServices{ID: id, Services: services})
	}
	for _, k := range p.GetDeletes() {
		u.Deletes = append(u.Deletes, KeyFromProto(k))
	}
	for _, s := range p.GetUpserts() {
		u.Upserts = append(u.Upserts, ServiceFromProto(s))
	}
	for _, pr := range p.GetProbes() {
		u.Probes = append(u.Probes, ProbeFromProto(pr))
	}
	u.L2Set = p.GetL2Set()
	for _, b := range p.GetL2Vips() {
		if v, ok := netip.AddrFromSlice(b); ok {
			u.L2VIPs = append(u.L2VIPs, v.Unmap())
		}
	}
	return u
}

// UpdateToProto is the inverse of UpdateFromProto (a probe's node is not
// sent).
func UpdateToProto(u flows.Update) *agentv1.Update {
	p := &agentv1.Update{Epoch: u.Epoch, Revision: u.Revision, Snapshot: u.Snapshot, ProbesSet: u.ProbesSet}
	for _, lb := range u.LoadBalancers {
		p.Loadbalancers = append(p.Loadbalancers, LoadBalancerServicesToProto(lb.ID, lb.Services))
	}
	for _, k := range u.Deletes {
		p.Deletes = append(p.Deletes, KeyToProto(k))
	}
	for _, s := range u.Upserts {
		p.Upserts = append(p.Upserts, ServiceToProto(s))
	}
	for _, pr := range u.Probes {
		p.Probes = append(p.Probes, ProbeToProto(pr))
	}
	p.L2Set = u.L2Set
	for _, v := range u.L2VIPs {
		p.L2Vips = append(p.L2Vips, v.AsSlice())
	}
	return p
}
