// Package flows is the node-neutral model of what every node's data plane
// must do: for each VIP, protocol and port, which backends take new
// connections and how one is chosen, and which members to probe. The
// server compiles it from the LBaaS tree (internal/server/compiler); the agents
// and data planes consume it. It imports nothing else of flowlb, so that
// the kernel side never depends on the server's.
package flows

import (
	"net/netip"
	"slices"
	"time"
)

// Protocol is an L4 protocol a flow matches.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Algorithm selects a backend for a new connection.
type Algorithm string

const (
	// RoundRobin is even random selection per new connection: with no
	// shared counter across nodes a true rotation is impossible, and
	// random selection gives the same long-run spread.
	RoundRobin   Algorithm = "ROUND_ROBIN"
	SourceIP     Algorithm = "SOURCE_IP"
	SourceIPPort Algorithm = "SOURCE_IP_PORT"
)

// Key identifies a service: the packet fields a data plane matches on.
// A node port's VIP is NodePortVIP: it stands for every address of the
// node a data plane runs on.
type Key struct {
	VIP      netip.Addr
	Protocol Protocol
	Port     uint16
}

// NodePortVIP is the VIP of a node-port service (0.0.0.0), and
// NodePortVIP6 that of its IPv6 twin (::), served on the node's IPv6
// addresses: no packet is ever addressed to them, so they cannot clash
// with a real VIP.
var (
	NodePortVIP  = netip.IPv4Unspecified()
	NodePortVIP6 = netip.IPv6Unspecified()
)

// NodePort reports whether k is a node port, served on the node's own
// addresses.
func (k Key) NodePort() bool { return k.VIP == NodePortVIP || k.VIP == NodePortVIP6 }

// Backend is one member that may take new connections.
type Backend struct {
	MemberID string
	Address  netip.Addr
	Port     uint16
	// Weight is 1..256; members of weight 0 never appear here.
	Weight int
	// Node is the name of the node the member runs on, when known; used
	// by local-only services.
	Node string
	// Zones are the topology zones whose nodes this backend serves first
	// (PreferClose services): its own zone, or the zones Kubernetes hints.
	Zones []string
	// ForNodes are the nodes this backend serves first (PreferClose
	// services): the node hints of Kubernetes' trafficDistribution
	// PreferSameNode, its own node.
	ForNodes []string
	// KeepClient: a connection to this backend from outside the pod
	// networks keeps the client's address, where a service that is not
	// local-only masquerades it. The agent sets it on the endpoints of
	// its node's own local-only node port (externalTrafficPolicy Local)
	// that it puts in place of a VIP's member on that node port
	// (internal/node/agent/flatten.go): the node port would have kept it.
	KeepClient bool
	// Terminating: the member is terminating and still serves
	// (TagTerminating); it counts for no health check.
	Terminating bool
}

// SameBackend reports whether two backends are equal in every field (a
// nil and an empty list are equal).
func SameBackend(a, b Backend) bool {
	return a.MemberID == b.MemberID && a.Address == b.Address && a.Port == b.Port && a.Weight == b.Weight && a.Node == b.Node &&
		slices.Equal(a.Zones, b.Zones) && slices.Equal(a.ForNodes, b.ForNodes) && a.KeepClient == b.KeepClient &&
		a.Terminating == b.Terminating
}

// Persistence pins a client to a backend for Timeout after its last packet.
type Persistence struct {
	// Type is SOURCE_IP, the only kind a flow data plane can keep.
	Type    string
	Timeout time.Duration
}

// Service is one VIP:port:protocol and the backends behind it.
type Service struct {
	Key            Key
	LoadBalancerID string
	ListenerID     string
	PoolID         string
	Algorithm      Algorithm
	Persistence    *Persistence
	// AllowedCIDRs, when not empty, are the only sources that may connect.
	AllowedCIDRs []netip.Prefix
	// AllowNone: no source may connect (security groups that admit none
	// to this service); AllowedCIDRs is then empty. An empty AllowedCIDRs
	// alone admits every source.
	AllowNone bool
	// ConnectionLimit is the listener's limit, -1 for none.
	ConnectionLimit int
	// Backends are the usable backends: primaries, or the backup members
	// when no primary is usable. Empty means new connections are rejected.
	Backends []Backend
	// LocalOnly services send traffic that enters a node from outside only
	// to that node's backends and keep the client's address.
	LocalOnly bool
	// InternalLocal services send traffic from the pod networks and from
	// the node itself only to that node's backends.
	InternalLocal bool
	// PreferClose services send a node's traffic to the backends for the
	// node, or else for the node's zone, when there are any (Near).
	PreferClose bool
	// HealthCheckNodePort, when not 0, is the port on which every node
	// answers kube-proxy's health check of the Kubernetes Service
	// HealthCheckService (namespace/name): 200 while the node holds one of
	// the backends, 503 otherwise (package kubehealth).
	HealthCheckNodePort uint16
	HealthCheckService  string
	// OwnVIP: Key.VIP is the load balancer's own address (its VIP, an
	// additional VIP or a floating IP of its VIP port), which nodes hold
	// for it and on which only its listeners' ports are open: a new
	// connection to another port of it is dropped. False for the
	// addresses a listener borrows (its external IPs, which may be a
	// node's own) and for node ports.
	OwnVIP bool
	// L7, when set, steers the service to the proxy on the client's own
	// node, which routes each request (an HTTP listener).
	L7 *L7
}

// Equal reports whether two services are equal in every field (nil and
// empty lists are equal): the one definition of an unchanged service.
func (s Service) Equal(o Service) bool {
	return s.Key == o.Key && s.LoadBalancerID == o.LoadBalancerID && s.ListenerID == o.ListenerID && s.PoolID == o.PoolID &&
		s.Algorithm == o.Algorithm && samePersistence(s.Persistence, o.Persistence) &&
		slices.Equal(s.AllowedCIDRs, o.AllowedCIDRs) && s.AllowNone == o.AllowNone && s.ConnectionLimit == o.ConnectionLimit &&
		slices.EqualFunc(s.Backends, o.Backends, SameBackend) &&
		s.LocalOnly == o.LocalOnly && s.InternalLocal == o.InternalLocal && s.PreferClose == o.PreferClose &&
		s.HealthCheckNodePort == o.HealthCheckNodePort && s.HealthCheckService == o.HealthCheckService && s.OwnVIP == o.OwnVIP &&
		sameL7(s.L7, o.L7)
}

func samePersistence(a, b *Persistence) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Near returns the backends that the node named node, in zone, sends
// the service's traffic to (apart from the node-local policies), and
// whether topology narrowed them: for a PreferClose service, those for
// the node when every backend names its nodes and at least one names
// this one (trafficDistribution PreferSameNode's node hints), else
// ForZone's. kube-proxy reads EndpointSlice hints the same way: the node
// level first, each level only when every endpoint has its hints.
func (s Service) Near(node, zone string) ([]Backend, bool) {
	if !s.PreferClose || node == "" {
		return s.ForZone(zone)
	}
	var out []Backend
	for _, b := range s.Backends {
		if len(b.ForNodes) == 0 {
			return s.ForZone(zone)
		}
		if slices.Contains(b.ForNodes, node) {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return s.ForZone(zone)
	}
	return out, true
}

// ForZone returns the backends that a node in zone sends the service's
// traffic to (apart from the node-local policies), and whether they are
// limited to the zone: for a PreferClose service on a node that knows its
// zone, the backends for that zone when every backend names its zones and
// at least one is for this one, as kube-proxy uses topology hints only
// when every endpoint has them; otherwise every backend.
func (s Service) ForZone(zone string) ([]Backend, bool) {
	if !s.PreferClose || zone == "" {
		return s.Backends, false
	}
	var out []Backend
	for _, b := range s.Backends {
		if len(b.Zones) == 0 {
			return s.Backends, false
		}
		if slices.Contains(b.Zones, zone) {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return s.Backends, false
	}
	return out, true
}

// Table is the whole desired state at one revision.
type Table struct {
	Revision int64
	Services map[Key]Service
}

// Servable reports whether the node named node can serve s's traffic
// from outside, and so may attract it (announce it, answer ARP for it):
// a local-only service when one of its backends runs on the node, any
// other when it has a backend at all.
func (s Service) Servable(node string) bool {
	if !s.LocalOnly {
		return len(s.Backends) > 0
	}
	return slices.ContainsFunc(s.Backends, func(b Backend) bool { return b.Node != "" && b.Node == node })
}
