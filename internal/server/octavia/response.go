package octavia

import "github.com/flowlb/flowlb/internal/server/lbaas"

// Octavia's response bodies as Go types (octavia/api/v2/types): one per
// object kind, the full variants of a single-call create, the root types
// that hold one object or a page of them, and links. The domain's objects
// become these in render.go; the encoder writes them as they are.
//
// Fields are declared in the order of their JSON names: the answers have
// always had their members sorted (they were maps), and the API
// transcripts compare bytes. TestResponseTypes keeps it so.
//
// A field tagged json:"-" with a filter tag is not in the answer: it is
// an attribute a list may still filter and sort on (see columnsOf), as it
// could when the answers were maps with these keys taken out last;
// ",omitempty" there means the attribute is known to a list only when an
// item has it.

// Link is a page's link (Octavia's PageType).
type Link struct {
	Href string `json:"href"`
	Rel  string `json:"rel"`
}

// AdditionalVIPResponse is one more address of a load balancer.
type AdditionalVIPResponse struct {
	IPAddress string `json:"ip_address"`
	PortID    string `json:"port_id,omitempty"`
	SubnetID  string `json:"subnet_id"`
}

// LoadBalancerResponse is Octavia's LoadBalancerResponse: its listeners
// and pools by id.
type LoadBalancerResponse = loadBalancerResponse[lbaas.Ref, lbaas.Ref]

// LoadBalancerFullResponse answers a fully populated create: listeners
// and pools in full, with their children.
type LoadBalancerFullResponse = loadBalancerResponse[ListenerFullResponse, PoolFullResponse]

type loadBalancerResponse[L, P any] struct {
	AdditionalVIPs     []AdditionalVIPResponse `json:"additional_vips"`
	AdminStateUp       bool                    `json:"admin_state_up"`
	AvailabilityZone   *string                 `json:"availability_zone"`
	CreatedAt          string                  `json:"created_at"`
	Description        string                  `json:"description"`
	FlavorID           *string                 `json:"flavor_id"`
	ID                 string                  `json:"id"`
	Listeners          []L                     `json:"listeners"`
	Name               string                  `json:"name"`
	OperatingStatus    string                  `json:"operating_status"`
	Pools              []P                     `json:"pools"`
	ProjectID          string                  `json:"project_id"`
	Provider           string                  `json:"provider"`
	ProvisioningStatus string                  `json:"provisioning_status"`
	Tags               []string                `json:"tags"`
	TenantID           string                  `json:"tenant_id"`
	UpdatedAt          *string                 `json:"updated_at"`
	VIPAddress         string                  `json:"vip_address"`
	VIPNetworkID       string                  `json:"vip_network_id"`
	VIPPortID          string                  `json:"vip_port_id"`
	VIPQoSPolicyID     *string                 `json:"vip_qos_policy_id"`
	VIPSGIDs           []string                `json:"vip_sg_ids"`
	VIPSubnetID        string                  `json:"vip_subnet_id"`
	VIPVnicType        string                  `json:"vip_vnic_type"`
	OwnsVIPPort        bool                    `json:"-" filter:"x_owns_vip_port,omitempty"`
}

// ListenerResponse is Octavia's ListenerResponse: its L7 policies by id.
type ListenerResponse = listenerResponse[lbaas.Ref]

// ListenerFullResponse is a listener of a fully populated create, its L7
// policies in full.
type ListenerFullResponse = listenerResponse[L7PolicyFullResponse]

type listenerResponse[P any] struct {
	AdminStateUp            bool              `json:"admin_state_up"`
	AllowedCIDRs            []string          `json:"allowed_cidrs"`
	ALPNProtocols           []string          `json:"alpn_protocols"`
	ClientAuthentication    string            `json:"client_authentication"`
	ClientCATLSContainerRef *string           `json:"client_ca_tls_container_ref"`
	ClientCRLContainerRef   *string           `json:"client_crl_container_ref"`
	ConnectionLimit         int               `json:"connection_limit"`
	CreatedAt               string            `json:"created_at"`
	DefaultPoolID           *string           `json:"default_pool_id"`
	DefaultTLSContainerRef  *string           `json:"default_tls_container_ref"`
	Description             string            `json:"description"`
	HSTSIncludeSubdomains   bool              `json:"hsts_include_subdomains"`
	HSTSMaxAge              *int              `json:"hsts_max_age"`
	HSTSPreload             bool              `json:"hsts_preload"`
	ID                      string            `json:"id"`
	InsertHeaders           map[string]string `json:"insert_headers"`
	L7Policies              []P               `json:"l7policies"`
	LoadBalancers           []lbaas.Ref       `json:"loadbalancers"`
	Name                    string            `json:"name"`
	OperatingStatus         string            `json:"operating_status"`
	ProjectID               string            `json:"project_id"`
	Protocol                string            `json:"protocol"`
	ProtocolPort            int               `json:"protocol_port"`
	ProvisioningStatus      string            `json:"provisioning_status"`
	SNIContainerRefs        []string          `json:"sni_container_refs"`
	Tags                    []string          `json:"tags"`
	TenantID                string            `json:"tenant_id"`
	TimeoutClientData       int               `json:"timeout_client_data"`
	TimeoutMemberConnect    int               `json:"timeout_member_connect"`
	TimeoutMemberData       int               `json:"timeout_member_data"`
	TimeoutTCPInspect       int               `json:"timeout_tcp_inspect"`
	TLSCiphers              *string           `json:"tls_ciphers"`
	TLSVersions             []string          `json:"tls_versions"`
	UpdatedAt               *string           `json:"updated_at"`
	LoadBalancerID          string            `json:"-" filter:"loadbalancer_id"`
}

// SessionPersistenceResponse is a pool's session persistence.
type SessionPersistenceResponse struct {
	CookieName             *string `json:"cookie_name"`
	PersistenceGranularity *string `json:"persistence_granularity"`
	PersistenceTimeout     *int    `json:"persistence_timeout"`
	Type                   string  `json:"type"`
}

// PoolResponse is Octavia's PoolResponse: its members by id.
type PoolResponse struct {
	AdminStateUp       bool                        `json:"admin_state_up"`
	ALPNProtocols      []string                    `json:"alpn_protocols"`
	CATLSContainerRef  *string                     `json:"ca_tls_container_ref"`
	CreatedAt          string                      `json:"created_at"`
	CRLContainerRef    *string                     `json:"crl_container_ref"`
	Description        string                      `json:"description"`
	HealthMonitorID    *string                     `json:"healthmonitor_id"`
	ID                 string                      `json:"id"`
	LBAlgorithm        string                      `json:"lb_algorithm"`
	Listeners          []lbaas.Ref                 `json:"listeners"`
	LoadBalancers      []lbaas.Ref                 `json:"loadbalancers"`
	Members            []lbaas.Ref                 `json:"members"`
	Name               string                      `json:"name"`
	OperatingStatus    string                      `json:"operating_status"`
	ProjectID          string                      `json:"project_id"`
	Protocol           string                      `json:"protocol"`
	ProvisioningStatus string                      `json:"provisioning_status"`
	SessionPersistence *SessionPersistenceResponse `json:"session_persistence"`
	Tags               []string                    `json:"tags"`
	TenantID           string                      `json:"tenant_id"`
	TLSCiphers         *string                     `json:"tls_ciphers"`
	TLSContainerRef    *string                     `json:"tls_container_ref"`
	TLSEnabled         bool                        `json:"tls_enabled"`
	TLSVersions        []string                    `json:"tls_versions"`
	UpdatedAt          *string                     `json:"updated_at"`
	LoadBalancerID     string                      `json:"-" filter:"loadbalancer_id"`
	ListenerID         string                      `json:"-" filter:"listener_id,omitempty"`
}

// PoolFullResponse is a pool of a fully populated create: its members and
// health monitor in full (null when it has none).
type PoolFullResponse struct {
	AdminStateUp       bool                        `json:"admin_state_up"`
	ALPNProtocols      []string                    `json:"alpn_protocols"`
	CATLSContainerRef  *string                     `json:"ca_tls_container_ref"`
	CreatedAt          string                      `json:"created_at"`
	CRLContainerRef    *string                     `json:"crl_container_ref"`
	Description        string                      `json:"description"`
	HealthMonitor      *HealthMonitorResponse      `json:"healthmonitor"`
	HealthMonitorID    *string                     `json:"healthmonitor_id"`
	ID                 string                      `json:"id"`
	LBAlgorithm        string                      `json:"lb_algorithm"`
	Listeners          []lbaas.Ref                 `json:"listeners"`
	LoadBalancers      []lbaas.Ref                 `json:"loadbalancers"`
	Members            []MemberResponse            `json:"members"`
	Name               string                      `json:"name"`
	OperatingStatus    string                      `json:"operating_status"`
	ProjectID          string                      `json:"project_id"`
	Protocol           string                      `json:"protocol"`
	ProvisioningStatus string                      `json:"provisioning_status"`
	SessionPersistence *SessionPersistenceResponse `json:"session_persistence"`
	Tags               []string                    `json:"tags"`
	TenantID           string                      `json:"tenant_id"`
	TLSCiphers         *string                     `json:"tls_ciphers"`
	TLSContainerRef    *string                     `json:"tls_container_ref"`
	TLSEnabled         bool                        `json:"tls_enabled"`
	TLSVersions        []string                    `json:"tls_versions"`
	UpdatedAt          *string                     `json:"updated_at"`
}

// MemberResponse is Octavia's MemberResponse.
type MemberResponse struct {
	Address            string   `json:"address"`
	AdminStateUp       bool     `json:"admin_state_up"`
	Backup             bool     `json:"backup"`
	CreatedAt          string   `json:"created_at"`
	ID                 string   `json:"id"`
	MonitorAddress     *string  `json:"monitor_address"`
	MonitorPort        *int     `json:"monitor_port"`
	Name               string   `json:"name"`
	OperatingStatus    string   `json:"operating_status"`
	ProjectID          string   `json:"project_id"`
	ProtocolPort       int      `json:"protocol_port"`
	ProvisioningStatus string   `json:"provisioning_status"`
	SubnetID           *string  `json:"subnet_id"`
	Tags               []string `json:"tags"`
	TenantID           string   `json:"tenant_id"`
	UpdatedAt          *string  `json:"updated_at"`
	VnicType           string   `json:"vnic_type"`
	Weight             int      `json:"weight"`
	PoolID             string   `json:"-" filter:"pool_id"`
	Health             string   `json:"-" filter:"x_health,omitempty"`
}

// HealthMonitorResponse is Octavia's HealthMonitorResponse.
type HealthMonitorResponse struct {
	AdminStateUp       bool        `json:"admin_state_up"`
	CreatedAt          string      `json:"created_at"`
	Delay              int         `json:"delay"`
	DomainName         *string     `json:"domain_name"`
	ExpectedCodes      *string     `json:"expected_codes"`
	HTTPMethod         *string     `json:"http_method"`
	HTTPVersion        *float64    `json:"http_version"`
	ID                 string      `json:"id"`
	MaxRetries         int         `json:"max_retries"`
	MaxRetriesDown     int         `json:"max_retries_down"`
	Name               string      `json:"name"`
	OperatingStatus    string      `json:"operating_status"`
	Pools              []lbaas.Ref `json:"pools"`
	ProjectID          string      `json:"project_id"`
	ProvisioningStatus string      `json:"provisioning_status"`
	Tags               []string    `json:"tags"`
	TenantID           string      `json:"tenant_id"`
	Timeout            int         `json:"timeout"`
	Type               string      `json:"type"`
	UpdatedAt          *string     `json:"updated_at"`
	URLPath            *string     `json:"url_path"`
	PoolID             string      `json:"-" filter:"pool_id"`
}

// L7PolicyResponse is Octavia's L7PolicyResponse: its rules by id.
type L7PolicyResponse = l7PolicyResponse[lbaas.Ref]

// L7PolicyFullResponse is an L7 policy of a fully populated create, its
// rules in full.
type L7PolicyFullResponse = l7PolicyResponse[L7RuleResponse]

type l7PolicyResponse[R any] struct {
	Action             string   `json:"action"`
	AdminStateUp       bool     `json:"admin_state_up"`
	CreatedAt          string   `json:"created_at"`
	Description        string   `json:"description"`
	ID                 string   `json:"id"`
	ListenerID         string   `json:"listener_id" filter:"listener_id"`
	Name               string   `json:"name"`
	OperatingStatus    string   `json:"operating_status"`
	Position           int      `json:"position"`
	ProjectID          string   `json:"project_id"`
	ProvisioningStatus string   `json:"provisioning_status"`
	RedirectHTTPCode   *int     `json:"redirect_http_code"`
	RedirectPoolID     *string  `json:"redirect_pool_id"`
	RedirectPrefix     *string  `json:"redirect_prefix"`
	RedirectURL        *string  `json:"redirect_url"`
	Rules              []R      `json:"rules"`
	Tags               []string `json:"tags"`
	TenantID           string   `json:"tenant_id"`
	UpdatedAt          *string  `json:"updated_at"`
}

// L7RuleResponse is Octavia's L7RuleResponse.
type L7RuleResponse struct {
	AdminStateUp       bool     `json:"admin_state_up"`
	CompareType        string   `json:"compare_type"`
	CreatedAt          string   `json:"created_at"`
	ID                 string   `json:"id"`
	Invert             bool     `json:"invert"`
	Key                *string  `json:"key"`
	OperatingStatus    string   `json:"operating_status"`
	ProjectID          string   `json:"project_id"`
	ProvisioningStatus string   `json:"provisioning_status"`
	Tags               []string `json:"tags"`
	TenantID           string   `json:"tenant_id"`
	Type               string   `json:"type"`
	UpdatedAt          *string  `json:"updated_at"`
	Value              string   `json:"value"`
	L7PolicyID         string   `json:"-" filter:"l7policy_id"`
}

// FlavorResponse is Octavia's FlavorResponse.
type FlavorResponse struct {
	Description     string `json:"description"`
	Enabled         bool   `json:"enabled"`
	FlavorProfileID string `json:"flavor_profile_id"`
	ID              string `json:"id"`
	Name            string `json:"name"`
}

// FlavorProfileResponse is Octavia's FlavorProfileResponse.
type FlavorProfileResponse struct {
	FlavorData   string `json:"flavor_data"`
	ID           string `json:"id"`
	Name         string `json:"name"`
	ProviderName string `json:"provider_name"`
}

// AvailabilityZoneResponse is Octavia's AvailabilityZoneResponse.
type AvailabilityZoneResponse struct {
	AvailabilityZoneProfileID string `json:"availability_zone_profile_id"`
	Description               string `json:"description"`
	Enabled                   bool   `json:"enabled"`
	Name                      string `json:"name"`
}

// AvailabilityZoneProfileResponse is Octavia's
// AvailabilityZoneProfileResponse.
type AvailabilityZoneProfileResponse struct {
	AvailabilityZoneData string `json:"availability_zone_data"`
	ID                   string `json:"id"`
	Name                 string `json:"name"`
	ProviderName         string `json:"provider_name"`
}

// QuotaResponse is a project's limits (Octavia's QuotaBase), -1 for
// none, the load balancer and health monitor limits in both spellings.
type QuotaResponse struct {
	HealthMonitor    int `json:"health_monitor"`
	HealthMonitorOld int `json:"healthmonitor"`
	L7Policy         int `json:"l7policy"`
	L7Rule           int `json:"l7rule"`
	Listener         int `json:"listener"`
	LoadBalancer     int `json:"load_balancer"`
	LoadBalancerOld  int `json:"loadbalancer"`
	Member           int `json:"member"`
	Pool             int `json:"pool"`
}

// QuotaAllResponse is a quota of the list, with its project
// (QuotaAllBase).
type QuotaAllResponse struct {
	QuotaResponse
	ProjectID string `json:"project_id"`
}

// ProviderResponse is a provider, and CapabilityResponse one of its flavor
// or availability zone options.
type ProviderResponse struct {
	Description string `json:"description"`
	Name        string `json:"name"`
}

// CapabilityResponse is a provider's flavor or availability zone option.
type CapabilityResponse struct {
	Description string `json:"description"`
	Name        string `json:"name"`
}

// StatsResponse is Octavia's statistics object (LoadBalancerStatisticsResponse,
// ListenerStatisticsResponse).
type StatsResponse struct {
	ActiveConnections int64 `json:"active_connections"`
	BytesIn           int64 `json:"bytes_in"`
	BytesOut          int64 `json:"bytes_out"`
	RequestErrors     int64 `json:"request_errors"`
	TotalConnections  int64 `json:"total_connections"`
}

// The status tree of GET /loadbalancers/{id}/status, in the shape
// Octavia's code returns.
type (
	StatusRoot struct {
		Statuses struct {
			LoadBalancer LoadBalancerStatus `json:"loadbalancer"`
		} `json:"statuses"`
	}
	LoadBalancerStatus struct {
		ID                 string           `json:"id"`
		Listeners          []ListenerStatus `json:"listeners"`
		Name               string           `json:"name"`
		OperatingStatus    string           `json:"operating_status"`
		ProvisioningStatus string           `json:"provisioning_status"`
	}
	ListenerStatus struct {
		ID                 string       `json:"id"`
		Name               string       `json:"name"`
		OperatingStatus    string       `json:"operating_status"`
		Pools              []PoolStatus `json:"pools"`
		ProvisioningStatus string       `json:"provisioning_status"`
	}
	PoolStatus struct {
		HealthMonitor      *HealthMonitorStatus `json:"health_monitor,omitempty"`
		ID                 string               `json:"id"`
		Members            []MemberStatus       `json:"members"`
		Name               string               `json:"name"`
		OperatingStatus    string               `json:"operating_status"`
		ProvisioningStatus string               `json:"provisioning_status"`
	}
	MemberStatus struct {
		Address            string `json:"address"`
		ID                 string `json:"id"`
		Name               string `json:"name"`
		OperatingStatus    string `json:"operating_status"`
		ProtocolPort       int    `json:"protocol_port"`
		ProvisioningStatus string `json:"provisioning_status"`
	}
	HealthMonitorStatus struct {
		ID                 string `json:"id"`
		Name               string `json:"name"`
		OperatingStatus    string `json:"operating_status"`
		ProvisioningStatus string `json:"provisioning_status"`
		Type               string `json:"type"`
	}
)

// VersionResponse is one API version of the version discovery.
type VersionResponse struct {
	ID      string `json:"id"`
	Links   []Link `json:"links"`
	Status  string `json:"status"`
	Updated string `json:"updated"`
}

// The root types: one object under its kind's key, or a page of them
// with its links. Octavia's list keys are irregular for the profiles, and
// kept so.
type (
	LoadBalancerRoot struct {
		LoadBalancer LoadBalancerResponse `json:"loadbalancer"`
	}
	LoadBalancerFullRoot struct {
		LoadBalancer LoadBalancerFullResponse `json:"loadbalancer"`
	}
	LoadBalancersPage struct {
		LoadBalancers []LoadBalancerResponse `json:"loadbalancers"`
		Links         []Link                 `json:"loadbalancers_links"`
	}
	ListenerRoot struct {
		Listener ListenerResponse `json:"listener"`
	}
	ListenersPage struct {
		Listeners []ListenerResponse `json:"listeners"`
		Links     []Link             `json:"listeners_links"`
	}
	PoolRoot struct {
		Pool PoolResponse `json:"pool"`
	}
	PoolsPage struct {
		Pools []PoolResponse `json:"pools"`
		Links []Link         `json:"pools_links"`
	}
	MemberRoot struct {
		Member MemberResponse `json:"member"`
	}
	MembersPage struct {
		Members []MemberResponse `json:"members"`
		Links   []Link           `json:"members_links"`
	}
	HealthMonitorRoot struct {
		HealthMonitor HealthMonitorResponse `json:"healthmonitor"`
	}
	HealthMonitorsPage struct {
		HealthMonitors []HealthMonitorResponse `json:"healthmonitors"`
		Links          []Link                  `json:"healthmonitors_links"`
	}
	L7PolicyRoot struct {
		L7Policy L7PolicyResponse `json:"l7policy"`
	}
	L7PoliciesPage struct {
		L7Policies []L7PolicyResponse `json:"l7policies"`
		Links      []Link             `json:"l7policies_links"`
	}
	L7RuleRoot struct {
		Rule L7RuleResponse `json:"rule"`
	}
	L7RulesPage struct {
		Rules []L7RuleResponse `json:"rules"`
		Links []Link           `json:"rules_links"`
	}
	FlavorRoot struct {
		Flavor FlavorResponse `json:"flavor"`
	}
	FlavorsPage struct {
		Flavors []FlavorResponse `json:"flavors"`
		Links   []Link           `json:"flavors_links"`
	}
	FlavorProfileRoot struct {
		FlavorProfile FlavorProfileResponse `json:"flavorprofile"`
	}
	FlavorProfilesPage struct {
		Links          []Link                  `json:"flavorprofile_links"`
		FlavorProfiles []FlavorProfileResponse `json:"flavorprofiles"`
	}
	AvailabilityZoneRoot struct {
		AvailabilityZone AvailabilityZoneResponse `json:"availability_zone"`
	}
	AvailabilityZonesPage struct {
		AvailabilityZones []AvailabilityZoneResponse `json:"availability_zones"`
		Links             []Link                     `json:"availability_zones_links"`
	}
	AvailabilityZoneProfileRoot struct {
		AvailabilityZoneProfile AvailabilityZoneProfileResponse `json:"availability_zone_profile"`
	}
	AvailabilityZoneProfilesPage struct {
		Links                    []Link                            `json:"availability_zone_profile_links"`
		AvailabilityZoneProfiles []AvailabilityZoneProfileResponse `json:"availability_zone_profiles"`
	}
	QuotaRoot struct {
		Quota QuotaResponse `json:"quota"`
	}
	QuotasPage struct {
		Quotas []QuotaAllResponse `json:"quotas"`
		Links  []Link             `json:"quotas_links"`
	}
	StatsRoot struct {
		Stats StatsResponse `json:"stats"`
	}
	// AnnouncementsRoot is flowlb's extension (not Octavia's): who
	// announces a load balancer's addresses to the network.
	AnnouncementsRoot struct {
		Announcements AnnouncementsResponse `json:"announcements"`
	}
	ProvidersRoot struct {
		Providers []ProviderResponse `json:"providers"`
	}
	FlavorCapabilitiesRoot struct {
		FlavorCapabilities []CapabilityResponse `json:"flavor_capabilities"`
	}
	AvailabilityZoneCapabilitiesRoot struct {
		AvailabilityZoneCapabilities []CapabilityResponse `json:"availability_zone_capabilities"`
	}
	// AmphoraePage is always empty: the flow provider runs no amphorae.
	AmphoraePage struct {
		Amphorae []struct{} `json:"amphorae"`
		Links    []Link     `json:"amphorae_links"`
	}
	VersionsRoot struct {
		Versions []VersionResponse `json:"versions"`
	}
)

// AnnouncementsResponse: for each address the load balancer's flows are
// served on, sorted, the nodes announcing it (sorted; empty when none
// does) and whether it is within some node's announced ranges (false:
// flowlb's nodes do not announce it, the network reaches it otherwise);
// announcing_nodes, the nodes that announce anything; unseen_nodes,
// the live agents streaming to other replicas, whose announcements the
// replica answering does not know.
type AnnouncementsResponse struct {
	Addresses       []AnnouncedAddress `json:"addresses"`
	AnnouncingNodes int                `json:"announcing_nodes"`
	UnseenNodes     int                `json:"unseen_nodes"`
}

// AnnouncedAddress is one address and the nodes announcing it.
type AnnouncedAddress struct {
	Address  string   `json:"address"`
	Nodes    []string `json:"nodes"`
	InRanges bool     `json:"in_announced_ranges"`
}
