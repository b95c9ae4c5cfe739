package lab

// The kernel settings of each kind of lab namespace, and their writer.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Sysctls per role; docs/lab.md explains each one.
var (
	// Every namespace: dual-stack, with IPv6 addresses usable at once
	// (no duplicate address detection: the plan makes them unique) and
	// configured only by the lab (no router advertisements, no SLAAC, no
	// redirects taken, as none are taken in IPv4 either).
	sysctlAll = []sysctl{
		{key: "net.ipv6.conf.all.disable_ipv6", val: "0"},
		{key: "net.ipv6.conf.default.disable_ipv6", val: "0"},
		{key: "net.ipv6.conf.all.accept_dad", val: "0"},
		{key: "net.ipv6.conf.default.accept_dad", val: "0"},
		{key: "net.ipv6.conf.all.dad_transmits", val: "0"},
		{key: "net.ipv6.conf.default.dad_transmits", val: "0"},
		{key: "net.ipv6.conf.all.accept_ra", val: "0"},
		{key: "net.ipv6.conf.default.accept_ra", val: "0"},
		{key: "net.ipv6.conf.all.autoconf", val: "0"},
		{key: "net.ipv6.conf.default.autoconf", val: "0"},
		{key: "net.ipv6.conf.all.accept_redirects", val: "0"},
		{key: "net.ipv6.conf.default.accept_redirects", val: "0"},
	}
	// Routers (nodes and the router): forward, and accept asymmetric
	// paths (ECMP in, direct reply out) that rp_filter would drop; do not
	// send ICMP redirects when forwarding back onto the fabric, which
	// would teach hosts to bypass the node that owns the flow.
	sysctlForward = []sysctl{
		{key: "net.ipv4.ip_forward", val: "1"},
		{key: "net.ipv4.conf.all.rp_filter", val: "0"},
		{key: "net.ipv4.conf.default.rp_filter", val: "0"},
		{key: "net.ipv4.conf.all.send_redirects", val: "0"},
		{key: "net.ipv4.conf.default.send_redirects", val: "0"},
		{key: "net.ipv6.conf.all.forwarding", val: "1"},
	}
	// Nodes: short TIME_WAIT in conntrack so load tests do not fill the
	// table with finished connections.
	sysctlNode = []sysctl{
		{key: "net.netfilter.nf_conntrack_tcp_timeout_time_wait", val: "5", optional: true},
		{key: "net.ipv4.ip_local_port_range", val: "1024 65535"},
	}
	// Router: hash ECMP on the 5-tuple, so one client spreads its
	// connections over the nodes.
	sysctlRouter = []sysctl{
		{key: "net.ipv4.fib_multipath_hash_policy", val: "1"},
		{key: "net.ipv6.fib_multipath_hash_policy", val: "1"},
	}
	// Endpoints (pods, client, server and database hosts): many short
	// connections.
	sysctlEndpoint = []sysctl{
		{key: "net.ipv4.ip_local_port_range", val: "1024 65535"},
		{key: "net.ipv4.tcp_tw_reuse", val: "1"},
		{key: "net.core.somaxconn", val: "4096"},
		{key: "net.ipv4.ping_group_range", val: "0 2147483647"},
	}
	sysctlFabric = []sysctl{
		{key: "net.ipv4.conf.all.rp_filter", val: "0"},
		{key: "net.ipv4.conf.default.rp_filter", val: "0"},
	}
)

func sysctlsFor(kind string) []sysctl {
	out := slices.Clone(sysctlAll)
	switch kind {
	case KindNode:
		out = append(append(out, sysctlForward...), sysctlNode...)
	case HostRouter:
		out = append(append(out, sysctlForward...), sysctlRouter...)
	case KindPod, HostClient, KindServer, HostDB:
		out = append(out, sysctlEndpoint...)
	case HostFabric:
		out = append(out, sysctlFabric...)
	}
	return out
}

// setSysctls writes sysctls of the calling thread's network namespace
// (/proc/sys/net follows the namespace of the thread that opens it).
// Keys are dotted; a missing key is an error unless optional.
func setSysctls(kv []sysctl) error {
	for _, s := range kv {
		p := "/proc/sys/" + strings.ReplaceAll(s.key, ".", "/")
		if err := os.WriteFile(p, []byte(s.val), 0o644); err != nil {
			if s.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("sysctl %s=%s: %w", s.key, s.val, err)
		}
	}
	return nil
}

// sysctl is one setting; an optional one may be missing from the kernel.
type sysctl struct {
	key, val string
	optional bool
}
