// Package neutron is the small Neutron-compatible subset flowlb serves for
// VIP addressing: networks, subnets and ports with IP address management.
//
// The load balancer domain uses the Go API (AllocateVIP, ReleaseVIP,
// GetSubnet) inside its own store transaction, so a load balancer and its VIP
// port commit or fail together. NewHandler serves the same objects under
// /v2.0/ so that the openstack CLI, gophercloud and Terraform can look them up
// (and admins create them) without a real Neutron.
package neutron

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/store"
)

// DeviceOwnerLB is the device_owner of the VIP ports flowlb creates, the
// value Octavia puts on its own VIP ports.
const DeviceOwnerLB = "Octavia"

// AdminProject owns the networks EnsureDefault creates.
const AdminProject = "admin"

// ipamProject marks the subnet-kind records that are not subnets and are
// never shown by the API: the bitmap records of the IPAM scheme before
// claims (ipam_legacy.go; a subnet's are deleted when it is converted),
// and the lock of the set of subnets (overlap.go).
const ipamProject = "flowlb:ipam"

// timeFormat is Neutron's timestamp format: seconds, with a Z.
const timeFormat = "2006-01-02T15:04:05Z"

func now() string { return time.Now().UTC().Format(timeFormat) }

// Network is a Neutron network as the API shows it.
type Network struct {
	ID                    string   `json:"id"`
	Name                  string   `json:"name"`
	Description           string   `json:"description"`
	ProjectID             string   `json:"project_id"`
	TenantID              string   `json:"tenant_id"`
	AdminStateUp          bool     `json:"admin_state_up"`
	Status                string   `json:"status"`
	Shared                bool     `json:"shared"`
	RouterExternal        bool     `json:"router:external"`
	Subnets               []string `json:"subnets"`
	MTU                   int      `json:"mtu"`
	PortSecurityEnabled   bool     `json:"port_security_enabled"`
	AvailabilityZoneHints []string `json:"availability_zone_hints"`
	AvailabilityZones     []string `json:"availability_zones"`
	IPv4AddressScope      *string  `json:"ipv4_address_scope"`
	IPv6AddressScope      *string  `json:"ipv6_address_scope"`
	Tags                  []string `json:"tags"`
	RevisionNumber        int      `json:"revision_number"`
	CreatedAt             string   `json:"created_at"`
	UpdatedAt             string   `json:"updated_at"`
}

// AllocationPool is an inclusive range of addresses given out automatically.
type AllocationPool struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// HostRoute is a static route handed to DHCP clients (stored, unused).
type HostRoute struct {
	Destination string `json:"destination"`
	NextHop     string `json:"nexthop"`
}

// Subnet is a Neutron subnet as the API shows it.
type Subnet struct {
	ID              string           `json:"id"`
	Name            string           `json:"name"`
	Description     string           `json:"description"`
	NetworkID       string           `json:"network_id"`
	CIDR            string           `json:"cidr"`
	IPVersion       int              `json:"ip_version"`
	GatewayIP       *string          `json:"gateway_ip"`
	AllocationPools []AllocationPool `json:"allocation_pools"`
	EnableDHCP      bool             `json:"enable_dhcp"`
	DNSNameservers  []string         `json:"dns_nameservers"`
	HostRoutes      []HostRoute      `json:"host_routes"`
	IPv6AddressMode *string          `json:"ipv6_address_mode"`
	IPv6RAMode      *string          `json:"ipv6_ra_mode"`
	SubnetpoolID    *string          `json:"subnetpool_id"`
	ServiceTypes    []string         `json:"service_types"`
	ProjectID       string           `json:"project_id"`
	TenantID        string           `json:"tenant_id"`
	Tags            []string         `json:"tags"`
	RevisionNumber  int              `json:"revision_number"`
	CreatedAt       string           `json:"created_at"`
	UpdatedAt       string           `json:"updated_at"`
}

// FixedIP is one address of a port.
type FixedIP struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

// AddressPair is an extra address a port may use (stored, unused).
type AddressPair struct {
	IPAddress  string `json:"ip_address"`
	MACAddress string `json:"mac_address,omitempty"`
}

// Port is a Neutron port as the API shows it.
type Port struct {
	ID                  string        `json:"id"`
	Name                string        `json:"name"`
	Description         string        `json:"description"`
	NetworkID           string        `json:"network_id"`
	FixedIPs            []FixedIP     `json:"fixed_ips"`
	MACAddress          string        `json:"mac_address"`
	DeviceOwner         string        `json:"device_owner"`
	DeviceID            string        `json:"device_id"`
	ProjectID           string        `json:"project_id"`
	TenantID            string        `json:"tenant_id"`
	Status              string        `json:"status"`
	AdminStateUp        bool          `json:"admin_state_up"`
	SecurityGroups      []string      `json:"security_groups"`
	AllowedAddressPairs []AddressPair `json:"allowed_address_pairs"`
	VNICType            string        `json:"binding:vnic_type"`
	PortSecurityEnabled bool          `json:"port_security_enabled"`
	Tags                []string      `json:"tags"`
	RevisionNumber      int           `json:"revision_number"`
	CreatedAt           string        `json:"created_at"`
	UpdatedAt           string        `json:"updated_at"`
}

// subnetDoc is the stored subnet: the API object, plus the bitmap scheme's
// bookkeeping while a subnet from before claims is not yet converted
// (ipam_legacy.go). Subnets made since have no "flowlb:ipam".
type subnetDoc struct {
	Subnet
	Legacy *legacyIPAM `json:"flowlb:ipam,omitempty"`
}

// portDoc is the stored port: the API object plus who bound it.
type portDoc struct {
	Port
	// CreatedFor is the load balancer a VIP port was created for; such a
	// port is deleted when the VIP is released. Empty for user ports.
	CreatedFor string `json:"flowlb:created_for,omitempty"`
	// PrevDeviceOwner is a user port's device_owner before a load
	// balancer took it, restored on release.
	PrevDeviceOwner string `json:"flowlb:prev_device_owner,omitempty"`
	// FloatingIPs are the floating IPs associated with the port, so that
	// binding, releasing and deleting it finds them without a query.
	FloatingIPs []string `json:"flowlb:floating_ips,omitempty"`
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// Record access. Documents are decoded into their stored form; the API
// shape is the embedded struct.

func getNetwork(tx store.ReadTx, id string) (Network, error) {
	rec, err := tx.Get(store.KindNetwork, id)
	if isNotFound(err) {
		return Network{}, networkNotFound(id)
	}
	if err != nil {
		return Network{}, fmt.Errorf("get network %s: %w", id, err)
	}
	var n Network
	if err := json.Unmarshal(rec.Data, &n); err != nil {
		return Network{}, fmt.Errorf("decode network %s: %w", id, err)
	}
	return n, nil
}

func putNetwork(tx store.Tx, n Network, insert bool) error {
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindNetwork, ID: n.ID, ProjectID: n.ProjectID, Data: data}
	if insert {
		return tx.Insert(rec)
	}
	return tx.Update(rec)
}

func decodeSubnet(rec store.Record) (subnetDoc, error) {
	var d subnetDoc
	if err := jsondoc.Unmarshal(rec.Data, &d); err != nil {
		return d, fmt.Errorf("decode subnet %s: %w", rec.ID, err)
	}
	return d, nil
}

// rowLock is how a read in a write transaction locks the record.
type rowLock int

const (
	noLock rowLock = iota
	// shareLock: allocations, which may run side by side but keep the
	// subnet from being deleted under them.
	shareLock
	// updateLock: deleting the subnet, renaming it, converting its IPAM.
	updateLock
)

// getSubnetDoc reads a subnet, locked as lock says if tx can write.
func getSubnetDoc(tx store.ReadTx, id string, lock rowLock) (subnetDoc, error) {
	var rec store.Record
	var err error
	wtx, canWrite := tx.(store.Tx)
	switch {
	case canWrite && lock == updateLock:
		rec, err = wtx.GetForUpdate(store.KindSubnet, id)
	case canWrite && lock == shareLock:
		rec, err = wtx.GetForShare(store.KindSubnet, id)
	default:
		rec, err = tx.Get(store.KindSubnet, id)
	}
	if isNotFound(err) || (err == nil && rec.ProjectID == ipamProject) {
		return subnetDoc{}, subnetNotFound(id)
	}
	if err != nil {
		return subnetDoc{}, fmt.Errorf("get subnet %s: %w", id, err)
	}
	return decodeSubnet(rec)
}

func putSubnet(tx store.Tx, d subnetDoc, insert bool) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindSubnet, ID: d.ID, ProjectID: d.ProjectID, ParentID: d.NetworkID, Data: data}
	if insert {
		return tx.Insert(rec)
	}
	return tx.Update(rec)
}

func getPortDoc(tx store.ReadTx, id string) (portDoc, error) {
	rec, err := tx.Get(store.KindPort, id)
	if isNotFound(err) {
		return portDoc{}, portNotFound(id)
	}
	if err != nil {
		return portDoc{}, fmt.Errorf("get port %s: %w", id, err)
	}
	var d portDoc
	if err := json.Unmarshal(rec.Data, &d); err != nil {
		return d, fmt.Errorf("decode port %s: %w", id, err)
	}
	return d, nil
}

func putPort(tx store.Tx, d portDoc, insert bool) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	// ParentID is the network, so deleting a network can count its ports;
	// LoadBalancerID the load balancer whose VIP's sources the port's
	// security groups restrict, so that its tree finds them.
	rec := store.Record{Kind: store.KindPort, ID: d.ID, ProjectID: d.ProjectID, ParentID: d.NetworkID, Data: data}
	if d.PortSecurityEnabled && len(d.SecurityGroups) > 0 {
		rec.LoadBalancerID = servedBy(d.Port)
	}
	if insert {
		return tx.Insert(rec)
	}
	return tx.Update(rec)
}
