package ovn

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
)

// Keys Neutron's ML2/OVN driver writes in a Logical_Switch_Port's
// external_ids: the port's fixed IPs with their prefix lengths (written
// whatever its addresses column says: Neutron leaves that empty for a
// load balancer's VIP port), and the floating IP associated with the
// port, which it writes for load balancers to serve on.
const (
	NeutronCIDRsKey = "neutron:cidrs"
	NeutronFIPKey   = "neutron:port_fip"
)

// lspAddrs are the addresses a switch port holds: in its addresses, its
// port_security and Neutron's record of its fixed IPs.
func lspAddrs(p *nbdb.LogicalSwitchPort) []netip.Addr {
	entries := append(slices.Clone(p.Addresses), p.PortSecurity...)
	if c := p.ExternalIDs[NeutronCIDRsKey]; c != "" {
		entries = append(entries, c)
	}
	var out []netip.Addr
	for _, a := range portAddrs(entries) {
		if a = a.Unmap(); !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// floatingOf maps each address of a switch port that has a floating IP
// to that floating IP (the port's fixed IPs of the floating IP's family:
// Neutron's floating IPs are IPv4, and the record names no fixed IP).
func floatingOf(ports []nbdb.LogicalSwitchPort) map[netip.Addr][]netip.Addr {
	out := map[netip.Addr][]netip.Addr{}
	for i := range ports {
		p := &ports[i]
		if p.Type == "router" {
			continue
		}
		var fips []netip.Addr
		for _, f := range strings.Fields(p.ExternalIDs[NeutronFIPKey]) {
			if a, err := netip.ParseAddr(f); err == nil {
				fips = append(fips, a.Unmap())
			}
		}
		if len(fips) == 0 {
			continue
		}
		for _, a := range lspAddrs(p) {
			for _, f := range fips {
				if f.Is4() == a.Is4() && !slices.Contains(out[a], f) {
					out[a] = append(out[a], f)
				}
			}
		}
	}
	return out
}

// WithFloatingIPs adds to each row, for every VIP:port it holds whose VIP
// has a floating IP in Neutron, the same backends on FIP:port: OVN's
// routers take a connection to the floating IP through the row before
// their NAT to the VIP would, so the floating IP is one more address of
// the load balancer, served with the same health-checked backends. A
// floating IP that already is a VIP of the row (the server gave it) is
// left as the server wrote it. The rows are copied, not changed.
func WithFloatingIPs(rows map[string]Row, fips map[netip.Addr][]netip.Addr) map[string]Row {
	if len(fips) == 0 {
		return rows
	}
	out := make(map[string]Row, len(rows))
	for name, r := range rows {
		var extra map[string]string
		for hp, backends := range r.Vips {
			ap, err := netip.ParseAddrPort(hp)
			if err != nil {
				continue
			}
			for _, f := range fips[ap.Addr().Unmap()] {
				fhp := hostPort(f, ap.Port())
				if _, ok := r.Vips[fhp]; ok {
					continue
				}
				if extra == nil {
					extra = map[string]string{}
				}
				extra[fhp] = backends
			}
		}
		if extra != nil {
			vips := maps.Clone(r.Vips)
			maps.Copy(vips, extra)
			r.Vips = vips
		}
		out[name] = r
	}
	return out
}
