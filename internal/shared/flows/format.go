package flows

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// String is a service as one line, for logs, dumps and tests: its key,
// algorithm, options and backends, without ids.
func (s Service) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", s.Key, s.Algorithm)
	if s.Persistence != nil {
		fmt.Fprintf(&b, " persistence=%s", s.Persistence.Timeout)
	}
	if s.ConnectionLimit >= 0 {
		fmt.Fprintf(&b, " limit=%d", s.ConnectionLimit)
	}
	if len(s.AllowedCIDRs) > 0 {
		cidrs := make([]string, len(s.AllowedCIDRs))
		for i, p := range s.AllowedCIDRs {
			cidrs[i] = p.String()
		}
		fmt.Fprintf(&b, " allowed=%s", strings.Join(cidrs, ","))
	}
	if s.AllowNone {
		b.WriteString(" allowed=none")
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{s.LocalOnly, "local-only"}, {s.InternalLocal, "internal-local"}, {s.PreferClose, "prefer-close"}, {s.OwnVIP, "own-vip"}} {
		if f.on {
			b.WriteString(" " + f.name)
		}
	}
	if len(s.Backends) == 0 {
		b.WriteString(" no-backends")
	}
	for _, be := range s.Backends {
		b.WriteString(" " + be.String())
	}
	return b.String()
}

// String is a key as VIP:port/protocol.
func (k Key) String() string {
	return netip.AddrPortFrom(k.VIP, k.Port).String() + "/" + string(k.Protocol)
}

// String is a backend as address:port*weight, with its node, zones, the
// nodes that prefer it and, marked "+keep-client", whether it keeps the
// client's address.
func (b Backend) String() string {
	s := fmt.Sprintf("%s*%d", netip.AddrPortFrom(b.Address, b.Port), b.Weight)
	if b.Node != "" {
		s += "@" + b.Node
	}
	if len(b.Zones) > 0 {
		s += "(" + strings.Join(b.Zones, ",") + ")"
	}
	if len(b.ForNodes) > 0 {
		s += "[" + strings.Join(b.ForNodes, ",") + "]"
	}
	if b.KeepClient {
		s += "+keep-client"
	}
	return s
}

// Lines lists a table's services one per line, sorted by key.
func (t Table) Lines() []string {
	keys := make([]Key, 0, len(t.Services))
	for k := range t.Services {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, CompareKeys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = t.Services[k].String()
	}
	return out
}

// CompareKeys orders keys by VIP, protocol, then port.
func CompareKeys(a, b Key) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}
