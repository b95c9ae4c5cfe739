// Package neutronapi takes load balancers' VIPs from a real Neutron
// (`flowlb server --network neutron-api`) instead of the embedded subset
// (internal/server/neutron): a VIP is a port of that Neutron, made, read and
// deleted as Octavia's allowed-address-pairs network driver does (one
// port per VIP, administratively down, device_id lb-<id>, with flowlb's
// own device_owner, and a security group lb-<id> open on the listeners'
// ports), through gophercloud with a Keystone service user. Networks,
// subnets, floating IPs and security groups are Neutron's; the agents
// program the VIPs as with the embedded subset.
//
// One flowlb data plane serves each VIP address once: an address Neutron
// gives on one network while another load balancer holds it on another
// (overlapping tenant subnets) is refused (docs/operations.md).
package neutronapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/portsecurity"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// DeviceOwner marks the VIP ports flowlb makes, and only those are
// deleted with their load balancer (a port given as vip_port_id is the
// user's).
const DeviceOwner = "flowlb:vip"

// PortStyle is how the VIP ports are made.
type PortStyle string

const (
	// PortsFlowlb: named flowlb-lb-<id>, device_owner DeviceOwner.
	PortsFlowlb PortStyle = "flowlb"
	// PortsOVN: as ovn-octavia-provider makes them, named
	// OVNPortPrefix<id> with no device_owner, which Neutron's ML2/OVN
	// driver takes for a load balancer's VIP: it writes no addresses on
	// the port's switch port, so that OVN's routers, not the unbound
	// port, answer for the VIP and OVN's load balancers (flowlb agent
	// --dataplane ovn) serve it. Such a port is flowlb's by its mark
	// alone.
	PortsOVN PortStyle = "ovn"
)

// OVNPortPrefix begins the names of PortsOVN's ports (Neutron's
// LB_VIP_PORT_PREFIX).
const OVNPortPrefix = "ovn-lb-vip-"

// isVIPPort says whether p has the shape of a VIP port flowlb makes, in
// either style (a deployment that changed styles still releases its
// older ports), and whether it is flowlb's only if it carries a mark:
// an unmarked port of device_owner DeviceOwner was made before the
// marks, while an unmarked PortsOVN one may be ovn-octavia-provider's.
func isVIPPort(p *ports.Port) (shape, needsMark bool) {
	switch {
	case p.DeviceOwner == DeviceOwner:
		return true, false
	case p.DeviceOwner == "" && strings.HasPrefix(p.Name, OVNPortPrefix) && strings.HasPrefix(p.DeviceID, "lb-"):
		return true, true
	}
	return false, false
}

// callTimeout bounds one call to Neutron.
const callTimeout = 30 * time.Second

// Options say how to reach Neutron: Keystone v3 and a service user
// (Octavia's [service_auth]), or Endpoint for a Neutron without Keystone
// (auth_strategy noauth, tests).
type Options struct {
	AuthURL, User, Password, UserDomain, Project, ProjectDomain, Region string
	// Endpoint overrides the network endpoint of the catalog.
	Endpoint string
	// HTTP is the client to use (nil: http.DefaultClient's transport).
	HTTP *http.Client
	// DeploymentID names this flowlb deployment in the mark on its VIP
	// ports (mark.go); required.
	DeploymentID string
	// Ports is how new VIP ports are made (default PortsFlowlb).
	Ports PortStyle
	// Log gets what the allocator keeps and why (default slog's).
	Log *slog.Logger
}

// Allocator is a lbaas.VIPAllocator on a real Neutron.
type Allocator struct {
	net   *gophercloud.ServiceClient
	mark  string
	style PortStyle
	log   *slog.Logger
	// syncLocks serialize the group syncs of one load balancer (by a
	// hash of its id) within the process (secgroup_io.go).
	syncLocks [64]sync.Mutex
}

var (
	_ lbaas.VIPAllocator  = (*Allocator)(nil)
	_ lbaas.SubnetLookup  = (*Allocator)(nil)
	_ lbaas.VIPSharing    = (*Allocator)(nil)
	_ lbaas.PortSecurity  = (*Allocator)(nil)
	_ lbaas.VIPPortsAhead = (*Allocator)(nil)
)

// New logs in (or, with only Endpoint, does not) and returns the
// allocator.
func New(ctx context.Context, o Options) (*Allocator, error) {
	if err := CheckDeploymentID(o.DeploymentID); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	switch o.Ports {
	case "":
		o.Ports = PortsFlowlb
	case PortsFlowlb, PortsOVN:
	default:
		return nil, fmt.Errorf("neutron-api: VIP port style %q: use %s or %s", o.Ports, PortsFlowlb, PortsOVN)
	}
	a := &Allocator{mark: Mark(o.DeploymentID), style: o.Ports, log: o.Log}
	if o.AuthURL == "" {
		if o.Endpoint == "" {
			return nil, errors.New("neutron-api: a Keystone URL (or a Neutron endpoint) is needed")
		}
		pc := &gophercloud.ProviderClient{}
		if o.HTTP != nil {
			pc.HTTPClient = *o.HTTP
		}
		a.net = &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: gophercloud.NormalizeURL(o.Endpoint) + "v2.0/", ResourceBase: gophercloud.NormalizeURL(o.Endpoint) + "v2.0/"}
		return a, nil
	}
	pc, err := openstack.NewClient(o.AuthURL)
	if err != nil {
		return nil, fmt.Errorf("neutron-api: %w", err)
	}
	if o.HTTP != nil {
		pc.HTTPClient = *o.HTTP
	}
	ao := gophercloud.AuthOptions{IdentityEndpoint: o.AuthURL, Username: o.User, Password: o.Password,
		DomainName: o.UserDomain, TenantName: o.Project, AllowReauth: true,
		Scope: &gophercloud.AuthScope{ProjectName: o.Project, DomainName: o.ProjectDomain}}
	if err := openstack.Authenticate(ctx, pc, ao); err != nil {
		return nil, fmt.Errorf("neutron-api: log in to Keystone at %s as %s: %w", o.AuthURL, o.User, err)
	}
	sc, err := openstack.NewNetworkV2(pc, gophercloud.EndpointOpts{Region: o.Region})
	if err != nil {
		return nil, fmt.Errorf("neutron-api: network endpoint: %w", err)
	}
	if o.Endpoint != "" {
		sc.Endpoint = gophercloud.NormalizeURL(o.Endpoint) + "v2.0/"
		sc.ResourceBase = sc.Endpoint
	}
	a.net = sc
	return a, nil
}

// Mark is the tag on the VIP ports this allocator makes.
func (a *Allocator) Mark() string { return a.mark }

// Style is how this allocator makes VIP ports.
func (a *Allocator) Style() PortStyle { return a.style }

// MakesPortsAhead says whether another Octavia's provider driver should
// have the VIP ports made here (lbaas.VIPPortsAhead): with PortsOVN,
// since the ports Octavia's network driver makes get switch-port
// addresses in ML2/OVN, which OVN's load balancers cannot serve.
func (a *Allocator) MakesPortsAhead() bool { return a.style == PortsOVN }

// deviceOwner is the device_owner of the ports this allocator makes.
func (a *Allocator) deviceOwner() string {
	if a.style == PortsOVN {
		return ""
	}
	return DeviceOwner
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// portName names the port of a load balancer's VIP on subnet (primary:
// "" subnet), so that a retried transaction finds the port it made.
func portName(style PortStyle, lbID, subnetID string, additional bool) string {
	prefix := "flowlb-lb-"
	if style == PortsOVN {
		prefix = OVNPortPrefix
	}
	if additional {
		return prefix + lbID + "-" + subnetID
	}
	return prefix + lbID
}

// as is the client for reads on a caller's behalf: with the caller's
// own token, so that Neutron decides what the caller may use (its own
// objects, shared networks, RBAC grants), as Octavia asks with the
// user's token (the service's own credentials see every project's);
// without one (noauth), the service's client.
func (a *Allocator) as(token identity.Token) *gophercloud.ServiceClient {
	if token == "" {
		return a.net
	}
	pc := &gophercloud.ProviderClient{HTTPClient: a.net.HTTPClient, UserAgent: a.net.UserAgent}
	pc.SetToken(string(token))
	return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: a.net.Endpoint, ResourceBase: a.net.ResourceBase, Type: a.net.Type}
}

// Allocate makes (or, for vip_port_id, reads) the VIP's port in Neutron.
// The subnet, network or port asked for is read with the caller's token,
// the port made with the service's credentials.
func (a *Allocator) Allocate(tx store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	ctx, cancel := callCtx()
	defer cancel()
	caller := a.as(r.Token)
	if r.PortID != "" {
		p, err := ports.Get(ctx, caller, r.PortID).Extract()
		if err != nil {
			return lbaas.VIP{}, neutronErr(err, "Port", r.PortID)
		}
		v, err := vipOf(p, r.SubnetID, r.Address)
		if err != nil {
			return lbaas.VIP{}, err
		}
		// A port this deployment made for this load balancer ahead of
		// its create (MakesPortsAhead) is its own: released with it.
		shape, _ := isVIPPort(p)
		ours, _ := marks(p.Tags, a.mark)
		v.Owned = shape && ours && p.DeviceID == "lb-"+r.LoadBalancerID
		return v, a.checkOverlap(tx, r.LoadBalancerID, v)
	}
	networkID := r.NetworkID
	if r.SubnetID != "" {
		s, err := subnets.Get(ctx, caller, r.SubnetID).Extract()
		if err != nil {
			return lbaas.VIP{}, neutronErr(err, "Subnet", r.SubnetID)
		}
		if networkID != "" && networkID != s.NetworkID {
			return lbaas.VIP{}, lbaas.Invalid("Subnet %s is not on network %s.", r.SubnetID, networkID)
		}
		networkID = s.NetworkID
	} else if _, err := networks.Get(ctx, caller, networkID).Extract(); err != nil {
		return lbaas.VIP{}, neutronErr(err, "Network", networkID)
	}
	name := portName(a.style, r.LoadBalancerID, r.SubnetID, r.VIPNetworkID != "")
	p, err := a.find(ctx, name, networkID)
	if err != nil {
		return lbaas.VIP{}, err
	}
	if p != nil {
		// The port a retried transaction made, unless another
		// deployment (or a flowlb from before the marks) made it.
		if ours, _ := marks(p.Tags, a.mark); !ours {
			return lbaas.VIP{}, lbaas.Conflict("Neutron port %s (%s, device_owner %s) exists without this flowlb deployment's mark %q (tags %v): "+
				"another flowlb deployment on this Neutron made it, and it is not reused", p.ID, name, p.DeviceOwner, a.mark, p.Tags)
		}
	}
	if p == nil {
		down := false
		opts := ports.CreateOpts{Name: name, NetworkID: networkID, AdminStateUp: &down,
			DeviceID: "lb-" + r.LoadBalancerID, DeviceOwner: a.deviceOwner(), ProjectID: r.ProjectID}
		if r.SubnetID != "" || r.Address != "" {
			opts.FixedIPs = []ports.IP{{SubnetID: r.SubnetID, IPAddress: r.Address}}
		}
		// With port security and no group (not the project's default,
		// which Neutron gives a port that names none): nothing reaches
		// the VIP until the change's realization puts the load
		// balancer's group lb-<id>, open on the listeners' ports, on it
		// (secgroup_io.go), outside this transaction. An additional VIP
		// beside a user's port (whose groups are the user's, and which
		// flowlb does not sync) is made without port security: the VIP's
		// virtual port would otherwise let nothing in.
		secure := r.VIPNetworkID == "" || r.VIPOwned
		if secure {
			opts.SecurityGroups = &[]string{}
		}
		create := tagged{portsecurity.PortCreateOptsExt{CreateOptsBuilder: opts, PortSecurityEnabled: &secure}, []string{a.mark}}
		if p, err = ports.Create(ctx, a.net, create).Extract(); err != nil {
			return lbaas.VIP{}, neutronErr(err, "Network", networkID)
		}
	}
	v, err := vipOf(p, r.SubnetID, r.Address)
	if ours, _ := marks(p.Tags, a.mark); err == nil && !ours {
		// Neutron takes the tags of a create but drops them unless ML2
		// has the extension driver tag_ports_during_bulk_creation
		// (the test bed's Neutron 21 has not): tag the port now.
		if err = attributestags.Add(ctx, a.net, "ports", p.ID, a.mark).ExtractErr(); err != nil {
			err = fmt.Errorf("mark VIP port %s with %s: %w", p.ID, a.mark, err)
		}
	}
	if err == nil {
		err = a.checkOverlap(tx, r.LoadBalancerID, v)
	}
	if err != nil {
		if derr := ports.Delete(ctx, a.net, p.ID).ExtractErr(); derr != nil && !gophercloud.ResponseCodeIs(derr, http.StatusNotFound) {
			return lbaas.VIP{}, errors.Join(err, fmt.Errorf("delete VIP port %s: %w", p.ID, derr))
		}
		return lbaas.VIP{}, err
	}
	v.Owned = true
	return v, nil
}

// tagged makes the port with tags in its create, where Neutron has the
// extension tag-ports-during-bulk-creation: a port is then never without
// its mark, as it is between a create and a tag call otherwise.
type tagged struct {
	ports.CreateOptsBuilder
	tags []string
}

func (t tagged) ToPortCreateMap() (map[string]any, error) {
	m, err := t.CreateOptsBuilder.ToPortCreateMap()
	if err != nil {
		return nil, err
	}
	port, ok := m["port"].(map[string]any)
	if !ok {
		return nil, errors.New("port create body without a port")
	}
	port["tags"] = t.tags
	return m, nil
}

// find returns the VIP port called name on networkID, nil if none.
func (a *Allocator) find(ctx context.Context, name, networkID string) (*ports.Port, error) {
	pages, err := ports.List(a.net, ports.ListOpts{Name: name, NetworkID: networkID, DeviceOwner: a.deviceOwner()}).AllPages(ctx)
	if err != nil {
		return nil, fmt.Errorf("list VIP ports: %w", err)
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		if shape, _ := isVIPPort(&ps[i]); shape {
			return &ps[i], nil
		}
	}
	return nil, nil
}

// vipOf is the VIP a port carries: its fixed IP on subnetID, or with
// address, or its first.
func vipOf(p *ports.Port, subnetID, address string) (lbaas.VIP, error) {
	for _, ip := range p.FixedIPs {
		if (subnetID == "" || ip.SubnetID == subnetID) && (address == "" || sameAddr(ip.IPAddress, address)) {
			return lbaas.VIP{Address: ip.IPAddress, PortID: p.ID, SubnetID: ip.SubnetID, NetworkID: p.NetworkID}, nil
		}
	}
	if subnetID != "" {
		return lbaas.VIP{}, lbaas.Invalid("Port %s has no address on subnet %s.", p.ID, subnetID)
	}
	return lbaas.VIP{}, lbaas.Invalid("Port %s has no fixed IP address.", p.ID)
}

func sameAddr(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	return err1 == nil && err2 == nil && x == y
}

// checkOverlap refuses v if another load balancer holds its address on
// another network: Neutron allows overlapping subnets on different
// networks, but one data plane keys its services by VIP address, so it
// would serve both with one table.
func (a *Allocator) checkOverlap(tx store.ReadTx, lbID string, v lbaas.VIP) error {
	recs, err := tx.List(store.KindLoadBalancer, store.Filter{})
	if err != nil {
		return fmt.Errorf("list load balancers: %w", err)
	}
	for _, rec := range recs {
		if rec.ID == lbID {
			continue
		}
		var lb lbaas.LoadBalancer
		if err := jsondoc.Unmarshal(rec.Data, &lb); err != nil {
			return fmt.Errorf("decode load balancer %s: %w", rec.ID, err)
		}
		if c := Overlap(&lb, v); c != "" {
			return lbaas.Conflict("%s", c)
		}
	}
	return nil
}

// Overlap says why one data plane cannot serve v beside lb's VIPs ("":
// it can): the same address on another network, or on another port.
func Overlap(lb *lbaas.LoadBalancer, v lbaas.VIP) string {
	type vip struct{ addr, port string }
	held := []vip{{lb.VIPAddress, lb.VIPPortID}}
	for _, av := range lb.AdditionalVIPs {
		held = append(held, vip{av.IPAddress, av.PortID})
	}
	for _, h := range held {
		if !sameAddr(h.addr, v.Address) || h.port == v.PortID {
			continue
		}
		if lb.VIPNetworkID != v.NetworkID {
			return fmt.Sprintf("VIP address %s of network %s is already the VIP of load balancer %s on network %s: "+
				"one flowlb data plane serves a VIP address once, so overlapping subnets cannot both hold load balancers at the same address",
				v.Address, v.NetworkID, lb.ID, lb.VIPNetworkID)
		}
		return fmt.Sprintf("VIP address %s is already the VIP of load balancer %s on port %s", v.Address, lb.ID, h.port)
	}
	return ""
}

// Release deletes the VIP port if this deployment made it; a port
// already gone is released. A port of flowlb's device_owner (not one of
// PortsOVN's shape) without any deployment's mark is one made before the marks, by this deployment
// since its load balancer names it, and is deleted too; one with another
// deployment's mark is kept (the databases of two deployments were
// copied from one another, or the id changed): deleting it could take a
// live VIP from the other.
func (a *Allocator) Release(_ store.Tx, portID string) error {
	if portID == "" {
		return nil
	}
	ctx, cancel := callCtx()
	defer cancel()
	p, err := ports.Get(ctx, a.net, portID).Extract()
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read VIP port %s: %w", portID, err)
	}
	shape, needsMark := isVIPPort(p)
	if !shape {
		return nil
	}
	ours, marked := marks(p.Tags, a.mark)
	if marked && !ours {
		a.log.Warn("VIP port kept: it carries another flowlb deployment's mark", "port", portID, "tags", p.Tags, "mark", a.mark)
		return nil
	}
	if needsMark && !marked {
		a.log.Warn("VIP port kept: named as a load balancer's VIP port but without this deployment's mark", "port", portID, "name", p.Name, "mark", a.mark)
		return nil
	}
	if err := ports.Delete(ctx, a.net, portID).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return fmt.Errorf("delete VIP port %s: %w", portID, err)
	}
	return nil
}

// CheckSubnet refuses, in Octavia's words, a subnet Neutron does not
// have or does not show the caller (read with who's token).
func (a *Allocator) CheckSubnet(_ store.ReadTx, who lbaas.Access, subnetID string) error {
	ctx, cancel := callCtx()
	defer cancel()
	_, err := subnets.Get(ctx, a.as(who.Token), subnetID).Extract()
	return neutronErr(err, "Subnet", subnetID)
}

// MayBeShared says yes: two load balancers may hold one address on one
// network (a shared vip_port_id), and the domain then refuses listeners
// that clash on it.
func (a *Allocator) MayBeShared(store.ReadTx, string) (bool, error) { return true, nil }

// VIPSecurity has no rules for the agents: Neutron enforces the VIP
// port's security groups itself (OVN's ACLs), before traffic reaches a
// node.
func (a *Allocator) VIPSecurity(store.ReadTx, store.Filter) (map[string]*lbaas.SecurityRules, error) {
	return nil, nil
}

// neutronErr words Neutron's refusals as Octavia does: a missing object
// as "<Kind> <id> not found.", a conflict (an address in use) as a
// conflict, a bad request as invalid; anything else is an error of the
// server.
func neutronErr(err error, kind, id string) error {
	var e gophercloud.ErrUnexpectedResponseCode
	switch {
	case err == nil:
		return nil
	case gophercloud.ResponseCodeIs(err, http.StatusNotFound):
		return lbaas.Invalid("%s %s not found.", kind, id)
	case errors.As(err, &e) && e.Actual == http.StatusConflict:
		return lbaas.Conflict("Neutron refused the VIP port: %s", neutronMessage(e.Body))
	case errors.As(err, &e) && e.Actual == http.StatusBadRequest:
		return lbaas.Invalid("Neutron refused the VIP port: %s", neutronMessage(e.Body))
	}
	return fmt.Errorf("neutron: %w", err)
}

// neutronMessage is the message of a Neutron error body.
func neutronMessage(body []byte) string {
	var e struct {
		NeutronError struct {
			Message string `json:"message"`
		} `json:"NeutronError"`
	}
	if jsondoc.Unmarshal(body, &e) == nil && e.NeutronError.Message != "" {
		return e.NeutronError.Message
	}
	return string(body)
}
