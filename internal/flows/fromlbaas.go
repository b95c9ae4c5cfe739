package flows

import (
	"net/netip"
	"slices"
	"time"

	"github.com/flowlb/flowlb/internal/lbaas"
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
// (vip_address and additional_vips) and listener. A listener without a
// usable pool still yields a service, with no backends, so that the data
// plane rejects its connections instead of letting them through to
// nothing. A disabled load balancer or listener yields no service: it does
// not listen at all, as in Octavia.
func Compile(t *lbaas.Tree) []Service {
	if t == nil || t.LB == nil || !live(t.LB.Base) {
		return nil
	}
	var vips []netip.Addr
	if a, err := netip.ParseAddr(t.LB.VIPAddress); err == nil {
		vips = append(vips, a)
	}
	for _, av := range t.LB.AdditionalVIPs {
		if a, err := netip.ParseAddr(av.IPAddress); err == nil {
			vips = append(vips, a)
		}
	}
	var out []Service
	for _, l := range t.Listeners {
		proto, ok := ParseProtocol(l.Protocol)
		if !ok || !live(l.Base) {
			continue
		}
		base := Service{
			LoadBalancerID:  t.LB.ID,
			ListenerID:      l.ID,
			Algorithm:       SourceIPPort,
			ConnectionLimit: l.ConnectionLimit,
			LocalOnly:       slices.Contains(l.Tags, TagLocalOnly),
			InternalLocal:   slices.Contains(l.Tags, TagInternalLocal),
			PreferClose:     slices.Contains(l.Tags, TagPreferClose),
		}
		for _, c := range l.AllowedCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				base.AllowedCIDRs = append(base.AllowedCIDRs, p.Masked())
			}
		}
		if l.DefaultPoolID != nil {
			if p := t.Pool(*l.DefaultPoolID); p != nil && live(p.Base) {
				base.PoolID = p.ID
				base.Algorithm = Algorithm(p.LBAlgorithm)
				base.Persistence = persistence(p)
				base.Backends = backends(t.PoolMembers(p.ID))
			}
		}
		for _, vip := range vips {
			// Only VIPs of the listener's address family can carry it.
			if len(base.AllowedCIDRs) > 0 && !anyFamily(base.AllowedCIDRs, vip) {
				continue
			}
			s := base
			s.Key = Key{VIP: vip, Protocol: proto, Port: uint16(l.ProtocolPort)}
			s.AllowedCIDRs = sameFamily(base.AllowedCIDRs, vip)
			s.Backends = sameFamilyBackends(base.Backends, vip)
			out = append(out, s)
		}
	}
	return out
}

func persistence(p *lbaas.Pool) *Persistence {
	sp := p.SessionPersistence
	if sp == nil || sp.Type != "SOURCE_IP" {
		return nil
	}
	timeout := DefaultPersistenceTimeout
	if sp.PersistenceTimeout != nil && *sp.PersistenceTimeout > 0 {
		timeout = time.Duration(*sp.PersistenceTimeout) * time.Second
	}
	return &Persistence{Type: "SOURCE_IP", Timeout: timeout}
}

// backends picks the members that take new connections: enabled, weight
// above 0, not in ERROR by health, not being deleted; backups only when no
// primary is usable. Sorted for a stable result.
func backends(members []*lbaas.Member) []Backend {
	var primary, backup []Backend
	for _, m := range members {
		if !live(m.Base) || m.Weight == 0 || m.OperatingStatus == lbaas.OpError {
			continue
		}
		a, err := netip.ParseAddr(m.Address)
		if err != nil {
			continue
		}
		b := Backend{MemberID: m.ID, Address: a, Port: uint16(m.ProtocolPort), Weight: m.Weight, Node: NodeOf(m.Tags), Zones: ZonesOf(m.Tags)}
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
	slices.SortFunc(use, func(x, y Backend) int {
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
func sameFamilyBackends(bs []Backend, a netip.Addr) []Backend {
	var out []Backend
	for _, b := range bs {
		if b.Address.Is4() == a.Is4() {
			out = append(out, b)
		}
	}
	return out
}

// CompileAll is the whole desired state at revision rev. Two load
// balancers claiming one VIP, protocol and port is prevented by VIP
// allocation; if it happens anyway the older one keeps the key.
func CompileAll(trees []*lbaas.Tree, rev int64) Table {
	t := Table{Revision: rev, Services: map[Key]Service{}}
	for _, tr := range trees {
		for _, s := range Compile(tr) {
			if _, taken := t.Services[s.Key]; !taken {
				t.Services[s.Key] = s
			}
		}
	}
	return t
}
