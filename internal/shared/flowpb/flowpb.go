// Package flowpb is the one translation between the flow model
// (internal/shared/flows) and the agent protocol (api/proto/flowlb/agent/v1).
// The server and the agents both use it; it imports nothing else of
// flowlb.
package flowpb

import (
	"maps"
	"math"
	"net/netip"
	"slices"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// KeyToProto encodes a service key.
func KeyToProto(k flows.Key) *agentv1.ServiceKey {
	return &agentv1.ServiceKey{Vip: k.VIP.AsSlice(), Protocol: string(k.Protocol), Port: uint32(k.Port)}
}

// KeyFromProto is the inverse of KeyToProto.
func KeyFromProto(p *agentv1.ServiceKey) flows.Key {
	a, _ := netip.AddrFromSlice(p.GetVip())
	return flows.Key{VIP: a, Protocol: flows.Protocol(p.GetProtocol()), Port: uint16(p.GetPort())}
}

// ServiceToProto encodes a service. Persistence travels as its timeout
// alone: SOURCE_IP is the only kind.
func ServiceToProto(s flows.Service) *agentv1.Service {
	out := &agentv1.Service{
		Key: KeyToProto(s.Key), LoadbalancerId: s.LoadBalancerID, ListenerId: s.ListenerID, PoolId: s.PoolID,
		Algorithm: string(s.Algorithm), ConnectionLimit: int32(s.ConnectionLimit), LocalOnly: s.LocalOnly, InternalLocal: s.InternalLocal,
		PreferClose: s.PreferClose, AllowNone: s.AllowNone, OwnVip: s.OwnVIP,
		HealthCheckNodePort: uint32(s.HealthCheckNodePort), HealthCheckService: s.HealthCheckService,
		L7: L7ToProto(s.L7),
	}
	if s.Persistence != nil {
		out.PersistenceTimeoutMs = s.Persistence.Timeout.Milliseconds()
	}
	for _, c := range s.AllowedCIDRs {
		out.AllowedCidrs = append(out.AllowedCidrs, c.String())
	}
	for _, b := range s.Backends {
		out.Backends = append(out.Backends, BackendToProto(b))
	}
	return out
}

// ServiceFromProto is the inverse of ServiceToProto; an allowed CIDR that
// does not parse is left out.
func ServiceFromProto(p *agentv1.Service) flows.Service {
	s := flows.Service{
		Key: KeyFromProto(p.GetKey()), LoadBalancerID: p.GetLoadbalancerId(), ListenerID: p.GetListenerId(), PoolID: p.GetPoolId(),
		Algorithm: flows.Algorithm(p.GetAlgorithm()), ConnectionLimit: int(p.GetConnectionLimit()), LocalOnly: p.GetLocalOnly(), InternalLocal: p.GetInternalLocal(),
		PreferClose: p.GetPreferClose(), AllowNone: p.GetAllowNone(), OwnVIP: p.GetOwnVip(),
		HealthCheckService: p.GetHealthCheckService(), L7: L7FromProto(p.GetL7()),
	}
	// A port beyond 16 bits is none rather than another port.
	if hc := p.GetHealthCheckNodePort(); hc <= math.MaxUint16 {
		s.HealthCheckNodePort = uint16(hc)
	}
	if ms := p.GetPersistenceTimeoutMs(); ms > 0 {
		s.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: millis(ms)}
	}
	for _, c := range p.GetAllowedCidrs() {
		if pf, err := netip.ParsePrefix(c); err == nil {
			s.AllowedCIDRs = append(s.AllowedCIDRs, pf)
		}
	}
	for _, b := range p.GetBackends() {
		s.Backends = append(s.Backends, BackendFromProto(b))
	}
	return s
}

// LoadBalancerServicesToProto encodes the whole set of services of one
// load balancer (none: an empty set).
func LoadBalancerServicesToProto(lbID string, services []flows.Service) *agentv1.LoadBalancerServices {
	out := &agentv1.LoadBalancerServices{LoadbalancerId: lbID}
	for _, s := range services {
		out.Services = append(out.Services, ServiceToProto(s))
	}
	return out
}

// LoadBalancerServicesFromProto is the inverse of
// LoadBalancerServicesToProto. Every service belongs to the entry's load
// balancer, whatever its own field says: the entry is the claim.
func LoadBalancerServicesFromProto(p *agentv1.LoadBalancerServices) (string, []flows.Service) {
	id := p.GetLoadbalancerId()
	out := make([]flows.Service, 0, len(p.GetServices()))
	for _, sp := range p.GetServices() {
		s := ServiceFromProto(sp)
		s.LoadBalancerID = id
		out = append(out, s)
	}
	return id, out
}

// BackendToProto encodes a backend.
func BackendToProto(b flows.Backend) *agentv1.Backend {
	return &agentv1.Backend{MemberId: b.MemberID, Address: b.Address.AsSlice(), Port: uint32(b.Port), Weight: uint32(b.Weight), Node: b.Node, Zones: b.Zones, ForNodes: b.ForNodes, Terminating: b.Terminating}
}

// BackendFromProto is the inverse of BackendToProto.
func BackendFromProto(p *agentv1.Backend) flows.Backend {
	a, _ := netip.AddrFromSlice(p.GetAddress())
	return flows.Backend{MemberID: p.GetMemberId(), Address: a, Port: uint16(p.GetPort()), Weight: int(p.GetWeight()), Node: p.GetNode(), Zones: p.GetZones(), ForNodes: p.GetForNodes(), Terminating: p.GetTerminating()}
}

// ProbeToProto encodes a probe for the agent that runs it. The member's
// node is the server's business and is not sent.
func ProbeToProto(p flows.Probe) *agentv1.Probe {
	return &agentv1.Probe{
		MemberId: p.MemberID, Address: p.Address.AsSlice(), Port: uint32(p.Port), Type: string(p.Type),
		DelayMs: p.Delay.Milliseconds(), TimeoutMs: p.Timeout.Milliseconds(),
		MaxRetries: int32(p.MaxRetries), MaxRetriesDown: int32(p.MaxRetriesDown),
		HttpMethod: p.HTTPMethod, UrlPath: p.URLPath, ExpectedCodes: p.ExpectedCodes, HttpVersion: p.HTTPVersion, DomainName: p.DomainName,
		InitialStatus: p.InitialStatus,
	}
}

// millis is a count of milliseconds from the wire as a Duration. Below
// zero is zero (no interval the server sends is negative); beyond what a
// Duration holds the product would wrap, so it is the longest it holds.
func millis(ms int64) time.Duration {
	return time.Duration(min(max(ms, 0), int64(math.MaxInt64/time.Millisecond))) * time.Millisecond
}

// ProbeFromProto is the inverse of ProbeToProto (Node stays empty). An
// address that does not decode gives an invalid Address.
func ProbeFromProto(p *agentv1.Probe) flows.Probe {
	a, _ := netip.AddrFromSlice(p.GetAddress())
	return flows.Probe{
		MemberID: p.GetMemberId(), Address: a, Port: uint16(p.GetPort()), Type: flows.MonitorType(p.GetType()),
		Delay: millis(p.GetDelayMs()), Timeout: millis(p.GetTimeoutMs()),
		MaxRetries: int(p.GetMaxRetries()), MaxRetriesDown: int(p.GetMaxRetriesDown()),
		HTTPMethod: p.GetHttpMethod(), URLPath: p.GetUrlPath(), ExpectedCodes: p.GetExpectedCodes(), HTTPVersion: p.GetHttpVersion(),
		DomainName: p.GetDomainName(), InitialStatus: p.GetInitialStatus(),
	}
}

// StatsToProto encodes what a node counted for service s; each backend's
// counters go under the member s's backend of that address and port is
// (none when s has no such backend).
func StatsToProto(s flows.Service, st flows.Stats) *agentv1.ServiceStats {
	p := &agentv1.ServiceStats{Key: KeyToProto(s.Key), LoadbalancerId: s.LoadBalancerID, ListenerId: s.ListenerID,
		Connections: st.Connections, BytesIn: st.BytesIn, BytesOut: st.BytesOut, RequestErrors: st.Refused, ActiveConnections: st.Active}
	ids := map[netip.AddrPort]string{}
	for _, b := range s.Backends {
		ids[netip.AddrPortFrom(b.Address, b.Port)] = b.MemberID
	}
	backends := slices.SortedFunc(maps.Keys(st.Members), netip.AddrPort.Compare)
	for _, b := range backends {
		c := st.Members[b]
		p.Members = append(p.Members, &agentv1.MemberStats{MemberId: ids[b], Address: b.Addr().AsSlice(), Port: uint32(b.Port()),
			Connections: c.Connections, BytesIn: c.BytesIn, BytesOut: c.BytesOut})
	}
	return p
}

// StatsFromProto is the inverse of StatsToProto; the service carries the
// key, owners and members (their ids, addresses and ports) only.
func StatsFromProto(p *agentv1.ServiceStats) (flows.Service, flows.Stats) {
	s := flows.Service{Key: KeyFromProto(p.GetKey()), LoadBalancerID: p.GetLoadbalancerId(), ListenerID: p.GetListenerId()}
	st := flows.Stats{Counters: flows.Counters{Connections: p.GetConnections(), BytesIn: p.GetBytesIn(), BytesOut: p.GetBytesOut(),
		Refused: p.GetRequestErrors()}, Active: p.GetActiveConnections()}
	for _, m := range p.GetMembers() {
		a, _ := netip.AddrFromSlice(m.GetAddress())
		b := flows.Backend{MemberID: m.GetMemberId(), Address: a.Unmap(), Port: uint16(m.GetPort())}
		s.Backends = append(s.Backends, b)
		if st.Members == nil {
			st.Members = map[netip.AddrPort]flows.Counters{}
		}
		k := netip.AddrPortFrom(b.Address, b.Port)
		st.Members[k] = st.Members[k].Add(flows.Counters{Connections: m.GetConnections(), BytesIn: m.GetBytesIn(), BytesOut: m.GetBytesOut()})
	}
	return s, st
}
