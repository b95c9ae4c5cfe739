package lab

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// The address plan (docs/lab.md). Everything lives in 198.18.0.0/15
// (RFC 2544 benchmarking space), so nothing the lab does can collide with
// a real network, and no namespace has a route out of the machine.
var (
	// FabricCIDR is the shared L2 segment (a bridge in the fabric namespace)
	// that joins the nodes, the router and the control address.
	FabricCIDR = netip.MustParsePrefix("198.18.0.0/24")
	// ControlAddr sits on the fabric bridge inside the fabric namespace. A
	// process started in the fabric (for example flowlb server) listens here
	// and every node reaches it directly on the fabric.
	ControlAddr = netip.MustParseAddr("198.18.0.250")
	// RouterFabricAddr is the router's leg on the fabric; nodes route the
	// client network through it.
	RouterFabricAddr = netip.MustParseAddr("198.18.0.254")
	// DBAddr is the lab database host's address on the fabric
	// (Lab.StartPostgres): PostgreSQL listens there on PostgresPort.
	DBAddr = netip.MustParseAddr("198.18.0.239")
	// ClientCIDR is the point-to-point link between router and client.
	ClientCIDR = netip.MustParsePrefix("198.18.1.0/24")
	// RouterClientAddr is the router's leg on the client link and the
	// client's default gateway.
	RouterClientAddr = netip.MustParseAddr("198.18.1.1")
	// ClientAddr is the external client.
	ClientAddr = netip.MustParseAddr("198.18.1.2")
	// ServiceVIPs is the cluster-internal VIP range; the lab routes none of
	// it, the data plane owns it.
	ServiceVIPs = netip.MustParsePrefix("198.19.0.0/17")
	// ExternalVIPs is what the router sends to the nodes with ECMP.
	ExternalVIPs = netip.MustParsePrefix("198.19.128.0/17")
)

// The IPv6 plan mirrors the IPv4 one inside 2001:2::/48 (RFC 5180
// benchmarking space), never routed out either. Host numbers keep their
// decimal digits, written as hex digits (node 12 is 2001:2::12, not
// 2001:2::c), and the pod networks are one prefix, 2001:2:0:4000::/52,
// with the node's number in the subnet: pod 3 of node 12 (198.18.28.4)
// is 2001:2:0:4012::4. The service and external VIP ranges, 198.19.0.0/16
// in IPv4, are the upper half of the /48.
var (
	Lab6CIDR          = netip.MustParsePrefix("2001:2::/48")
	FabricCIDR6       = netip.MustParsePrefix("2001:2::/64")
	ControlAddr6      = netip.MustParseAddr("2001:2::250")
	RouterFabricAddr6 = netip.MustParseAddr("2001:2::254")
	DBAddr6           = netip.MustParseAddr("2001:2::239")
	ClientCIDR6       = netip.MustParsePrefix("2001:2:0:1::/64")
	RouterClientAddr6 = netip.MustParseAddr("2001:2:0:1::1")
	ClientAddr6       = netip.MustParseAddr("2001:2:0:1::2")
	// PodCIDRs6 holds every node's IPv6 pod CIDR (PodCIDR6), and nothing
	// else: what a component told "the pod networks" is given.
	PodCIDRs6     = netip.MustParsePrefix("2001:2:0:4000::/52")
	ServiceVIPs6  = netip.MustParsePrefix("2001:2:0:8000::/50")
	ExternalVIPs6 = netip.MustParsePrefix("2001:2:0:c000::/50")
	podGateway6   = netip.MustParseAddr("fe80::1")
)

// dec returns n's decimal digits read as hex digits (12 → 0x12), the
// IPv6 plan's way of keeping IPv4 numbers readable.
func dec(n int) uint16 {
	v, err := strconv.ParseUint(strconv.Itoa(n), 16, 16)
	if err != nil {
		panic(fmt.Sprintf("lab address number %d out of range", n))
	}
	return uint16(v)
}

// undec is dec's inverse; ok is false for a value with a hex letter.
func undec(v uint16) (int, bool) {
	n, err := strconv.Atoi(strconv.FormatUint(uint64(v), 16))
	return n, err == nil
}

// addr6 is 2001:2:0:<subnet>::<host>.
func addr6(subnet, host uint16) netip.Addr {
	b := Lab6CIDR.Addr().As16()
	b[6], b[7] = byte(subnet>>8), byte(subnet)
	b[14], b[15] = byte(host>>8), byte(host)
	return netip.AddrFrom16(b)
}

// Twin6 is the IPv6 address of the lab host whose IPv4 address is a: a
// fabric or client address 198.18.x.y becomes 2001:2:0:x::y, a pod
// address 198.18.(16+i).(1+j) PodAddr6(i, j) (digits kept, see above). ok
// is false for an address that is no host's (the VIP ranges have no
// twins).
func Twin6(a netip.Addr) (netip.Addr, bool) {
	a = a.Unmap()
	if !a.Is4() || !hosts4.Contains(a) {
		return netip.Addr{}, false
	}
	b := a.As4()
	switch {
	case b[2] <= 1:
		return addr6(dec(int(b[2])), dec(int(b[3]))), true
	case b[2] > 16 && int(b[2]) <= 16+MaxNodes && b[3] > 1:
		return PodAddr6(int(b[2])-16, int(b[3])-1), true
	}
	return netip.Addr{}, false
}

// hosts4 holds every IPv4 host address of the plan (fabric, client link,
// pod CIDRs).
var hosts4 = netip.MustParsePrefix("198.18.0.0/16")

// NodeAddr6 is node i's IPv6 address on the fabric: 2001:2::i.
func NodeAddr6(i int) netip.Addr { return addr6(0, dec(i)) }

// ServerAddr6 is server host k's IPv6 address: 2001:2::(240+k).
func ServerAddr6(k int) netip.Addr { return addr6(0, dec(240+k)) }

// PodCIDR6 is the IPv6 pod network routed to node i: 2001:2:0:4iii::/64,
// iii being i's decimal digits (node 12: 2001:2:0:4012::/64).
func PodCIDR6(i int) netip.Prefix { return netip.PrefixFrom(addr6(podSubnet6(i), 0), 64) }

// PodAddr6 is the IPv6 address of pod j on node i: 2001:2:0:4iii::(1+j).
func PodAddr6(i, j int) netip.Addr { return addr6(podSubnet6(i), dec(1+j)) }

func podSubnet6(i int) uint16 { return 0x4000 | dec(i) }

// PodGateway6 is every pod's IPv6 default gateway, a link-local address
// on each of the node's pod-facing veths (as Calico does): it needs no
// address from the pod CIDR.
func PodGateway6() netip.Addr { return podGateway6 }

// NodeIndex returns the node whose fabric address (either family) a is.
func NodeIndex(a netip.Addr) (int, bool) {
	a = a.Unmap()
	var i int
	switch {
	case a.Is4() && FabricCIDR.Contains(a):
		i = int(a.As4()[3])
	case a.Is6() && FabricCIDR6.Contains(a):
		b := a.As16()
		if b[8]|b[9]|b[10]|b[11]|b[12]|b[13] != 0 {
			return 0, false
		}
		n, ok := undec(uint16(b[14])<<8 | uint16(b[15]))
		if !ok {
			return 0, false
		}
		i = n
	default:
		return 0, false
	}
	return i, i >= 1 && i <= MaxNodes
}

// Limits that keep every address inside the plan: node i owns pod CIDR
// 198.18.(16+i).0/24 and fabric address 198.18.0.i, below ControlAddr.
const (
	MaxNodes       = 200
	MaxPodsPerNode = 250
	MaxNameLen     = 8
)

// MaxServers is how many server hosts (s1…s9, ServerAddr) a lab can have:
// their addresses fill the gap between DBAddr and ControlAddr.
const MaxServers = 9

// ServerAddr is server host k's address on the fabric (k is 1-based):
// 198.18.0.(240+k).
func ServerAddr(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, 0, byte(240 + k)})
}

// ServerName is the host name of server host k: sK.
func ServerName(k int) string { return "s" + strconv.Itoa(k) }

// NodeAddr is node i's address on the fabric (i is 1-based).
func NodeAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, 0, byte(i)})
}

// PodCIDR is the pod network routed to node i.
func PodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(16 + i), 0}), 24)
}

// PodGateway is the address every pod of node i uses as its default
// gateway; it is put (as a /32) on each of the node's pod-facing veths.
func PodGateway(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(16 + i), 1})
}

// PodAddr is the address of pod j (1-based) on node i.
func PodAddr(i, j int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(16 + i), byte(1 + j)})
}

// NodeName and PodName are the short names used on the command line, in
// echo answers and (after the lab prefix) in namespace names.
func NodeName(i int) string   { return "n" + strconv.Itoa(i) }
func PodName(i, j int) string { return fmt.Sprintf("n%d-p%d", i, j) }

// Fixed host names besides nodes and pods.
const (
	HostFabric = "fabric"
	HostRouter = "router"
	HostClient = "client"
	// HostDB runs the lab's PostgreSQL (Lab.StartPostgres).
	HostDB = "db"
)

// Kinds of hosts with an index, as ParseHost returns them.
const (
	KindNode   = "node"
	KindPod    = "pod"
	KindServer = "server"
)

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]{1,8}$`)
	podRE  = regexp.MustCompile(`^n([0-9]+)-p([0-9]+)$`)
	nodeRE = regexp.MustCompile(`^n([0-9]+)$`)
	srvRE  = regexp.MustCompile(`^s([0-9]+)$`)
)

// ValidName reports whether a lab name is acceptable: short, so that
// several labs can coexist and names stay readable, and free of '-', so
// that a namespace name maps back to exactly one lab.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("lab name %q: want 1-%d characters of [a-z0-9]", name, MaxNameLen)
	}
	return nil
}

// Prefix is the prefix of every namespace and cgroup of lab name.
func Prefix(name string) string { return "flb-" + name + "-" }

// NSName is the network namespace name of a host of lab name.
func NSName(name, host string) string { return Prefix(name) + host }

// ParseHost splits a host name into its kind and indices: node i, pod (i,
// j), server i, or one of the fixed hosts (i = j = 0).
func ParseHost(host string) (kind string, i, j int, err error) {
	switch host {
	case HostFabric, HostRouter, HostClient, HostDB:
		return host, 0, 0, nil
	}
	if m := podRE.FindStringSubmatch(host); m != nil {
		i, _ = strconv.Atoi(m[1])
		j, _ = strconv.Atoi(m[2])
		if i >= 1 && i <= MaxNodes && j >= 1 && j <= MaxPodsPerNode {
			return KindPod, i, j, nil
		}
	}
	if m := nodeRE.FindStringSubmatch(host); m != nil {
		i, _ = strconv.Atoi(m[1])
		if i >= 1 && i <= MaxNodes {
			return KindNode, i, 0, nil
		}
	}
	if m := srvRE.FindStringSubmatch(host); m != nil {
		i, _ = strconv.Atoi(m[1])
		if i >= 1 && i <= MaxServers {
			return KindServer, i, 0, nil
		}
	}
	return "", 0, 0, fmt.Errorf("unknown host %q: want nI, nI-pJ, sI, %s, %s, %s or %s", host, HostClient, HostRouter, HostFabric, HostDB)
}

// labOfNS returns the lab name encoded in a namespace or cgroup name made
// by the lab, or "" if the name is not ours.
func labOfNS(ns string) string {
	rest, ok := strings.CutPrefix(ns, "flb-")
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, "-")
	if !ok || ValidName(name) != nil {
		return ""
	}
	return name
}
