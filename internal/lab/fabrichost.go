package lab

// Fabric hosts: namespaces plugged into the fabric bridge next to the
// nodes, for the control plane (server hosts s1…s9, the database host).
// Like the fabric itself they reach every node directly, every pod via its
// node and the client via the router, and have no default route.

import (
	"fmt"
	"net/netip"
)

// plugFabricHost connects host, whose namespace exists, to the fabric
// bridge as addresses a and a6 and routes the pod networks of s's nodes
// and the client network.
func (l *Lab) plugFabricHost(s *State, host string, a, a6 netip.Addr) error {
	fab, err := Handle(NSName(l.name, HostFabric))
	if err != nil {
		return err
	}
	defer fab.Close()
	br, err := fab.LinkByName("br0")
	if err != nil {
		return fmt.Errorf("fabric bridge: %w", err)
	}
	if err := veth(fab, host, "eth0", NSName(l.name, host), br.Attrs().Index); err != nil {
		return err
	}
	h, err := Handle(NSName(l.name, host))
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := upAddr(h, "eth0", hostAddr(a, FabricCIDR), hostAddr(a6, FabricCIDR6)); err != nil {
		return err
	}
	return routeFabricHost(h, s)
}

// buildServers plugs the server hosts of s into the fabric.
func (l *Lab) buildServers(s *State) error {
	for _, k := range s.Servers {
		if err := l.plugFabricHost(s, ServerName(k), ServerAddr(k), ServerAddr6(k)); err != nil {
			return fmt.Errorf("server host %s: %w", ServerName(k), err)
		}
	}
	return nil
}

// addFabricHost creates host's namespace and plugs it into the fabric as
// addresses a and a6, in a running lab; on failure it removes the
// namespace.
func (l *Lab) addFabricHost(s *State, host string, a, a6 netip.Addr) error {
	if err := l.newHostNS(host); err != nil {
		return err
	}
	if err := l.plugFabricHost(s, host, a, a6); err != nil {
		_ = deleteNS(NSName(l.name, host))
		return fmt.Errorf("host %s: %w", host, err)
	}
	return nil
}

// Server returns server host k (1-based); it panics if there is none.
func (l *Lab) Server(k int) Host { return l.must(ServerName(k)) }

// Servers returns every server host.
func (l *Lab) Servers() []Host {
	var out []Host
	for _, k := range l.snapshot().Servers {
		name := ServerName(k)
		out = append(out, Host{lab: l, Name: name, NS: NSName(l.name, name), Addr: ServerAddr(k), Addr6: ServerAddr6(k)})
	}
	return out
}

// DB returns the database host; it panics if the lab has none
// (StartPostgres makes it).
func (l *Lab) DB() Host { return l.must(HostDB) }
