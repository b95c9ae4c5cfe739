package flows

import (
	"slices"
	"strconv"
	"strings"
)

// Tags by which the Octavia model carries what it has no field for.
const (
	// TagLocalOnly on a listener: traffic entering a node from outside goes
	// only to that node's members and keeps the client's address
	// (Kubernetes externalTrafficPolicy=Local).
	TagLocalOnly = "flowlb:local-only"
	// TagInternalLocal on a listener: traffic from the pod networks and
	// from the node itself goes only to that node's members (Kubernetes
	// internalTrafficPolicy=Local); with none there, it is dropped.
	TagInternalLocal = "flowlb:internal-local"
	// TagNodePort on a listener: its protocol_port is a node port, served
	// on every node's own addresses (the agent's --nodeport-addresses)
	// rather than on the load balancer's VIPs (Kubernetes NodePort); the
	// compiler keys its service by NodePortVIP.
	TagNodePort = "flowlb:node-port"
	// TagHealthCheckNodePortPrefix on a local-only listener,
	// "flowlb:health-check-node-port=<port>": every node answers
	// kube-proxy's service health check on that port of its node-port
	// addresses, 200 while it has a backend of the listener
	// (Kubernetes spec.healthCheckNodePort); the compiler puts it in
	// Service.HealthCheckNodePort.
	TagHealthCheckNodePortPrefix = "flowlb:health-check-node-port="
	// TagKubeServicePrefix on a load balancer, "flowlb:kube-service=
	// <namespace>/<name>": the Kubernetes Service it serves, which the
	// health check names in its answer (Service.HealthCheckService).
	TagKubeServicePrefix = "flowlb:kube-service="
	// TagExternalIPPrefix on a listener, "flowlb:external-ip=<address>",
	// once per address: one more address the listener is served on, beside
	// the load balancer's VIPs (Kubernetes spec.externalIPs). Unlike an
	// additional VIP it takes no address from a subnet: the address is the
	// Service's to name, as in Kubernetes.
	TagExternalIPPrefix = "flowlb:external-ip="
	// TagNodePrefix on a member, "flowlb:node=<name>": the node it runs on.
	TagNodePrefix = "flowlb:node="
	// TagPreferClose on a listener: each node sends the traffic to the
	// members for itself, or else for its own zone, when there is one
	// (Kubernetes trafficDistribution PreferSameNode, PreferClose); see
	// Service.Near.
	TagPreferClose = "flowlb:prefer-close"
	// TagZonePrefix on a member, "flowlb:zone=<zone>", once per zone: the
	// zones whose nodes prefer it.
	TagZonePrefix = "flowlb:zone="
	// TagForNodePrefix on a member, "flowlb:for-node=<name>", once per
	// node: the nodes that prefer it (Kubernetes' node hints).
	TagForNodePrefix = "flowlb:for-node="
	// TagTerminating on a member: it is terminating and still serving (a
	// Kubernetes endpoint taken because no ready one is left). Traffic
	// still goes to it; a health check node port does not count it, as
	// kube-proxy counts ready endpoints only.
	TagTerminating = "flowlb:terminating"
)

// NodeOf returns the node a member's tags name (the first
// flowlb:node= tag), or "" when none does.
func NodeOf(tags []string) string {
	for _, t := range tags {
		if n, ok := strings.CutPrefix(t, TagNodePrefix); ok {
			return n
		}
	}
	return ""
}

// HealthCheckNodePortOf returns the port a listener's first
// flowlb:health-check-node-port= tag names, 0 when none names one
// (a value that is not a port from 1 to 65535 is ignored).
func HealthCheckNodePortOf(tags []string) uint16 {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, TagHealthCheckNodePortPrefix); ok {
			if n, err := strconv.ParseUint(v, 10, 16); err == nil && n > 0 {
				return uint16(n)
			}
		}
	}
	return 0
}

// KubeServiceOf returns the namespace/name a load balancer's
// flowlb:kube-service= tag names, or "".
func KubeServiceOf(tags []string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, TagKubeServicePrefix); ok {
			return v
		}
	}
	return ""
}

// ZonesOf lists the zones a member's flowlb:zone= tags name, sorted,
// without repeats or empty names; nil when there are none.
func ZonesOf(tags []string) []string { return valuesOf(tags, TagZonePrefix) }

// IsTerminating reports whether a member's tags say it is terminating
// (TagTerminating).
func IsTerminating(tags []string) bool { return slices.Contains(tags, TagTerminating) }

// ForNodesOf lists the nodes a member's flowlb:for-node= tags name, as
// ZonesOf.
func ForNodesOf(tags []string) []string { return valuesOf(tags, TagForNodePrefix) }

// valuesOf lists the values of the tags with prefix, sorted, without
// repeats or empty values; nil when there are none.
func valuesOf(tags []string, prefix string) []string {
	var out []string
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, prefix); ok && v != "" {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
