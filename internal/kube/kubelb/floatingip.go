package kubelb

import (
	"fmt"
	"slices"
)

// Floating IPs of LoadBalancer Services in the Kuryr model: Neutron
// holds them, PlanFloatingIP (pure) decides the calls and Neutron.Apply
// sends them. The controller owns the floating IPs it creates, and only
// those: they carry FIPDescription of their load balancer, and are deleted
// when released; one the Service named (spec.loadBalancerIP) that existed
// before is only disassociated.

// FIPDescription is the description of the floating IPs the controller
// creates for load balancer lbName: how it knows them as its own.
// Neutron's floating IP create takes no tags in every release (and
// gophercloud's has none), so the description it always takes is used.
func FIPDescription(lbName string) string { return "flowlb:kube-lb=" + lbName }

// FIP is a floating IP as Neutron shows it: the parts the plan reads.
type FIP struct {
	ID          string `json:"id"`
	Address     string `json:"floating_ip_address"`
	NetworkID   string `json:"floating_network_id"`
	PortID      string `json:"port_id"`
	Description string `json:"description"`
}

// FIPState is what Neutron holds around one load balancer's VIP port.
type FIPState struct {
	// PortID is the VIP port; NetworkID the wanted floating network,
	// resolved to its ID ("" when releasing).
	PortID, NetworkID string
	// OnPort are the floating IPs associated with the VIP port; Owned
	// those carrying the load balancer's FIPDescription, wherever they
	// are (a replaced load balancer leaves them unassociated).
	OnPort, Owned []FIP
	// Requested is the floating IP of the wanted address, if one exists.
	Requested *FIP
}

// FIPOp is what a FIPCall does.
type FIPOp int

const (
	FIPCreate FIPOp = iota // with port_id: created associated
	FIPAssociate
	FIPDisassociate
	FIPDelete
)

func (o FIPOp) String() string {
	return [...]string{"create", "associate", "disassociate", "delete"}[o]
}

// FIPCall is one Neutron floating IP request.
type FIPCall struct {
	Op FIPOp
	// ID is the floating IP (not for a create).
	ID string
	// NetworkID, Address ("": any) and Description are a create's; PortID
	// is where a create or an associate puts it.
	NetworkID, Address, Description, PortID string
}

// FIPPlan is the calls that give the VIP port the wanted floating IP, or
// release them, in order, and the address served when it is known
// without a create ("" otherwise: the create's answer has it).
type FIPPlan struct {
	Calls   []FIPCall
	Address string
}

// PlanFloatingIP is the calls that take st to want for the load balancer
// whose floating IPs carry description desc (want nil: release them).
// The VIP port ends with exactly one floating IP, want's:
//   - an address named: that floating IP, associated if it is not yet;
//     one that does not exist is created, and is then the controller's;
//   - none named: the controller's own on the network, kept or
//     re-associated, else a new one.
//
// Every other floating IP on the port is deleted if the controller's,
// disassociated if not, and the controller's elsewhere are deleted. These
// go first: a fixed address takes one floating IP at a time.
func PlanFloatingIP(st FIPState, want *FloatingIP, desc string) (FIPPlan, error) {
	owned := func(f FIP) bool { return f.Description == desc }
	var plan FIPPlan
	var add *FIPCall
	keep := ""
	switch {
	case want == nil:
	case want.Address != "" && st.Requested == nil:
		add = &FIPCall{Op: FIPCreate, NetworkID: st.NetworkID, Address: want.Address, Description: desc, PortID: st.PortID}
	case want.Address != "":
		r := *st.Requested
		if r.NetworkID != st.NetworkID {
			return FIPPlan{}, fmt.Errorf("floating IP %s is on network %s, not on the floating network %s", r.Address, r.NetworkID, st.NetworkID)
		}
		if r.PortID != "" && r.PortID != st.PortID {
			return FIPPlan{}, fmt.Errorf("floating IP %s is associated with port %s, not this load balancer's VIP port", r.Address, r.PortID)
		}
		keep, plan.Address = r.ID, r.Address
		if r.PortID == "" {
			add = &FIPCall{Op: FIPAssociate, ID: r.ID, PortID: st.PortID}
		}
	default:
		reusable := func(f FIP) bool { return owned(f) && f.NetworkID == st.NetworkID }
		if i := slices.IndexFunc(st.OnPort, reusable); i >= 0 {
			keep, plan.Address = st.OnPort[i].ID, st.OnPort[i].Address
		} else if i := slices.IndexFunc(st.Owned, func(f FIP) bool { return reusable(f) && f.PortID == "" }); i >= 0 {
			keep, plan.Address = st.Owned[i].ID, st.Owned[i].Address
			add = &FIPCall{Op: FIPAssociate, ID: keep, PortID: st.PortID}
		} else {
			add = &FIPCall{Op: FIPCreate, NetworkID: st.NetworkID, Description: desc, PortID: st.PortID}
		}
	}
	seen := map[string]bool{keep: true}
	for _, f := range append(slices.Clone(st.OnPort), st.Owned...) {
		if seen[f.ID] {
			continue
		}
		seen[f.ID] = true
		switch {
		case owned(f):
			plan.Calls = append(plan.Calls, FIPCall{Op: FIPDelete, ID: f.ID})
		case f.PortID == st.PortID:
			plan.Calls = append(plan.Calls, FIPCall{Op: FIPDisassociate, ID: f.ID})
		}
	}
	if add != nil {
		plan.Calls = append(plan.Calls, *add)
	}
	return plan, nil
}
