package fanout

import (
	"net/netip"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flows"
)

// KeyToProto and the functions below translate between the flow model and
// the wire; they are the only place that knows both.
func KeyToProto(k flows.Key) *agentv1.ServiceKey {
	return &agentv1.ServiceKey{Vip: k.VIP.AsSlice(), Protocol: string(k.Protocol), Port: uint32(k.Port)}
}

// KeyFromProto is the inverse of KeyToProto.
func KeyFromProto(p *agentv1.ServiceKey) flows.Key {
	a, _ := netip.AddrFromSlice(p.GetVip())
	return flows.Key{VIP: a, Protocol: flows.Protocol(p.GetProtocol()), Port: uint16(p.GetPort())}
}

// ServiceToProto encodes a service.
func ServiceToProto(s flows.Service) *agentv1.Service {
	out := &agentv1.Service{
		Key: KeyToProto(s.Key), LoadbalancerId: s.LoadBalancerID, ListenerId: s.ListenerID, PoolId: s.PoolID,
		Algorithm: string(s.Algorithm), ConnectionLimit: int32(s.ConnectionLimit), LocalOnly: s.LocalOnly, InternalLocal: s.InternalLocal,
		PreferClose: s.PreferClose,
	}
	if s.Persistence != nil {
		out.PersistenceTimeoutMs = s.Persistence.Timeout.Milliseconds()
	}
	for _, c := range s.AllowedCIDRs {
		out.AllowedCidrs = append(out.AllowedCidrs, c.String())
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, &agentv1.Backend{MemberId: b.MemberID, Address: b.Address.AsSlice(), Port: uint32(b.Port), Weight: uint32(b.Weight), Node: b.Node, Zones: b.Zones})
	}
	return out
}

// ServiceFromProto decodes a service.
func ServiceFromProto(p *agentv1.Service) flows.Service {
	s := flows.Service{
		Key: KeyFromProto(p.GetKey()), LoadBalancerID: p.GetLoadbalancerId(), ListenerID: p.GetListenerId(), PoolID: p.GetPoolId(),
		Algorithm: flows.Algorithm(p.GetAlgorithm()), ConnectionLimit: int(p.GetConnectionLimit()), LocalOnly: p.GetLocalOnly(), InternalLocal: p.GetInternalLocal(),
		PreferClose: p.GetPreferClose(),
	}
	if ms := p.GetPersistenceTimeoutMs(); ms > 0 {
		s.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Duration(ms) * time.Millisecond}
	}
	for _, c := range p.GetAllowedCidrs() {
		if pf, err := netip.ParsePrefix(c); err == nil {
			s.AllowedCIDRs = append(s.AllowedCIDRs, pf)
		}
	}
	for _, b := range p.GetBackends() {
		a, _ := netip.AddrFromSlice(b.GetAddress())
		s.Backends = append(s.Backends, flows.Backend{MemberID: b.GetMemberId(), Address: a, Port: uint16(b.GetPort()), Weight: int(b.GetWeight()), Node: b.GetNode(), Zones: b.GetZones()})
	}
	return s
}
