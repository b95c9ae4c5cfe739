package agent

import (
	"math"
	"net/netip"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// A VIP whose members are the nodes' node ports (cloud-provider-openstack
// builds them so: node:nodePort) cannot send a connection to this node's
// own node port through the kernel: the VIP's translation is the
// connection's one translation, so the node-port service's never applies
// and the node's stack, where nothing listens on the node port, refuses
// it. Members on other nodes work: the packet leaves, and that node takes
// it as a new connection to its node port. So each agent flattens the
// chain for its own node: a backend that is one of this node's node ports
// is replaced by that node port's endpoints, as the node port would pick
// them here. docs/dataplane.md ("A VIP's member that is this node's own
// node port") says why the result is what the two hops would have done.

// flatten returns s as this node serves it. Each backend of s whose
// address is one of self and whose port is a node port of s's protocol
// that lookup finds (a node-port service of the address's family) is
// replaced by that node port's endpoints for this node: with
// externalTrafficPolicy Local (LocalOnly) those on node only, which keep
// the client's address as the node port does (KeepClient), with
// PreferClose those Near node and zone, else all of them. The backend's
// weight is spread over them in proportion to their own weights, and
// weights are then made whole (see wholeWeights). A replaced backend
// whose node port has no endpoint for this node leaves s, as the node
// port would have refused or dropped its connections. Node-port
// services are returned as they are: only one hop is followed.
func flatten(s flows.Service, lookup func(flows.Key) (flows.Service, bool), self map[netip.Addr]bool, node, zone string) flows.Service {
	if s.Key.NodePort() || !dependsOnSelf(s, self) {
		return s
	}
	var out []flows.Backend
	var weights []float64
	replaced := false
	for _, b := range s.Backends {
		np, ok := flows.Service{}, false
		if self[b.Address] {
			np, ok = lookup(nodePortKey(s.Key.Protocol, b))
		}
		if !ok {
			out, weights = append(out, b), append(weights, float64(b.Weight))
			continue
		}
		replaced = true
		eps := endpointsHere(np, node, zone)
		total := 0
		for _, e := range eps {
			total += e.Weight
		}
		for _, e := range eps {
			// The member is still s's: what its endpoints count is its.
			// A local-only node port keeps the client's address; so do
			// its endpoints in s (docs/dataplane.md).
			out = append(out, flows.Backend{MemberID: b.MemberID, Address: e.Address, Port: e.Port, Node: e.Node, Zones: b.Zones, ForNodes: b.ForNodes,
				KeepClient: np.LocalOnly})
			weights = append(weights, float64(b.Weight)*float64(e.Weight)/float64(total))
		}
	}
	if !replaced {
		return s
	}
	out, weights = mergeSame(out, weights)
	for i, w := range wholeWeights(weights) {
		out[i].Weight = w
	}
	s.Backends = out
	return s
}

// dependsOnSelf reports whether a backend of s is on one of the node's
// addresses (a candidate for flattening).
func dependsOnSelf(s flows.Service, self map[netip.Addr]bool) bool {
	for _, b := range s.Backends {
		if self[b.Address] {
			return true
		}
	}
	return false
}

// selfNodePorts lists the node-port keys that flattening s reads: those
// of its backends on the node's addresses, whether the node ports exist
// or not (one that appears later changes s).
func selfNodePorts(s flows.Service, self map[netip.Addr]bool) []flows.Key {
	if s.Key.NodePort() {
		return nil
	}
	var out []flows.Key
	for _, b := range s.Backends {
		if self[b.Address] {
			out = append(out, nodePortKey(s.Key.Protocol, b))
		}
	}
	return out
}

// nodePortKey is the key of the node-port service a backend at one of
// the node's addresses would reach.
func nodePortKey(p flows.Protocol, b flows.Backend) flows.Key {
	vip := flows.NodePortVIP
	if b.Address.Is6() {
		vip = flows.NodePortVIP6
	}
	return flows.Key{VIP: vip, Protocol: p, Port: b.Port}
}

// endpointsHere are the endpoints a connection to node port np, entering
// this node, may reach.
func endpointsHere(np flows.Service, node, zone string) []flows.Backend {
	if np.LocalOnly {
		var out []flows.Backend
		for _, e := range np.Backends {
			if e.Node != "" && e.Node == node {
				out = append(out, e)
			}
		}
		return out
	}
	near, _ := np.Near(node, zone)
	return near
}

// mergeSame folds backends of the same address and port into the first,
// adding their weights: two members on two addresses of this node, or a
// member that is also an endpoint, lead to one backend. It keeps the
// client's address only if each of them does: a member of the VIP's own
// follows the VIP's masquerade.
func mergeSame(bs []flows.Backend, ws []float64) ([]flows.Backend, []float64) {
	at := map[netip.AddrPort]int{}
	var out []flows.Backend
	var outW []float64
	for i, b := range bs {
		ap := netip.AddrPortFrom(b.Address, b.Port)
		if j, ok := at[ap]; ok {
			outW[j] += ws[i]
			out[j].KeepClient = out[j].KeepClient && b.KeepClient
			continue
		}
		at[ap] = len(out)
		out, outW = append(out, b), append(outW, ws[i])
	}
	return out, outW
}

// maxWeight is the largest backend weight (Octavia's).
const maxWeight = 256

// wholeWeights turns proportional weights into backend weights of
// 1..maxWeight with the same ratios: multiplied by the least whole
// factor that makes every one whole, when none then exceeds maxWeight
// (a member of weight 1 over two endpoints: the others' weights doubled,
// the endpoints' 1); otherwise scaled so that the largest is maxWeight
// and rounded, none below 1 (Maglev's 61 slots are coarser than that).
func wholeWeights(ws []float64) []int {
	out := make([]int, len(ws))
factors:
	for f := 1; f <= maxWeight; f++ {
		for i, w := range ws {
			x := w * float64(f)
			r := math.Round(x)
			switch {
			case r > maxWeight:
				break factors // a larger factor only makes it larger
			case math.Abs(x-r) > 1e-9:
				continue factors
			}
			out[i] = int(r)
		}
		return out
	}
	top := 0.0
	for _, w := range ws {
		top = max(top, w)
	}
	for i, w := range ws {
		out[i] = max(1, int(math.Round(w/top*maxWeight)))
	}
	return out
}
