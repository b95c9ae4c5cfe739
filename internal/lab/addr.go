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
