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
// switches; and its VIPs that no switch port holds. External are the
// switches peered with those routers through their gateway ports (the
// external networks, where a floating IP's clients come in): the row
// is not attached there, but the guards of its VIPs are (acl.go).
type Attachment struct {
	Switches []string
	Routers  []string
	Missing  []netip.Addr
	External []string
}

// Attach finds each row's switches and routers, the way Neutron's
// topology asks for them, as ovn-octavia-provider attaches its own: the
// switch of the port that holds the VIP (the VIP port, in its addresses,
// port_security or Neutron's record of its fixed IPs), every router with
// a router port peered with that switch (a switch port of type router,
// whose options:router-port names the router's port), and every switch
// peered with those routers but through their gateway ports (a port with
// gateway_chassis or an ha_chassis_group: the external network's). A
// distributed router balances only on its gateway chassis, so a VM on
// another network behind the router is balanced by its own switch, on
// its own chassis, before the router.
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
	gateway := map[string]bool{}  // router port name -> a gateway port
	for _, p := range t.RouterPorts {
		rpName[p.UUID] = p.Name
		gateway[p.Name] = len(p.GatewayChassis) > 0 || p.HaChassisGroup != nil
	}
	routerOf := map[string]string{} // router port name -> router UUID
	for _, r := range t.Routers {
		for _, p := range r.Ports {
			if n, ok := rpName[p]; ok {
				routerOf[n] = r.UUID
			}
		}
	}
	// router UUID -> the switches peered with it, but for its gateway's
	// (the external network: a connection from there to a floating IP
	// is the router's to balance, on the gateway chassis, and balanced
	// on the way in as well it would not come back the way it went).
	switchesOf, externalOf := map[string][]string{}, map[string][]string{}
	for sw, rps := range routerPorts {
		for _, rp := range rps {
			lr, ok := routerOf[rp]
			if !ok {
				continue
			}
			of := switchesOf
			if gateway[rp] {
				of = externalOf
			}
			if !slices.Contains(of[lr], sw) {
				of[lr] = append(of[lr], sw)
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
		for _, lr := range at.Routers {
			for _, sw := range switchesOf[lr] {
				if !slices.Contains(at.Switches, sw) {
					at.Switches = append(at.Switches, sw)
				}
			}
		}
		for _, lr := range at.Routers {
			for _, sw := range externalOf[lr] {
				if !slices.Contains(at.Switches, sw) && !slices.Contains(at.External, sw) {
					at.External = append(at.External, sw)
				}
			}
		}
		slices.Sort(at.Switches)
		slices.Sort(at.Routers)
		slices.Sort(at.External)
		out[name] = at
	}
	return out
}
