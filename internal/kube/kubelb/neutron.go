package kubelb

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
)

// Neutron gives load balancers' VIP ports their floating IPs through a
// Neutron v2 API (flowlb's subset or a cloud's): Load reads, PlanFloatingIP
// decides, Apply sends.
type Neutron struct {
	// Client is nil when the cloud has no network endpoint: every call
	// then fails.
	Client *gophercloud.ServiceClient
}

// Apply gives the VIP port portID of load balancer lbName the floating IP
// want, or releases its floating IPs when want is nil, and returns the
// floating IP's address and the number of calls sent.
func (n *Neutron) Apply(ctx context.Context, lbName, portID string, want *FloatingIP) (addr string, calls int, err error) {
	if n.Client == nil {
		return "", 0, errors.New("floating IPs need a network API, and the cloud's catalog has no network endpoint")
	}
	if want != nil && portID == "" {
		return "", 0, fmt.Errorf("load balancer %s has no VIP port to give a floating IP", lbName)
	}
	st, err := n.Load(ctx, lbName, portID, want)
	if err != nil {
		return "", 0, err
	}
	plan, err := PlanFloatingIP(st, want, FIPDescription(lbName))
	if err != nil {
		return "", 0, err
	}
	addr = plan.Address
	for _, c := range plan.Calls {
		calls++
		a, err := n.send(ctx, c)
		if err != nil {
			return "", calls, err
		}
		if c.Op == FIPCreate || c.Op == FIPAssociate {
			addr = a
		}
	}
	return addr, calls, nil
}

// Load reads the floating IPs of VIP port portID ("" for none), those of
// load balancer lbName's, and the one of want's address, and resolves
// want's network.
func (n *Neutron) Load(ctx context.Context, lbName, portID string, want *FloatingIP) (FIPState, error) {
	st := FIPState{PortID: portID}
	var err error
	if portID != "" {
		if st.OnPort, err = n.list(ctx, floatingips.ListOpts{PortID: portID}); err != nil {
			return st, err
		}
	}
	if st.Owned, err = n.list(ctx, floatingips.ListOpts{Description: FIPDescription(lbName)}); err != nil {
		return st, err
	}
	if want == nil {
		return st, nil
	}
	if st.NetworkID, err = n.networkID(ctx, want.Network); err != nil {
		return st, err
	}
	if want.Address != "" {
		fs, err := n.list(ctx, floatingips.ListOpts{FloatingIP: want.Address})
		if err != nil {
			return st, err
		}
		if len(fs) > 0 {
			st.Requested = &fs[0]
		}
	}
	return st, nil
}

func (n *Neutron) list(ctx context.Context, opts floatingips.ListOpts) ([]FIP, error) {
	pages, err := floatingips.List(n.Client, opts).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("list floating IPs: %w", err)
	}
	all, err := floatingips.ExtractFloatingIPs(pages)
	if err != nil {
		return nil, fmt.Errorf("list floating IPs: %w", err)
	}
	out := make([]FIP, 0, len(all))
	for _, f := range all {
		out = append(out, FIP{ID: f.ID, Address: f.FloatingIP, NetworkID: f.FloatingNetworkID, PortID: f.PortID, Description: f.Description})
	}
	return out, nil
}

// networkID resolves a network given by ID or by name (an ID first, as
// the openstack CLI does; only a UUID is looked up as an ID).
func (n *Neutron) networkID(ctx context.Context, ref string) (string, error) {
	lookups := []networks.ListOpts{{Name: ref}}
	if uuid.Validate(ref) == nil {
		lookups = append([]networks.ListOpts{{ID: ref}}, lookups...)
	}
	for _, opts := range lookups {
		pages, err := networks.List(n.Client, opts).AllPages(ctx)
		if err != nil {
			return "", fmt.Errorf("find floating network %q: %w", ref, err)
		}
		ns, err := networks.ExtractNetworks(pages)
		if err != nil {
			return "", fmt.Errorf("find floating network %q: %w", ref, err)
		}
		switch len(ns) {
		case 0:
		case 1:
			return ns[0].ID, nil
		default:
			return "", fmt.Errorf("floating network %q: %d networks have that name, give its ID", ref, len(ns))
		}
	}
	return "", fmt.Errorf("floating network %q: no such network", ref)
}

// send makes one call and returns the floating IP's address after it.
func (n *Neutron) send(ctx context.Context, c FIPCall) (string, error) {
	var r floatingips.UpdateResult
	switch c.Op {
	case FIPCreate:
		f, err := floatingips.Create(ctx, n.Client, floatingips.CreateOpts{FloatingNetworkID: c.NetworkID, FloatingIP: c.Address,
			PortID: c.PortID, Description: c.Description}).Extract()
		if err != nil {
			return "", fmt.Errorf("create floating IP on network %s for port %s: %w", c.NetworkID, c.PortID, err)
		}
		return f.FloatingIP, nil
	case FIPAssociate:
		r = floatingips.Update(ctx, n.Client, c.ID, floatingips.UpdateOpts{PortID: &c.PortID})
	case FIPDisassociate:
		r = floatingips.Update(ctx, n.Client, c.ID, floatingips.UpdateOpts{PortID: new(string)})
	case FIPDelete:
		if err := floatingips.Delete(ctx, n.Client, c.ID).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, 404) {
			return "", fmt.Errorf("delete floating IP %s: %w", c.ID, err)
		}
		return "", nil
	}
	f, err := r.Extract()
	if err != nil {
		return "", fmt.Errorf("%s floating IP %s: %w", c.Op, c.ID, err)
	}
	return f.FloatingIP, nil
}
