package neutron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// Floating IPs, as Neutron's L3 extension serves them, without routers:
// flowlb's data plane is flat, so every port is "reachable" from every
// external network and router_id is always null. A floating IP holds an
// address of an external network through a port of its own on that
// network (device_owner network:floatingip, no project, as in Neutron),
// so the address is an IPAM claim like any port's and the network and
// subnet cannot be deleted under it. Associated with a load balancer's
// VIP port, its record carries the load balancer (store.KindFloatingIP),
// whose tree then serves it (internal/server/compiler).

// DeviceOwnerFloatingIP is the device_owner of a floating IP's own port.
const DeviceOwnerFloatingIP = "network:floatingip"

// assocSpace is the claim space of associations: a port's fixed IP has at
// most one floating IP, across transactions and replicas.
const assocSpace = "floatingip:assoc"

// FloatingIP is a Neutron floating IP as the API shows it.
type FloatingIP struct {
	ID                string       `json:"id"`
	FloatingIPAddress string       `json:"floating_ip_address"`
	FloatingNetworkID string       `json:"floating_network_id"`
	RouterID          *string      `json:"router_id"`
	PortID            *string      `json:"port_id"`
	FixedIPAddress    *string      `json:"fixed_ip_address"`
	Status            string       `json:"status"`
	ProjectID         string       `json:"project_id"`
	TenantID          string       `json:"tenant_id"`
	Description       string       `json:"description"`
	Tags              []string     `json:"tags"`
	PortDetails       *PortDetails `json:"port_details"`
	RevisionNumber    int          `json:"revision_number"`
	CreatedAt         string       `json:"created_at"`
	UpdatedAt         string       `json:"updated_at"`
}

// PortDetails is the associated port, as the fip-port-details extension
// shows it; filled in when shown, never stored.
type PortDetails struct {
	Name         string `json:"name"`
	NetworkID    string `json:"network_id"`
	MACAddress   string `json:"mac_address"`
	AdminStateUp bool   `json:"admin_state_up"`
	Status       string `json:"status"`
	DeviceID     string `json:"device_id"`
	DeviceOwner  string `json:"device_owner"`
}

// fipDoc is the stored floating IP: the API object and its own port,
// and its association's identity (a fresh one at each association), by
// which a wait for the agents finds it unchanged.
type fipDoc struct {
	FloatingIP
	OwnPort string `json:"flowlb:port"`
	Assoc   string `json:"flowlb:assoc,omitempty"`
}

func floatingIPNotFound(id string) *Error {
	return refuse(KindNotFound, "FloatingIPNotFound", "Floating IP %s could not be found", id)
}

// badFIP is Neutron's BadRequest about a floating IP.
func badFIP(format string, args ...any) *Error {
	return refuse(KindInvalid, "BadRequest", "Bad floatingip request: "+format+".", args...)
}

func decodeFIP(rec store.Record) (fipDoc, error) {
	var d fipDoc
	if err := json.Unmarshal(rec.Data, &d); err != nil {
		return d, fmt.Errorf("decode floating IP %s: %w", rec.ID, err)
	}
	return d, nil
}

func getFIP(tx store.ReadTx, id string) (fipDoc, error) {
	rec, err := tx.Get(store.KindFloatingIP, id)
	if isNotFound(err) {
		return fipDoc{}, floatingIPNotFound(id)
	}
	if err != nil {
		return fipDoc{}, fmt.Errorf("get floating IP %s: %w", id, err)
	}
	return decodeFIP(rec)
}

// putFIP stores a floating IP: ParentID is its port, so that the port's
// floating IPs are found by index, and LoadBalancerID the load balancer
// whose VIP port that is.
func putFIP(tx store.Tx, d fipDoc, lb string, insert bool) error {
	d.PortDetails = nil
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	parent := ""
	if d.PortID != nil {
		parent = *d.PortID
	}
	rec := store.Record{Kind: store.KindFloatingIP, ID: d.ID, ProjectID: d.ProjectID, ParentID: parent, LoadBalancerID: lb, Data: data}
	if insert {
		return tx.Insert(rec)
	}
	return tx.Update(rec)
}

// servedBy is the load balancer whose VIP port p is, if any.
func servedBy(p Port) string {
	if p.DeviceOwner == DeviceOwnerLB {
		return p.DeviceID
	}
	return ""
}

// fipCreate is a floating IP create request.
type fipCreate struct {
	FloatingNetworkID string   `json:"floating_network_id"`
	SubnetID          string   `json:"subnet_id"`
	FloatingIPAddress string   `json:"floating_ip_address"`
	PortID            *string  `json:"port_id"`
	FixedIPAddress    *string  `json:"fixed_ip_address"`
	Description       string   `json:"description"`
	Tags              []string `json:"tags"`
	// await: an association with a load balancer's VIP port is DOWN
	// until the agents have programmed it (awaitAgents).
	await bool
}

// createFloatingIP allocates an address on an external network and
// associates it with a port if the request names one.
func createFloatingIP(tx store.Tx, hints *hintTable, c identity.Caller, r fipCreate, project string) (FloatingIP, error) {
	net, err := getNetwork(tx, r.FloatingNetworkID)
	if err != nil {
		return FloatingIP{}, err
	}
	v := &view{tx: tx, c: c, nets: map[string]Network{}}
	if !v.netVisible(net) {
		return FloatingIP{}, networkNotFound(r.FloatingNetworkID)
	}
	if !net.RouterExternal {
		return FloatingIP{}, badFIP("Network %s is not a valid external network", net.ID)
	}
	if r.FixedIPAddress != nil && r.PortID == nil {
		return FloatingIP{}, badFIP("fixed_ip_address cannot be specified without a port_id")
	}
	d := fipDoc{FloatingIP: FloatingIP{
		ID: uuid.NewString(), FloatingNetworkID: net.ID, Status: "DOWN", ProjectID: project, TenantID: project,
		Description: r.Description, Tags: orEmpty(r.Tags), RevisionNumber: 1, CreatedAt: now(),
	}}
	d.UpdatedAt = d.CreatedAt
	a := newAllocator(tx, hints)
	on, fixed, err := fipNetwork(a, net, r)
	if err != nil {
		return FloatingIP{}, err
	}
	own, err := createPort(tx, a, on, Port{DeviceOwner: DeviceOwnerFloatingIP, DeviceID: d.ID, Status: "N/A", AdminStateUp: true}, []FixedIP{fixed}, true, "")
	if err != nil {
		return FloatingIP{}, err
	}
	d.OwnPort, d.FloatingIPAddress = own.ID, own.FixedIPs[0].IPAddress
	lb := ""
	if r.PortID != nil {
		if lb, err = associate(tx, c, &d, *r.PortID, r.FixedIPAddress, r.await); err != nil {
			return FloatingIP{}, err
		}
	}
	if err := putFIP(tx, d, lb, true); err != nil {
		return FloatingIP{}, fmt.Errorf("create floating IP: %w", err)
	}
	return d.FloatingIP, nil
}

// fipNetwork is the network a floating IP's port allocates on, and its
// fixed IP request: the requested address or subnet, else any address of
// the network's IPv4 subnets, as floating IPs are IPv4.
func fipNetwork(a *allocator, net Network, r fipCreate) (Network, FixedIP, error) {
	if r.FloatingIPAddress != "" || r.SubnetID != "" {
		return net, FixedIP{SubnetID: r.SubnetID, IPAddress: r.FloatingIPAddress}, nil
	}
	v4 := net
	v4.Subnets = nil
	for _, sid := range net.Subnets {
		m, err := a.subnet(sid)
		if err != nil {
			return Network{}, FixedIP{}, err
		}
		if m.is4() {
			v4.Subnets = append(v4.Subnets, sid)
		}
	}
	if len(v4.Subnets) == 0 {
		return Network{}, FixedIP{}, badFIP("Network %s does not contain any IPv4 subnet", net.ID)
	}
	return v4, FixedIP{}, nil
}

// associate points d at a port's fixed IP and returns the load balancer
// that serves it, if the port is a VIP port. The floating IP is ACTIVE,
// or, with await and a load balancer, DOWN until the agents have
// programmed the change (awaitAgents), as Neutron's is until its L3
// agent has.
func associate(tx store.Tx, c identity.Caller, d *fipDoc, portID string, fixed *string, await bool) (string, error) {
	p, err := getPortDoc(tx, portID)
	if err != nil {
		return "", err
	}
	if !c.IsAdmin && p.ProjectID != c.ProjectID {
		return "", portNotFound(portID)
	}
	if p.DeviceOwner == DeviceOwnerFloatingIP {
		return "", badFIP("Port %s has owner %s and therefore cannot have a floating IP", portID, DeviceOwnerFloatingIP)
	}
	ip, err := fixedIPv4(p.Port, fixed)
	if err != nil {
		return "", err
	}
	err = tx.Claim(assocSpace, portID+"/"+ip)
	if errors.Is(err, store.ErrConflict) {
		return "", refuse(KindConflict, "FloatingIPPortAlreadyAssociated",
			"Cannot associate floating IP %s (%s) with port %s using fixed IP %s, as that fixed IP already has a floating IP on external network %s.",
			d.FloatingIPAddress, d.ID, portID, ip, d.FloatingNetworkID)
	}
	if err != nil {
		return "", fmt.Errorf("associate floating IP %s: %w", d.ID, err)
	}
	// The port records its floating IPs. Writing it also makes a
	// concurrent bind or release of it as a VIP port, which writes it
	// too, conflict and retry, so that the floating IP's load balancer is
	// never stale.
	p.FloatingIPs = append(p.FloatingIPs, d.ID)
	if err := putPort(tx, p, false); err != nil {
		return "", fmt.Errorf("associate floating IP %s: %w", d.ID, err)
	}
	d.PortID, d.FixedIPAddress, d.Status, d.Assoc = &portID, &ip, "ACTIVE", uuid.NewString()
	lb := servedBy(p.Port)
	if lb != "" {
		tx.Touch(lb)
		if await {
			d.Status = "DOWN"
		}
	}
	return lb, nil
}

// fixedIPv4 picks the port's fixed IP a floating IP translates to: the
// requested one, or its only IPv4 address.
func fixedIPv4(p Port, want *string) (string, error) {
	if want != nil {
		a, err := netip.ParseAddr(*want)
		if err != nil {
			return "", badAttr("fixed_ip_address", "'%s' is not a valid IP address", *want)
		}
		if !a.Unmap().Is4() {
			return "", badFIP("Cannot process floating IP association with %s, since that is not an IPv4 address", *want)
		}
		for _, f := range p.FixedIPs {
			if b, err := netip.ParseAddr(f.IPAddress); err == nil && b == a.Unmap() {
				return b.String(), nil
			}
		}
		return "", badFIP("Port %s does not have fixed ip %s", p.ID, *want)
	}
	var v4 []string
	for _, f := range p.FixedIPs {
		if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Is4() {
			v4 = append(v4, a.String())
		}
	}
	switch len(v4) {
	case 0:
		return "", badFIP("Cannot add floating IP to port %s that has no fixed IPv4 addresses", p.ID)
	case 1:
		return v4[0], nil
	}
	return "", badFIP("Port %s has multiple fixed IPv4 addresses.  Must provide a specific IPv4 address when assigning a floating IP", p.ID)
}

// disassociate frees d's association, if any, and takes it off its port;
// the load balancer that served it gets a change.
func disassociate(tx store.Tx, d *fipDoc, servedLB string) error {
	if d.PortID == nil {
		return nil
	}
	p, err := getPortDoc(tx, *d.PortID)
	if err != nil && !isKind(err, KindNotFound) {
		return err
	}
	if err == nil {
		p.FloatingIPs = slices.DeleteFunc(p.FloatingIPs, func(id string) bool { return id == d.ID })
		if err := putPort(tx, p, false); err != nil {
			return fmt.Errorf("disassociate floating IP %s: %w", d.ID, err)
		}
	}
	return release(tx, d, servedLB)
}

// release frees d's association claim and clears it.
func release(tx store.Tx, d *fipDoc, servedLB string) error {
	key := *d.PortID + "/"
	if d.FixedIPAddress != nil {
		key += *d.FixedIPAddress
	}
	if err := tx.Unclaim(assocSpace, key); err != nil && !isNotFound(err) {
		return fmt.Errorf("disassociate floating IP %s: %w", d.ID, err)
	}
	if servedLB != "" {
		tx.Touch(servedLB)
	}
	d.PortID, d.FixedIPAddress, d.Status, d.Assoc = nil, nil, "DOWN", ""
	return nil
}

// Realizer tells when every agent has programmed a load balancer's
// change (the fan-out hub, as for the flow provider).
type Realizer interface {
	Realize(lbID string, change int64, done func(error))
}

// awaiting is a floating IP's association with a load balancer's VIP
// port, DOWN until the agents have programmed it.
type awaiting struct{ fip, lb, assoc string }

// awaitingOf returns floating IP id's association if it waits for the
// agents.
func awaitingOf(tx store.ReadTx, id string) (awaiting, bool, error) {
	rec, err := tx.Get(store.KindFloatingIP, id)
	if err != nil {
		return awaiting{}, false, fmt.Errorf("get floating IP %s: %w", id, err)
	}
	d, err := decodeFIP(rec)
	if err != nil {
		return awaiting{}, false, err
	}
	if d.Status != "DOWN" || d.PortID == nil || rec.LoadBalancerID == "" {
		return awaiting{}, false, nil
	}
	return awaiting{fip: id, lb: rec.LoadBalancerID, assoc: d.Assoc}, true, nil
}

// activate makes the association a ACTIVE, once the agents have
// programmed it, if it is still the floating IP's (not disassociated,
// moved or deleted meanwhile). Neutron counts a status change as a
// revision.
func activate(tx store.Tx, a awaiting) error {
	rec, err := tx.GetForUpdate(store.KindFloatingIP, a.fip)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get floating IP %s: %w", a.fip, err)
	}
	d, err := decodeFIP(rec)
	if err != nil {
		return err
	}
	if d.Status != "DOWN" || d.Assoc != a.assoc || rec.LoadBalancerID != a.lb {
		return nil
	}
	return putActive(tx, d, rec.LoadBalancerID)
}

func putActive(tx store.Tx, d fipDoc, lb string) error {
	d.Status = "ACTIVE"
	d.RevisionNumber++
	d.UpdatedAt = now()
	return putFIP(tx, d, lb, false)
}

// ActivateOverdue makes ACTIVE the floating IPs left DOWN on a load
// balancer's VIP port since before cutoff: their wait for the agents
// ended with the replica that ran it. A wait that runs out turns them
// ACTIVE too, as it does a load balancer's change, so with cutoff an ack
// timeout ago nothing turns ACTIVE earlier than its own wait would have
// made it. It returns how many it made ACTIVE.
func ActivateOverdue(ctx context.Context, st store.Store, cutoff time.Time) (int, error) {
	n := 0
	_, err := st.Update(ctx, func(tx store.Tx) error {
		n = 0
		recs, err := tx.List(store.KindFloatingIP, store.Filter{})
		if err != nil {
			return fmt.Errorf("list floating IPs: %w", err)
		}
		for _, rec := range recs {
			d, err := decodeFIP(rec)
			if err != nil {
				return err
			}
			at, err := time.Parse(timeFormat, d.UpdatedAt)
			if d.Status != "DOWN" || d.PortID == nil || rec.LoadBalancerID == "" || err != nil || !at.Before(cutoff) {
				continue
			}
			if err := putActive(tx, d, rec.LoadBalancerID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// fipUpdate is a floating IP update: nil leaves an attribute alone;
// PortGiven with a nil PortID disassociates.
type fipUpdate struct {
	PortGiven   bool
	PortID      *string
	FixedIP     *string
	Description *string
	await       bool // as fipCreate's
}

func updateFloatingIP(tx store.Tx, c identity.Caller, id string, u fipUpdate) (FloatingIP, error) {
	rec, err := tx.GetForUpdate(store.KindFloatingIP, id)
	if isNotFound(err) {
		return FloatingIP{}, floatingIPNotFound(id)
	}
	if err != nil {
		return FloatingIP{}, fmt.Errorf("get floating IP %s: %w", id, err)
	}
	d, err := decodeFIP(rec)
	if err != nil {
		return FloatingIP{}, err
	}
	if !c.IsAdmin && d.ProjectID != c.ProjectID {
		return FloatingIP{}, floatingIPNotFound(id)
	}
	lb := rec.LoadBalancerID
	port := u.PortID
	if !u.PortGiven && u.FixedIP != nil {
		// A new fixed IP of the port it is associated with.
		if d.PortID == nil {
			return FloatingIP{}, badFIP("fixed_ip_address cannot be specified without a port_id")
		}
		port = d.PortID
	}
	if u.PortGiven || u.FixedIP != nil {
		if port == nil && u.FixedIP != nil {
			return FloatingIP{}, badFIP("fixed_ip_address cannot be specified without a port_id")
		}
		if err := disassociate(tx, &d, lb); err != nil {
			return FloatingIP{}, err
		}
		lb = ""
		if port != nil {
			if lb, err = associate(tx, c, &d, *port, u.FixedIP, u.await); err != nil {
				return FloatingIP{}, err
			}
		}
	}
	if u.Description != nil {
		d.Description = *u.Description
	}
	d.RevisionNumber++
	d.UpdatedAt = now()
	return d.FloatingIP, putFIP(tx, d, lb, false)
}

func deleteFloatingIP(tx store.Tx, hints *hintTable, c identity.Caller, id string) error {
	rec, err := tx.GetForUpdate(store.KindFloatingIP, id)
	if isNotFound(err) {
		return floatingIPNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("get floating IP %s: %w", id, err)
	}
	d, err := decodeFIP(rec)
	if err != nil {
		return err
	}
	if !c.IsAdmin && d.ProjectID != c.ProjectID {
		return floatingIPNotFound(id)
	}
	if err := disassociate(tx, &d, rec.LoadBalancerID); err != nil {
		return err
	}
	own, err := getPortDoc(tx, d.OwnPort)
	if err != nil && !isKind(err, KindNotFound) {
		return err
	}
	if err == nil {
		if err := deletePort(tx, hints, own); err != nil {
			return err
		}
	}
	if err := tx.Delete(store.KindFloatingIP, id); err != nil {
		return fmt.Errorf("delete floating IP %s: %w", id, err)
	}
	return nil
}

func isKind(err error, k ErrorKind) bool {
	var ne *Error
	return errors.As(err, &ne) && ne.Kind == k
}

// followPort moves the floating IPs of a port that was just bound to a
// load balancer, or released by one, to the load balancer now serving
// them; both load balancers get a change.
func followPort(tx store.Tx, p portDoc) error {
	lb := servedBy(p.Port)
	for _, id := range p.FloatingIPs {
		rec, err := tx.Get(store.KindFloatingIP, id)
		if err != nil {
			return fmt.Errorf("floating IP %s of port %s: %w", id, p.ID, err)
		}
		if rec.LoadBalancerID == lb {
			continue
		}
		d, err := decodeFIP(rec)
		if err != nil {
			return err
		}
		if rec.LoadBalancerID != "" {
			tx.Touch(rec.LoadBalancerID)
		}
		if lb != "" {
			tx.Touch(lb)
		}
		if err := putFIP(tx, d, lb, false); err != nil {
			return fmt.Errorf("floating IP %s follows port %s: %w", d.ID, p.ID, err)
		}
	}
	return nil
}

// dropPortFIPs disassociates the floating IPs of a port being deleted,
// as Neutron does: they stay, unassociated.
func dropPortFIPs(tx store.Tx, p portDoc) error {
	for _, id := range p.FloatingIPs {
		rec, err := tx.Get(store.KindFloatingIP, id)
		if err != nil {
			return fmt.Errorf("floating IP %s of port %s: %w", id, p.ID, err)
		}
		d, err := decodeFIP(rec)
		if err != nil {
			return err
		}
		if err := release(tx, &d, rec.LoadBalancerID); err != nil {
			return err
		}
		d.RevisionNumber++
		d.UpdatedAt = now()
		if err := putFIP(tx, d, "", false); err != nil {
			return fmt.Errorf("disassociate floating IP %s from port %s: %w", d.ID, p.ID, err)
		}
	}
	return nil
}

// portDetails is what the floating IP shows of its port.
func portDetails(p Port) *PortDetails {
	return &PortDetails{Name: p.Name, NetworkID: p.NetworkID, MACAddress: p.MACAddress, AdminStateUp: p.AdminStateUp,
		Status: p.Status, DeviceID: p.DeviceID, DeviceOwner: p.DeviceOwner}
}
