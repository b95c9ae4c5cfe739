// Package compiler is the one translation from the LBaaS domain to the
// data plane: a load balancer tree becomes node-neutral flows (services)
// and the probes of its monitored members. It runs on the server; the
// agents see only its output.
package compiler

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// DefaultPersistenceTimeout applies to SOURCE_IP persistence without a
// persistence_timeout, as Octavia's default for UDP pools.
const DefaultPersistenceTimeout = 360 * time.Second

// live reports whether an object takes part in the data plane: enabled and
// not being deleted.
func live(b lbaas.Base) bool {
	return b.AdminStateUp && b.ProvisioningStatus != lbaas.PendingDelete && b.ProvisioningStatus != lbaas.Deleted
}

// Compile turns one load balancer tree into its services: one per VIP
// (vip_address, additional_vips and the floating IPs of the VIP port) and
// listener, plus one per address of the listener's
// flows.TagExternalIPPrefix tags, and one per node-port listener
// (flows.TagNodePort), whatever the VIPs. A listener without a
// usable pool still yields a service, with no backends, so that the data
// plane rejects its connections instead of letting them through to
// nothing. A disabled load balancer or listener yields no service: it does
// not listen at all, as in Octavia.
func Compile(t *lbaas.Tree) []flows.Service { return CompileWith(t, nil) }

// CompileWith is Compile, with the certificates of TERMINATED_HTTPS
// listeners from certs (nil: those listeners yield no service).
func CompileWith(t *lbaas.Tree, certs Certificates) []flows.Service {
	if t == nil || t.LB == nil || !live(t.LB.Base) {
		return nil
	}
	var vips []netip.Addr
	if a, err := netip.ParseAddr(t.LB.VIPAddress); err == nil {
		vips = append(vips, a.Unmap())
	}
	for _, av := range t.LB.AdditionalVIPs {
		if a, err := netip.ParseAddr(av.IPAddress); err == nil {
			vips = append(vips, a.Unmap())
		}
	}
	vips = withFloatingIPs(vips, t.FloatingIPs)
	var out []flows.Service
	for _, l := range t.Listeners {
		proto, ok := flows.ParseProtocol(l.Protocol)
		l7 := isL7(l.Protocol) || (certs != nil && l.Protocol == terminatedHTTPS)
		if l7 {
			// The node's proxy takes the connection; the data plane
			// sees TCP.
			proto, ok = flows.TCP, true
		}
		if !ok || !live(l.Base) {
			continue
		}
		base := flows.Service{
			LoadBalancerID:  t.LB.ID,
			ListenerID:      l.ID,
			Algorithm:       flows.SourceIPPort,
			ConnectionLimit: l.ConnectionLimit,
			LocalOnly:       slices.Contains(l.Tags, flows.TagLocalOnly),
			InternalLocal:   slices.Contains(l.Tags, flows.TagInternalLocal),
			PreferClose:     slices.Contains(l.Tags, flows.TagPreferClose),
		}
		if p := flows.HealthCheckNodePortOf(l.Tags); p != 0 {
			base.HealthCheckNodePort, base.HealthCheckService = p, flows.KubeServiceOf(t.LB.Tags)
		}
		for _, c := range l.AllowedCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				base.AllowedCIDRs = append(base.AllowedCIDRs, p.Masked())
			}
		}
		if l.DefaultPoolID != nil {
			if p := t.Pool(*l.DefaultPoolID); p != nil && live(p.Base) {
				base.PoolID = p.ID
				// Passed through as stored: the flow provider admits only
				// flows.Algorithms.
				base.Algorithm = flows.Algorithm(p.LBAlgorithm)
				base.Persistence = persistence(p)
				base.Backends = backends(t.PoolMembers(p.ID))
			}
		}
		if l7 {
			base.L7 = l7Of(t, l, certs)
			if l.Protocol == terminatedHTTPS {
				if base.L7.TLS = tlsOf(l, certs); base.L7.TLS == nil {
					// Fail closed: no connection without the certificates.
					base.AllowNone = true
				}
			}
		}
		if slices.Contains(l.Tags, flows.TagNodePort) {
			out = append(out, nodePort(base, flows.NodePortVIP, proto, l.ProtocolPort))
			if v6 := nodePort(base, flows.NodePortVIP6, proto, l.ProtocolPort); len(v6.Backends) > 0 {
				out = append(out, v6)
			}
			continue
		}
		for i, vip := range withExternalIPs(vips, l.Tags) {
			// Only VIPs of the listener's address family can carry it.
			if len(base.AllowedCIDRs) > 0 && !anyFamily(base.AllowedCIDRs, vip) {
				continue
			}
			s := base
			s.Key = flows.Key{VIP: vip, Protocol: proto, Port: uint16(l.ProtocolPort)}
			// The load balancer's own addresses come first; the external
			// IPs after them are borrowed, and may be a node's own.
			s.OwnVIP = i < len(vips)
			s.AllowedCIDRs = sameFamily(base.AllowedCIDRs, vip)
			if t.Security != nil {
				// The VIP port's security groups admit their sources, and
				// allowed_cidrs narrows them further.
				s.AllowedCIDRs = Intersect(SecuritySources(t.Security, proto, l.ProtocolPort, vip.Is6()), s.AllowedCIDRs)
				s.AllowNone = len(s.AllowedCIDRs) == 0
			}
			s.Backends = sameFamilyBackends(base.Backends, vip)
			out = append(out, s)
		}
	}
	return out
}

// nodePort is the service of a node-port listener for one family: keyed
// by flows.NodePortVIP (flows.NodePortVIP6 for IPv6 members, when it has
// any), which each node's data plane serves on its own addresses. The VIP
// port's security groups do not apply, as node ports are not on that
// port; allowed_cidrs do.
func nodePort(base flows.Service, vip netip.Addr, proto flows.Protocol, port int) flows.Service {
	s := base
	s.Key = flows.Key{VIP: vip, Protocol: proto, Port: uint16(port)}
	s.AllowedCIDRs = sameFamily(base.AllowedCIDRs, vip)
	s.Backends = sameFamilyBackends(base.Backends, vip)
	return s
}

// withExternalIPs adds to a load balancer's VIPs a listener's external IPs
// (flows.TagExternalIPPrefix), after them, once each and not again when
// one is a VIP.
// A tag whose address does not parse names nothing.
func withExternalIPs(vips []netip.Addr, tags []string) []netip.Addr {
	out := vips
	for _, t := range tags {
		s, ok := strings.CutPrefix(t, flows.TagExternalIPPrefix)
		if !ok {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || slices.Contains(out, a.Unmap()) {
			continue
		}
		out = append(slices.Clip(out), a.Unmap())
	}
	return out
}

// withFloatingIPs adds to a load balancer's VIPs the floating IPs that
// translate to one of them: a floating IP is one more address of the
// services of the VIP, as Neutron's DNAT to the VIP would make it. One
// whose fixed address is not a VIP (another address of a user's port)
// leads to no service. An address already among the VIPs is not added
// twice: IPAM never gives a floating IP a VIP's address, and the data
// plane must never see one key twice if it happened anyway.
func withFloatingIPs(vips []netip.Addr, fips []*lbaas.FloatingIP) []netip.Addr {
	out := vips
	for _, f := range fips {
		a, err := netip.ParseAddr(f.FloatingIPAddress)
		fixed, ferr := netip.ParseAddr(f.FixedIPAddress)
		if err != nil || ferr != nil || !slices.Contains(vips, fixed.Unmap()) || slices.Contains(out, a.Unmap()) {
			continue
		}
		out = append(out, a.Unmap())
	}
	return out
}

func persistence(p *lbaas.Pool) *flows.Persistence {
	sp := p.SessionPersistence
	if sp == nil || sp.Type != "SOURCE_IP" {
		return nil
	}
	timeout := DefaultPersistenceTimeout
	if sp.PersistenceTimeout != nil && *sp.PersistenceTimeout > 0 {
		timeout = time.Duration(*sp.PersistenceTimeout) * time.Second
	}
	return &flows.Persistence{Type: "SOURCE_IP", Timeout: timeout}
}

// backends picks the members that take new connections: enabled, weight
// above 0, not in ERROR by health, not being deleted; backups only when no
// primary is usable. Sorted for a stable result.
func backends(members []*lbaas.Member) []flows.Backend {
	var primary, backup []flows.Backend
	for _, m := range members {
		if !live(m.Base) || m.Weight == 0 || m.OperatingStatus == lbaas.OpError {
			continue
		}
		a, err := netip.ParseAddr(m.Address)
		if err != nil {
			continue
		}
		// An IPv4-mapped IPv6 address is the IPv4 member it names.
		b := flows.Backend{MemberID: m.ID, Address: a.Unmap(), Port: uint16(m.ProtocolPort), Weight: m.Weight, Node: flows.NodeOf(m.Tags), Zones: flows.ZonesOf(m.Tags),
			ForNodes: flows.ForNodesOf(m.Tags), Terminating: flows.IsTerminating(m.Tags)}
		if m.Backup {
			backup = append(backup, b)
		} else {
			primary = append(primary, b)
		}
	}
	use := primary
	if len(use) == 0 {
		use = backup
	}
	slices.SortFunc(use, func(x, y flows.Backend) int {
		if c := x.Address.Compare(y.Address); c != 0 {
			return c
		}
		return int(x.Port) - int(y.Port)
	})
	return use
}

func anyFamily(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Addr().Is4() == a.Is4() {
			return true
		}
	}
	return false
}

func sameFamily(ps []netip.Prefix, a netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == a.Is4() {
			out = append(out, p)
		}
	}
	return out
}

// sameFamilyBackends keeps the backends a VIP can DNAT to: flows do not
// translate between IPv4 and IPv6.
func sameFamilyBackends(bs []flows.Backend, a netip.Addr) []flows.Backend {
	var out []flows.Backend
	for _, b := range bs {
		if b.Address.Is4() == a.Is4() {
			out = append(out, b)
		}
	}
	return out
}

// CompileAll is the whole desired state at revision rev. Two load
// balancers never claim one VIP, protocol and port when the domain made
// them (addresses are unique, and a listener may not take another load
// balancer's port on a shared one); if it happens anyway the senior one
// keeps the key, whatever the order of trees, as the fan-out does.
func CompileAll(trees []*lbaas.Tree, rev int64) flows.Table {
	t := flows.Table{Revision: rev, Services: map[flows.Key]flows.Service{}}
	for _, tr := range BySeniority(trees) {
		for _, s := range Compile(tr) {
			if _, taken := t.Services[s.Key]; !taken {
				t.Services[s.Key] = s
			}
		}
	}
	return t
}
