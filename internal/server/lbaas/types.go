// Package lbaas is flowlb's domain: load balancers and their children, the
// provisioning state machine (all locking on the parent load balancer),
// cascade delete, quotas and provider dispatch. It knows the rules, not
// HTTP: requests arrive as the typed requests of requests.go, which the
// API has decoded and checked against Octavia's wire types, and objects
// leave as the structs below (their JSON form is the stored document),
// which the API renders as Octavia's response types.
package lbaas

import "net/netip"

// Provisioning statuses.
const (
	Active            = "ACTIVE"
	PendingCreate     = "PENDING_CREATE"
	PendingUpdate     = "PENDING_UPDATE"
	PendingDelete     = "PENDING_DELETE"
	Deleted           = "DELETED"
	ProvisioningError = "ERROR"
)

// Operating statuses.
const (
	Online    = "ONLINE"
	Offline   = "OFFLINE"
	Degraded  = "DEGRADED"
	OpError   = "ERROR"
	Draining  = "DRAINING"
	NoMonitor = "NO_MONITOR"
)

// TimeFormat is Octavia's timestamp rendering: no zone, microseconds.
const TimeFormat = "2006-01-02T15:04:05.000000"

// Ref is Octavia's IdOnlyType.
type Ref struct {
	ID string `json:"id"`
}

// Base holds what every LBaaS object has.
type Base struct {
	ID                 string   `json:"id"`
	ProjectID          string   `json:"project_id"`
	ProvisioningStatus string   `json:"provisioning_status"`
	OperatingStatus    string   `json:"operating_status"`
	AdminStateUp       bool     `json:"admin_state_up"`
	CreatedAt          string   `json:"created_at"`
	UpdatedAt          *string  `json:"updated_at"`
	Tags               []string `json:"tags"`
}

// AdditionalVIP is one more address of a load balancer.
type AdditionalVIP struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
	PortID    string `json:"port_id,omitempty"`
}

// FloatingIP is what the data plane needs of a Neutron floating IP
// associated with a load balancer's VIP port: its address. The fields
// decode the Neutron subset's stored document (internal/server/neutron).
type FloatingIP struct {
	ID                string `json:"id"`
	FloatingIPAddress string `json:"floating_ip_address"`
	// FixedIPAddress is the VIP address it translates to.
	FixedIPAddress string `json:"fixed_ip_address"`
}

// LoadBalancer is the root of a tree; all locking happens on it.
type LoadBalancer struct {
	Base
	Name             string          `json:"name"`
	Description      string          `json:"description"`
	VIPAddress       string          `json:"vip_address"`
	VIPPortID        string          `json:"vip_port_id"`
	VIPSubnetID      string          `json:"vip_subnet_id"`
	VIPNetworkID     string          `json:"vip_network_id"`
	VIPQoSPolicyID   *string         `json:"vip_qos_policy_id"`
	VIPSGIDs         []string        `json:"vip_sg_ids"`
	VIPVnicType      string          `json:"vip_vnic_type"`
	AdditionalVIPs   []AdditionalVIP `json:"additional_vips"`
	Provider         string          `json:"provider"`
	FlavorID         *string         `json:"flavor_id"`
	AvailabilityZone *string         `json:"availability_zone"`
	// ownsVIPPort is internal: whether flowlb allocated vip_port_id and so
	// must release it on delete.
	OwnsVIPPort bool `json:"x_owns_vip_port,omitempty"`
}

// Listener is a protocol and port on the load balancer's VIPs.
type Listener struct {
	Base
	LoadBalancerID          string            `json:"loadbalancer_id"`
	Name                    string            `json:"name"`
	Description             string            `json:"description"`
	Protocol                string            `json:"protocol"`
	ProtocolPort            int               `json:"protocol_port"`
	ConnectionLimit         int               `json:"connection_limit"`
	DefaultPoolID           *string           `json:"default_pool_id"`
	DefaultTLSContainerRef  *string           `json:"default_tls_container_ref"`
	SNIContainerRefs        []string          `json:"sni_container_refs"`
	ClientCATLSContainerRef *string           `json:"client_ca_tls_container_ref"`
	ClientAuthentication    string            `json:"client_authentication"`
	ClientCRLContainerRef   *string           `json:"client_crl_container_ref"`
	InsertHeaders           map[string]string `json:"insert_headers"`
	TimeoutClientData       int               `json:"timeout_client_data"`
	TimeoutMemberConnect    int               `json:"timeout_member_connect"`
	TimeoutMemberData       int               `json:"timeout_member_data"`
	TimeoutTCPInspect       int               `json:"timeout_tcp_inspect"`
	AllowedCIDRs            []string          `json:"allowed_cidrs"`
	TLSCiphers              *string           `json:"tls_ciphers"`
	TLSVersions             []string          `json:"tls_versions"`
	ALPNProtocols           []string          `json:"alpn_protocols"`
	HSTSMaxAge              *int              `json:"hsts_max_age"`
	HSTSIncludeSubdomains   bool              `json:"hsts_include_subdomains"`
	HSTSPreload             bool              `json:"hsts_preload"`
}

// SessionPersistence keeps a client on one member.
type SessionPersistence struct {
	Type                   string  `json:"type"`
	CookieName             *string `json:"cookie_name"`
	PersistenceTimeout     *int    `json:"persistence_timeout"`
	PersistenceGranularity *string `json:"persistence_granularity"`
}

// Pool is a set of members behind a listener (or only on the LB).
type Pool struct {
	Base
	LoadBalancerID string `json:"loadbalancer_id"`
	// ListenerID is the listener the pool was created for, if any.
	ListenerID         string              `json:"listener_id,omitempty"`
	Name               string              `json:"name"`
	Description        string              `json:"description"`
	Protocol           string              `json:"protocol"`
	LBAlgorithm        string              `json:"lb_algorithm"`
	SessionPersistence *SessionPersistence `json:"session_persistence"`
	TLSEnabled         bool                `json:"tls_enabled"`
	TLSContainerRef    *string             `json:"tls_container_ref"`
	CATLSContainerRef  *string             `json:"ca_tls_container_ref"`
	CRLContainerRef    *string             `json:"crl_container_ref"`
	TLSCiphers         *string             `json:"tls_ciphers"`
	TLSVersions        []string            `json:"tls_versions"`
	ALPNProtocols      []string            `json:"alpn_protocols"`
}

// Member is one backend of a pool.
type Member struct {
	Base
	LoadBalancerID string  `json:"-"`
	PoolID         string  `json:"pool_id"`
	Name           string  `json:"name"`
	Address        string  `json:"address"`
	ProtocolPort   int     `json:"protocol_port"`
	Weight         int     `json:"weight"`
	Backup         bool    `json:"backup"`
	SubnetID       *string `json:"subnet_id"`
	MonitorAddress *string `json:"monitor_address"`
	MonitorPort    *int    `json:"monitor_port"`
	VnicType       string  `json:"vnic_type"`
	// Health is the last verdict of the member's probes (ONLINE, ERROR, or
	// empty before the first one); operating_status is derived from it.
	Health string `json:"x_health,omitempty"`
}

// HealthMonitor probes the members of one pool.
type HealthMonitor struct {
	Base
	LoadBalancerID string   `json:"-"`
	PoolID         string   `json:"pool_id"`
	Name           string   `json:"name"`
	Type           string   `json:"type"`
	Delay          int      `json:"delay"`
	Timeout        int      `json:"timeout"`
	MaxRetries     int      `json:"max_retries"`
	MaxRetriesDown int      `json:"max_retries_down"`
	HTTPMethod     *string  `json:"http_method"`
	URLPath        *string  `json:"url_path"`
	ExpectedCodes  *string  `json:"expected_codes"`
	HTTPVersion    *float64 `json:"http_version"`
	DomainName     *string  `json:"domain_name"`
}

// L7Policy is an HTTP routing policy of a listener.
type L7Policy struct {
	Base
	LoadBalancerID   string  `json:"-"`
	ListenerID       string  `json:"listener_id"`
	Name             string  `json:"name"`
	Description      string  `json:"description"`
	Action           string  `json:"action"`
	Position         int     `json:"position"`
	RedirectPoolID   *string `json:"redirect_pool_id"`
	RedirectURL      *string `json:"redirect_url"`
	RedirectPrefix   *string `json:"redirect_prefix"`
	RedirectHTTPCode *int    `json:"redirect_http_code"`
}

// L7Rule is one match of an L7 policy.
type L7Rule struct {
	Base
	LoadBalancerID string  `json:"-"`
	L7PolicyID     string  `json:"l7policy_id"`
	Type           string  `json:"type"`
	CompareType    string  `json:"compare_type"`
	Key            *string `json:"key"`
	Value          string  `json:"value"`
	Invert         bool    `json:"invert"`
}

// SecurityRules are the ingress rules of the security groups of a load
// balancer's VIP port, with remote groups resolved to their ports'
// addresses: what the compiler turns into each listener's allowed
// sources. A tree without them (nil) is not filtered.
type SecurityRules struct {
	Ingress []IngressRule
}

// IngressRule admits Sources of one address family to a protocol and
// port range.
type IngressRule struct {
	IPv6 bool
	// Protocol is an IP protocol number; AnyProtocol matches all.
	Protocol int
	// PortMin and PortMax bound the destination port; 0 and 0: any port.
	PortMin, PortMax int
	// Sources are the remote prefix, the addresses of the remote group's
	// ports, or the whole family when the rule names neither.
	Sources []netip.Prefix
}

// AnyProtocol is an IngressRule's Protocol when the rule names none.
const AnyProtocol = -1
