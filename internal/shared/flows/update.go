package flows

import "net/netip"

// Update is one message of the agent stream in flow terms: the whole
// table (Snapshot) or a change of it, at a revision of the server's
// change log (internal/shared/flowpb translates it from the protocol, once, at
// the agent's edge). Applied to a table, in this order:
//
//   - each load balancer's replacement, entry after entry: the keys the
//     load balancer holds go, and its entry's services come in its name,
//     so that a key another load balancer held is the entry's now, and
//     of two entries claiming a key the later wins;
//   - the key deletes;
//   - the key upserts.
//
// A snapshot applies on an empty table. Per-load-balancer replacements
// make the result independent of which replica's view the table came
// from.
type Update struct {
	Epoch    string
	Revision int64
	Snapshot bool

	LoadBalancers []LoadBalancerServices
	Deletes       []Key
	Upserts       []Service

	// ProbesSet says Probes replace the node's probe list; without it
	// the list stays as it was.
	ProbesSet bool
	Probes    []Probe

	// L2Set says L2VIPs replace the external VIPs the node answers ARP
	// and neighbour discovery for (the server gives each to one node);
	// without it they stay as they were.
	L2Set  bool
	L2VIPs []netip.Addr
}

// LoadBalancerServices are every service of one load balancer (none: it
// has none left), each of load balancer ID.
type LoadBalancerServices struct {
	ID       string
	Services []Service
}
