// Package l7steer puts the node's L7 proxy (internal/node/l7proxy)
// between the agent and its packet data planes. Each L7 service (an HTTP
// listener at one VIP and port) gets a steering port of the proxy; the
// packet data planes program, in its place, an L4 service whose one
// backend is that port at the node's own address, so that a client's
// connection to the VIP reaches the proxy on the client's own node, with
// the client's address, whichever data plane translated it (nftables'
// DNAT or the eBPF socket programs' connect rewrite). The proxy plane
// takes the same changes and gives the proxy the L7 services by port.
package l7steer

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/flowlb/flowlb/internal/node/l7proxy"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// ProxyMember is the member ID of the steering backend, as statistics
// and dumps show it.
const ProxyMember = "l7proxy"

// Programmer is a data plane as the agent drives it (agent.Programmer).
type Programmer interface {
	Sync(ctx context.Context, t flows.Table) error
	Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error
}

// Ports assigns each L7 service a steering port from a range: the same
// to every data plane that asks, until the proxy plane releases it.
type Ports struct {
	mu          sync.Mutex
	first, last uint16
	byKey       map[flows.Key]uint16
	used        map[uint16]flows.Key
}

// NewPorts assigns ports from first to last, both included.
func NewPorts(first, last uint16) (*Ports, error) {
	if first == 0 || last < first {
		return nil, fmt.Errorf("L7 steering ports %d-%d: not a range of ports", first, last)
	}
	return &Ports{first: first, last: last, byKey: map[flows.Key]uint16{}, used: map[uint16]flows.Key{}}, nil
}

// For is k's port: the one it has, or the lowest free one.
func (p *Ports) For(k flows.Key) (uint16, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if port, ok := p.byKey[k]; ok {
		return port, nil
	}
	for port := int(p.first); port <= int(p.last); port++ {
		if _, taken := p.used[uint16(port)]; !taken {
			p.byKey[k], p.used[uint16(port)] = uint16(port), k
			return uint16(port), nil
		}
	}
	return 0, fmt.Errorf("L7 listener %s:%d: all %d steering ports (%d-%d) are taken", k.VIP, k.Port, int(p.last)-int(p.first)+1, p.first, p.last)
}

// Keep releases the ports of every key not in keep.
func (p *Ports) Keep(keep map[flows.Key]flows.Service) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, port := range p.byKey {
		if _, ok := keep[k]; !ok {
			delete(p.byKey, k)
			delete(p.used, port)
		}
	}
}

// Steer is the service a packet data plane programs in place of the L7
// service s: its connections go to the proxy's steering port at the
// node's address of the VIP's family (none: no backend, so that they
// are refused rather than let through). What limits the listener's
// connections (its sources, its connection limit) stays; what chooses a
// member is the proxy's.
func Steer(s flows.Service, addr netip.Addr, port uint16) flows.Service {
	out := s
	out.L7 = nil
	out.Algorithm = flows.RoundRobin
	out.Persistence = nil
	out.LocalOnly, out.InternalLocal, out.PreferClose = false, false, false
	out.Backends = nil
	if addr.IsValid() {
		out.Backends = []flows.Backend{{MemberID: ProxyMember, Address: addr, Port: port, Weight: 1}}
	}
	return out
}

// Addresses are the node's addresses the proxy is steered to, one per
// family (an invalid one: none of that family).
type Addresses struct{ V4, V6 netip.Addr }

// of is the address for a VIP's family.
func (a Addresses) of(vip netip.Addr) netip.Addr {
	if vip.Is4() {
		return a.V4
	}
	return a.V6
}

// Packets is a packet data plane that sees every L7 service steered to
// the proxy.
type Packets struct {
	dp    Programmer
	ports *Ports
	addrs Addresses
}

// NewPackets wraps dp.
func NewPackets(dp Programmer, ports *Ports, addrs Addresses) *Packets {
	return &Packets{dp: dp, ports: ports, addrs: addrs}
}

func (p *Packets) steer(s flows.Service) (flows.Service, error) {
	if s.L7 == nil {
		return s, nil
	}
	port, err := p.ports.For(s.Key)
	if err != nil {
		return flows.Service{}, err
	}
	return Steer(s, p.addrs.of(s.Key.VIP), port), nil
}

// Sync programs the whole table, L7 services steered.
func (p *Packets) Sync(ctx context.Context, t flows.Table) error {
	out := flows.Table{Revision: t.Revision, Services: make(map[flows.Key]flows.Service, len(t.Services))}
	for k, s := range t.Services {
		st, err := p.steer(s)
		if err != nil {
			return err
		}
		out.Services[k] = st
	}
	return p.dp.Sync(ctx, out)
}

// Apply programs a change, L7 services steered.
func (p *Packets) Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error {
	out := make([]flows.Service, 0, len(upserts))
	for _, s := range upserts {
		st, err := p.steer(s)
		if err != nil {
			return err
		}
		out = append(out, st)
	}
	return p.dp.Apply(ctx, out, deletes)
}

// StatsReader is a data plane that counts (agent.StatsReader).
type StatsReader interface {
	ReadStats() (map[flows.Key]flows.Stats, error)
}

// ReadStats is what the packet data plane counted, without its counts of
// the steering backends: the proxy counts the members behind them.
func (p *Packets) ReadStats() (map[flows.Key]flows.Stats, error) {
	sr, ok := p.dp.(StatsReader)
	if !ok {
		return nil, nil
	}
	read, err := sr.ReadStats()
	for k, st := range read {
		for m := range st.Members {
			if p.steering(m) {
				delete(st.Members, m)
			}
		}
		if len(st.Members) == 0 {
			st.Members = nil
		}
		read[k] = st
	}
	return read, err
}

// steering reports whether a backend is one of the proxy's steering
// ports.
func (p *Packets) steering(b netip.AddrPort) bool {
	return (b.Addr() == p.addrs.V4 || b.Addr() == p.addrs.V6) && b.Port() >= p.ports.first && b.Port() <= p.ports.last
}

// Proxy is what the proxy plane configures (l7proxy.Proxy).
type Proxy interface {
	Set(map[uint16]l7proxy.Listener) error
}

// ProxyPlane is the proxy as a data plane: it keeps the L7 services of
// every change and gives the proxy all of them, by steering port. It is
// first among the data planes, so that a port is open before a packet
// data plane steers to it.
type ProxyPlane struct {
	proxy Proxy
	ports *Ports
	held  map[flows.Key]flows.Service
}

// NewProxyPlane drives proxy.
func NewProxyPlane(proxy Proxy, ports *Ports) *ProxyPlane {
	return &ProxyPlane{proxy: proxy, ports: ports, held: map[flows.Key]flows.Service{}}
}

// Sync gives the proxy the table's L7 services.
func (p *ProxyPlane) Sync(_ context.Context, t flows.Table) error {
	next := map[flows.Key]flows.Service{}
	for k, s := range t.Services {
		if s.L7 != nil {
			next[k] = s
		}
	}
	return p.set(next)
}

// Apply gives the proxy its L7 services after a change.
func (p *ProxyPlane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	next := maps.Clone(p.held)
	for _, k := range deletes {
		delete(next, k)
	}
	for _, s := range upserts {
		if s.L7 != nil {
			next[s.Key] = s
		} else {
			delete(next, s.Key)
		}
	}
	return p.set(next)
}

func (p *ProxyPlane) set(next map[flows.Key]flows.Service) error {
	listeners := make(map[uint16]l7proxy.Listener, len(next))
	for _, k := range slices.SortedFunc(maps.Keys(next), compareKeys) {
		port, err := p.ports.For(k)
		if err != nil {
			return err
		}
		listeners[port] = l7proxy.Listener{VIP: netip.AddrPortFrom(k.VIP, k.Port), Config: *next[k].L7}
	}
	if err := p.proxy.Set(listeners); err != nil {
		return err
	}
	p.held = next
	p.ports.Keep(next)
	return nil
}

// Held is the L7 services the proxy serves now.
func (p *ProxyPlane) Held() map[flows.Key]flows.Service { return maps.Clone(p.held) }

// compareKeys orders keys, so that ports are assigned in one order
// whatever the map's.
func compareKeys(a, b flows.Key) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if a.Protocol != b.Protocol {
		if a.Protocol < b.Protocol {
			return -1
		}
		return 1
	}
	return int(a.Port) - int(b.Port)
}

// Refusing is a packet data plane of an agent without the proxy: an L7
// service reaches it with no backend, so that its connections are
// refused rather than balanced to the default pool's members as TCP,
// past every policy (a server serving HTTP listeners to an agent run
// without --l7-ports). The first such service is logged.
type Refusing struct {
	dp     Programmer
	warned bool
	warn   func(flows.Key)
}

// NewRefusing wraps dp; warn is told of the first L7 service refused.
func NewRefusing(dp Programmer, warn func(flows.Key)) *Refusing {
	return &Refusing{dp: dp, warn: warn}
}

func (r *Refusing) refuse(s flows.Service) flows.Service {
	if s.L7 == nil {
		return s
	}
	if !r.warned {
		r.warned = true
		r.warn(s.Key)
	}
	return Steer(s, netip.Addr{}, 0)
}

// Sync programs the whole table, L7 services refused.
func (r *Refusing) Sync(ctx context.Context, t flows.Table) error {
	hasL7 := false
	for _, s := range t.Services {
		if s.L7 != nil {
			hasL7 = true
			break
		}
	}
	if !hasL7 {
		return r.dp.Sync(ctx, t)
	}
	out := flows.Table{Revision: t.Revision, Services: make(map[flows.Key]flows.Service, len(t.Services))}
	for k, s := range t.Services {
		out.Services[k] = r.refuse(s)
	}
	return r.dp.Sync(ctx, out)
}

// Apply programs a change, L7 services refused.
func (r *Refusing) Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error {
	if !anyL7(upserts) {
		return r.dp.Apply(ctx, upserts, deletes)
	}
	out := make([]flows.Service, len(upserts))
	for i, s := range upserts {
		out[i] = r.refuse(s)
	}
	return r.dp.Apply(ctx, out, deletes)
}

func anyL7(ss []flows.Service) bool {
	return slices.ContainsFunc(ss, func(s flows.Service) bool { return s.L7 != nil })
}
