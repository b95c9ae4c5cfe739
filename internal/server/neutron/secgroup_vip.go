package neutron

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

var _ lbaas.PortSecurity = Allocator{}

// VIPSecurity resolves the ingress rules of the security groups of the
// VIP ports of the load balancers f selects. Only ports whose groups are
// in force carry their load balancer (putPort), so the load balancers
// without groups cost one indexed list in all.
func (Allocator) VIPSecurity(tx store.ReadTx, f store.Filter) (map[string]*lbaas.SecurityRules, error) {
	recs, err := tx.List(store.KindPort, store.Filter{LoadBalancerID: f.LoadBalancerID, LoadBalancerIDs: f.LoadBalancerIDs, ProjectID: f.ProjectID})
	if err != nil {
		return nil, fmt.Errorf("list VIP ports: %w", err)
	}
	r := resolver{tx: tx, rules: map[string][]lbaas.IngressRule{}, addrs: map[string][]netip.Prefix{}}
	out := map[string]*lbaas.SecurityRules{}
	for _, rec := range recs {
		if rec.LoadBalancerID == "" {
			continue
		}
		var p portDoc
		if err := json.Unmarshal(rec.Data, &p); err != nil {
			return nil, fmt.Errorf("decode port %s: %w", rec.ID, err)
		}
		sr := &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{}}
		for _, g := range p.SecurityGroups {
			rules, err := r.groupIngress(g)
			if err != nil {
				return nil, err
			}
			sr.Ingress = append(sr.Ingress, rules...)
		}
		out[rec.LoadBalancerID] = sr
	}
	return out, nil
}

// resolver reads groups' rules and members once per call.
type resolver struct {
	tx    store.ReadTx
	rules map[string][]lbaas.IngressRule
	addrs map[string][]netip.Prefix
}

func (r *resolver) groupIngress(id string) ([]lbaas.IngressRule, error) {
	if rules, ok := r.rules[id]; ok {
		return rules, nil
	}
	stored, err := groupRules(r.tx, id)
	if err != nil {
		return nil, err
	}
	var out []lbaas.IngressRule
	for _, sr := range stored {
		if sr.Direction != "ingress" {
			continue
		}
		ir := lbaas.IngressRule{IPv6: sr.Ethertype == "IPv6", Protocol: lbaas.AnyProtocol}
		if n, ok := protocolNumber(sr.Protocol); ok {
			ir.Protocol = n
		}
		if sr.PortRangeMin != nil && sr.PortRangeMax != nil && hasPorts(ir.Protocol) {
			ir.PortMin, ir.PortMax = *sr.PortRangeMin, *sr.PortRangeMax
		}
		switch {
		case sr.NormalizedCIDR != nil:
			p, err := netip.ParsePrefix(*sr.NormalizedCIDR)
			if err != nil {
				return nil, fmt.Errorf("security group rule %s: %w", sr.ID, err)
			}
			ir.Sources = []netip.Prefix{p}
		case sr.RemoteGroupID != nil:
			if ir.Sources, err = r.groupAddrs(*sr.RemoteGroupID); err != nil {
				return nil, err
			}
		case ir.IPv6:
			ir.Sources = []netip.Prefix{netip.MustParsePrefix("::/0")}
		default:
			ir.Sources = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
		}
		out = append(out, ir)
	}
	r.rules[id] = out
	return out, nil
}

// groupAddrs are the fixed IPs of the ports in a group, as host prefixes.
func (r *resolver) groupAddrs(id string) ([]netip.Prefix, error) {
	if a, ok := r.addrs[id]; ok {
		return a, nil
	}
	ports, err := groupPorts(r.tx, id)
	if err != nil {
		return nil, err
	}
	out := []netip.Prefix{}
	for _, pid := range ports {
		p, err := getPortDoc(r.tx, pid)
		if err != nil {
			return nil, fmt.Errorf("port %s of security group %s: %w", pid, id, err)
		}
		for _, f := range p.FixedIPs {
			if a, err := netip.ParseAddr(f.IPAddress); err == nil {
				out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			}
		}
	}
	r.addrs[id] = out
	return out, nil
}
