// Package dataplane is what the kernel data planes (nftables, ebpf) share
// with the agent beside the flows: the report of a check of the kernel
// against what a data plane programmed, and of the repairs it made.
package dataplane

import (
	"maps"
	"slices"
	"time"
)

// Kinds of repair: what a check found removed or changed by another hand
// and wrote again. Each counts objects: a table rebuilt whole counts one
// table, not its sets and elements.
const (
	Table      = "table"       // an nftables table, rebuilt with all it holds
	Chain      = "chain"       // a chain written again with its rules, or another's chain removed from the table
	Set        = "set"         // a set or map added again with its elements, or another's removed from the table
	Element    = "element"     // a set or map element added again, rewritten, or another's removed
	EBPFMap    = "ebpf_map"    // an eBPF services map entry rewritten or removed
	EBPFAttach = "ebpf_attach" // an eBPF program attached to the cgroup again
	// OVNLoadBalancer: an OVN northbound Load_Balancer row of flowlb's
	// written again, rewritten, or a stale or duplicate one removed.
	OVNLoadBalancer = "ovn_load_balancer"
	// OVNAttach: a Load_Balancer row attached again to (or detached
	// from) a logical switch or router.
	OVNAttach = "ovn_attach"
	// OVNACL: an OVN northbound ACL of flowlb's (a listener's
	// allowed_cidrs) written again, rewritten, or put back on (or taken
	// off) a logical switch.
	OVNACL = "ovn_acl"
)

// Kinds lists the kinds of repair.
var Kinds = []string{Table, Chain, Set, Element, EBPFMap, EBPFAttach, OVNLoadBalancer, OVNAttach, OVNACL}

// Check is what one verification of a data plane did.
type Check struct {
	// Scope says what the check read: each data plane names its levels
	// (docs/dataplane.md, The reconciler).
	Scope string
	// Repaired counts the objects written again, by kind.
	Repaired map[string]int
	// Detected is when the first difference repaired was seen: a
	// notification's arrival, or the check that found it. Zero when
	// nothing was repaired.
	Detected time.Time
	// What says what was repaired, for the log ("ip flowlb: table
	// rebuilt").
	What []string
}

// Repairs counts the objects repaired, of every kind.
func (c Check) Repairs() int {
	n := 0
	for _, v := range c.Repaired {
		n += v
	}
	return n
}

// Repair records n objects of kind repaired, seen at detected.
func (c *Check) Repair(kind string, n int, detected time.Time, what string) {
	if n <= 0 {
		return
	}
	if c.Repaired == nil {
		c.Repaired = map[string]int{}
	}
	c.Repaired[kind] += n
	if c.Detected.IsZero() || (!detected.IsZero() && detected.Before(c.Detected)) {
		c.Detected = detected
	}
	if what != "" {
		c.What = append(c.What, what)
	}
}

// Add merges another check into c: the scopes joined, the repairs summed,
// the earlier detection kept.
func (c *Check) Add(o Check) {
	switch {
	case c.Scope == "":
		c.Scope = o.Scope
	case o.Scope != "" && o.Scope != c.Scope:
		c.Scope += "+" + o.Scope
	}
	for _, k := range slices.Sorted(maps.Keys(o.Repaired)) {
		c.Repair(k, o.Repaired[k], o.Detected, "")
	}
	c.What = append(c.What, o.What...)
}
