// Package octaviaext names flowlb's extensions to the Octavia API that a
// client opts into with a request header. A real Octavia ignores the
// header, so a client learns whether the server honoured it from the
// answer's header of the same name, and does without when it is absent.
package octaviaext

// UniqueName, on POST /v2/lbaas/loadbalancers with the value Requested,
// makes the create conditional on its name: it is refused with 409 and
// the answer's UniqueName header set to Taken when a load balancer of that
// name exists in any project, and otherwise answered with the header set
// to Checked. A client that names its load balancers after what they
// serve (the kube-controller) so creates one for a new object without a
// list by name first, and falls back to the list when the name is taken.
// Conditional creates of one name are serialised across replicas; a plain
// create of the same name is not refused (Octavia allows duplicates).
const UniqueName = "X-Flowlb-Unique-Name"

// Values of the UniqueName header.
const (
	Requested = "require"
	Checked   = "checked"
	Taken     = "taken"
)
