package ovn

import (
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
)

// Topology is the part of the northbound database that says where a VIP
// lives: the switch ports and their addresses, the switches, and the
// routers with their ports.
type Topology struct {
	SwitchPorts []nbdb.LogicalSwitchPort
	Switches    []nbdb.LogicalSwitch
	Routers     []nbdb.LogicalRouter
	RouterPorts []nbdb.LogicalRouterPort
}

// Attachment is where a row belongs: the switches (UUIDs) with a port
// holding one of its VIPs, and the routers with a port on those
// switches; and its VIPs that no switch port holds.
type Attachment struct {
	Switches []string
	Routers  []string
	Missing  []netip.Addr
}

// Attach finds each row's switches and routers, the way Neutron's
// topology asks for them: the switch of the port that holds the VIP
// (the VIP port, in its addresses, port_security or Neutron's record of
// its fixed IPs), and every router with a router port peered with that
// switch (a switch port of type router, whose options:router-port names
// the router's port).
func Attach(t Topology, rows map[string]Row) map[string]Attachment {
	portSwitch := map[string]string{} // switch port UUID -> switch UUID
	for _, s := range t.Switches {
		for _, p := range s.Ports {
			portSwitch[p] = s.UUID
		}
	}
	bySwitch := map[netip.Addr][]string{}
	routerPorts := map[string][]string{} // switch UUID -> router port names
	for _, p := range t.SwitchPorts {
		sw, ok := portSwitch[p.UUID]
		if !ok {
			continue
		}
		if p.Type == "router" {
			if rp := p.Options["router-port"]; rp != "" {
				routerPorts[sw] = append(routerPorts[sw], rp)
			}
			continue
		}
		for _, a := range lspAddrs(&p) {
			if !slices.Contains(bySwitch[a], sw) {
				bySwitch[a] = append(bySwitch[a], sw)
			}
		}
	}
	rpName := map[string]string{} // router port UUID -> name
	for _, p := range t.RouterPorts {
		rpName[p.UUID] = p.Name
	}
	routerOf := map[string]string{} // router port name -> router UUID
	for _, r := range t.Routers {
		for _, p := range r.Ports {
			if n, ok := rpName[p]; ok {
				routerOf[n] = r.UUID
			}
		}
	}
	out := map[string]Attachment{}
	for name, r := range rows {
		var at Attachment
		for _, a := range r.Addrs {
			sws := bySwitch[a.Unmap()]
			if len(sws) == 0 {
				at.Missing = append(at.Missing, a)
			}
			for _, sw := range sws {
				if !slices.Contains(at.Switches, sw) {
					at.Switches = append(at.Switches, sw)
				}
				for _, rp := range routerPorts[sw] {
					if lr, ok := routerOf[rp]; ok && !slices.Contains(at.Routers, lr) {
						at.Routers = append(at.Routers, lr)
					}
				}
			}
		}
		slices.Sort(at.Switches)
		slices.Sort(at.Routers)
		out[name] = at
	}
	return out
}
