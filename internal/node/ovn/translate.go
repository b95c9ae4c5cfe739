package ovn

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// External ids of flowlb's Load_Balancer rows: only rows that carry
// LoadBalancerKey are ever read, written or deleted.
const (
	LoadBalancerKey = "flowlb:load_balancer"
	ProtocolKey     = "flowlb:protocol"
)

// Row is one Load_Balancer row as flowlb wants it.
type Row struct {
	Name           string
	LoadBalancerID string
	Protocol       string // tcp, udp or sctp
	// Vips maps "VIP:port" ("[VIP]:port" for IPv6) to its backends,
	// "b1:p1,b2:p2", or "" (rejected: options reject=true).
	Vips            map[string]string
	SelectionFields []string
	Options         map[string]string
	ExternalIDs     map[string]string
	// Addrs are the VIPs of the row, by which its switches and routers
	// are found.
	Addrs []netip.Addr
}

// Equal reports whether two rows hold the same columns.
func (r Row) Equal(o Row) bool {
	return r.Name == o.Name && r.Protocol == o.Protocol && maps.Equal(r.Vips, o.Vips) &&
		slices.Equal(r.SelectionFields, o.SelectionFields) && maps.Equal(r.Options, o.Options) &&
		maps.Equal(r.ExternalIDs, o.ExternalIDs)
}

// Plan is the rows for a table of services, the source restrictions of
// those services that have one, and the services that get none, with
// the reason.
type Plan struct {
	Rows    map[string]Row   // by name
	Guards  map[string]Guard // by key
	Refused map[flows.Key]string
}

// Translate plans the Load_Balancer rows of a table of services: one per
// load balancer, protocol and hashing (one, unless the load balancer's
// pools hash differently), holding each of its VIP:ports. Services that
// are not a load balancer's own VIP (node ports, Kubernetes cluster IPs)
// are left out silently; those OVN cannot express, with a reason.
func Translate(services map[flows.Key]flows.Service) Plan {
	p := Plan{Rows: map[string]Row{}, Guards: map[string]Guard{}, Refused: map[flows.Key]string{}}
	for _, k := range slices.SortedFunc(maps.Keys(services), compareKeys) {
		s := services[k]
		if !s.OwnVIP || k.NodePort() {
			continue
		}
		if s.LoadBalancerID == "" {
			p.Refused[k] = "no load balancer id"
			continue
		}
		// What OVN cannot enforce is not written: a client VM would
		// reach the VIP past the listener's limit.
		if s.ConnectionLimit >= 0 {
			p.Refused[k] = fmt.Sprintf("a connection limit (%d) has no OVN counterpart", s.ConnectionLimit)
			continue
		}
		proto, ok := protocols[k.Protocol]
		if !ok {
			p.Refused[k] = fmt.Sprintf("protocol %q has no OVN load balancer", k.Protocol)
			continue
		}
		backends, err := backendList(s.Backends)
		if err != nil {
			p.Refused[k] = err.Error()
			continue
		}
		fields, suffix := selection(s)
		name := "flowlb-" + s.LoadBalancerID + "-" + proto + suffix
		r, ok := p.Rows[name]
		if !ok {
			r = Row{Name: name, LoadBalancerID: s.LoadBalancerID, Protocol: proto, Vips: map[string]string{},
				SelectionFields: fields, Options: map[string]string{"reject": "true"},
				ExternalIDs: map[string]string{LoadBalancerKey: s.LoadBalancerID, ProtocolKey: proto}}
		}
		r.Vips[hostPort(k.VIP, k.Port)] = backends
		if !slices.Contains(r.Addrs, k.VIP) {
			r.Addrs = append(r.Addrs, k.VIP)
		}
		p.Rows[name] = r
		if admit, restricted := admitted(s); restricted {
			g := Guard{LoadBalancerID: s.LoadBalancerID, Row: name, Protocol: proto, VIP: k.VIP.Unmap(), Port: k.Port, Admit: admit}
			p.Guards[g.Key()] = g
		}
	}
	return p
}

// admitted is the sources a service admits, of its VIP's family, as the
// nftables data plane reads allowed_cidrs: prefixes of the other family
// admit nobody here, a prefix of length 0 admits every source (no
// restriction), and a service with allowed CIDRs of the other family
// only, or that admits none (AllowNone), admits no source at all.
func admitted(s flows.Service) ([]netip.Prefix, bool) {
	if !s.AllowNone && len(s.AllowedCIDRs) == 0 {
		return nil, false
	}
	v4 := s.Key.VIP.Unmap().Is4()
	var out []netip.Prefix
	for _, p := range s.AllowedCIDRs {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		if !p.IsValid() || p.Addr().Is4() != v4 {
			continue
		}
		if p.Bits() == 0 {
			return nil, false
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out, true
}

var protocols = map[flows.Protocol]string{flows.TCP: "tcp", flows.UDP: "udp", flows.SCTP: "sctp"}

// selection is the row's selection_fields for a service, and the name
// suffix of rows that hash so: SOURCE_IP (the algorithm or persistence)
// hashes the source and destination addresses (OVN hashes on a set of
// fields), SOURCE_IP_PORT the addresses and ports, and ROUND_ROBIN keeps
// OVN's default hash of the connection.
func selection(s flows.Service) ([]string, string) {
	switch {
	case s.Persistence != nil && s.Persistence.Type == string(flows.SourceIP), s.Algorithm == flows.SourceIP:
		return []string{"ip_dst", "ip_src"}, "-src"
	case s.Algorithm == flows.SourceIPPort:
		return []string{"ip_dst", "ip_src", "tp_dst", "tp_src"}, "-srcport"
	}
	return nil, ""
}

// backendList is a VIP's backends as OVN writes them, each repeated by
// its weight over the weights' greatest common divisor, in address order.
func backendList(bs []flows.Backend) (string, error) {
	weights := make([]int, len(bs))
	for i, b := range bs {
		weights[i] = b.Weight
	}
	g, total := flows.WeightDivisor(weights), flows.WeightEntries(weights)
	if total > flows.MaxWeightEntries {
		return "", fmt.Errorf("the weights need %d backend entries, more than %d (OVN has no weights)", total, flows.MaxWeightEntries)
	}
	sorted := slices.Clone(bs)
	slices.SortFunc(sorted, func(a, b flows.Backend) int {
		if c := a.Address.Compare(b.Address); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
	out := make([]string, 0, total)
	for _, b := range sorted {
		for range max(b.Weight, 1) / g {
			out = append(out, hostPort(b.Address, b.Port))
		}
	}
	return strings.Join(out, ","), nil
}

// hostPort is addr:port, with an IPv6 address in brackets.
func hostPort(a netip.Addr, port uint16) string {
	return netip.AddrPortFrom(a.Unmap(), port).String()
}

func compareKeys(a, b flows.Key) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// portAddrs are the addresses in a Logical_Switch_Port's addresses or
// port_security entries ("MAC IP IP...", an IP possibly with a prefix
// length), skipping MACs and the words "router", "unknown", "dynamic".
func portAddrs(entries []string) []netip.Addr {
	var out []netip.Addr
	for _, e := range entries {
		for _, f := range strings.Fields(e) {
			if p, err := netip.ParsePrefix(f); err == nil {
				out = append(out, p.Addr())
			} else if a, err := netip.ParseAddr(f); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

// describe is a row's summary for the log.
func describe(r Row) string {
	return r.Name + " (" + strconv.Itoa(len(r.Vips)) + " vips)"
}
