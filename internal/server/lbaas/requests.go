package lbaas

import "encoding/json"

// The typed requests of the domain: what a caller may set on each kind of
// object, as Octavia's API types define it. Updates carry only mutable
// attributes, each an Opt so that an attribute left out stays as it is;
// creates embed their kind's update and add what is fixed at creation.
// The API layer decodes a body into them and checks every value against
// Octavia's wire types in the same pass (internal/server/octavia); the JSON
// methods below give encoding/json the same meaning, which that
// decoder's tests hold it to.

// Opt is an attribute a request may leave out. Given as null, it holds
// T's zero value: the attribute is cleared, as Octavia clears one set to
// None.
type Opt[T any] struct {
	Set   bool
	Value T
}

// Some is a given attribute.
func Some[T any](v T) Opt[T] { return Opt[T]{Set: true, Value: v} }

// UnmarshalJSON marks the attribute given; null leaves the zero value.
func (o *Opt[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	var v T
	if string(b) != "null" {
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
	}
	o.Value = v
	return nil
}

// assign sets *dst when the attribute was given.
func (o Opt[T]) assign(dst *T) {
	if o.Set {
		*dst = o.Value
	}
}

// Owner is the project a create names for its object; only an admin may
// name another than its own. tenant_id is its older spelling. ID, an
// extension of flowlb's, is the id the caller names for the new object
// (Tree.takeID).
type Owner struct {
	ProjectID string `json:"project_id"`
	TenantID  string `json:"tenant_id"`
	ID        string `json:"id"`
}

func (o Owner) project() string {
	if o.ProjectID != "" {
		return o.ProjectID
	}
	return o.TenantID
}

// LoadBalancerUpdate is PUT /loadbalancers/{id}.
type LoadBalancerUpdate struct {
	Name           Opt[string]   `json:"name"`
	Description    Opt[string]   `json:"description"`
	AdminStateUp   Opt[bool]     `json:"admin_state_up"`
	Tags           Opt[[]string] `json:"tags"`
	VIPQoSPolicyID Opt[*string]  `json:"vip_qos_policy_id"`
	VIPSGIDs       Opt[[]string] `json:"vip_sg_ids"`
}

func (u LoadBalancerUpdate) apply(lb *LoadBalancer) {
	u.Name.assign(&lb.Name)
	u.Description.assign(&lb.Description)
	u.AdminStateUp.assign(&lb.AdminStateUp)
	u.Tags.assign(&lb.Tags)
	u.VIPQoSPolicyID.assign(&lb.VIPQoSPolicyID)
	u.VIPSGIDs.assign(&lb.VIPSGIDs)
}

// LoadBalancerCreate is POST /loadbalancers, with or without the whole
// tree under it (Octavia's single-call "fully populated" create).
type LoadBalancerCreate struct {
	LoadBalancerUpdate
	Owner
	VIPAddress       string                `json:"vip_address"`
	VIPPortID        string                `json:"vip_port_id"`
	VIPSubnetID      string                `json:"vip_subnet_id"`
	VIPNetworkID     string                `json:"vip_network_id"`
	AdditionalVIPs   []AdditionalVIP       `json:"additional_vips"`
	Provider         string                `json:"provider"`
	FlavorID         *string               `json:"flavor_id"`
	AvailabilityZone *string               `json:"availability_zone"`
	Listeners        Opt[[]ListenerCreate] `json:"listeners"`
	Pools            Opt[[]NestedPool]     `json:"pools"`
	// UniqueName makes the create conditional on its name: refused
	// (NameTaken) when a load balancer of that name exists. Set from the
	// request's header (octaviaext.UniqueName), never from its body.
	UniqueName bool `json:"-"`
}

// FullyPopulated reports whether the create named listeners or pools, so
// that it is answered with the whole tree.
func (c LoadBalancerCreate) FullyPopulated() bool { return c.Listeners.Set || c.Pools.Set }

// ListenerUpdate is PUT /listeners/{id}.
type ListenerUpdate struct {
	Name                    Opt[string]            `json:"name"`
	Description             Opt[string]            `json:"description"`
	AdminStateUp            Opt[bool]              `json:"admin_state_up"`
	Tags                    Opt[[]string]          `json:"tags"`
	ConnectionLimit         Opt[int]               `json:"connection_limit"`
	DefaultTLSContainerRef  Opt[*string]           `json:"default_tls_container_ref"`
	SNIContainerRefs        Opt[[]string]          `json:"sni_container_refs"`
	ClientCATLSContainerRef Opt[*string]           `json:"client_ca_tls_container_ref"`
	ClientCRLContainerRef   Opt[*string]           `json:"client_crl_container_ref"`
	ClientAuthentication    Opt[string]            `json:"client_authentication"`
	DefaultPoolID           Opt[*string]           `json:"default_pool_id"`
	InsertHeaders           Opt[map[string]string] `json:"insert_headers"`
	TimeoutClientData       Opt[int]               `json:"timeout_client_data"`
	TimeoutMemberConnect    Opt[int]               `json:"timeout_member_connect"`
	TimeoutMemberData       Opt[int]               `json:"timeout_member_data"`
	TimeoutTCPInspect       Opt[int]               `json:"timeout_tcp_inspect"`
	AllowedCIDRs            Opt[[]string]          `json:"allowed_cidrs"`
	TLSCiphers              Opt[*string]           `json:"tls_ciphers"`
	TLSVersions             Opt[[]string]          `json:"tls_versions"`
	ALPNProtocols           Opt[[]string]          `json:"alpn_protocols"`
	HSTSMaxAge              Opt[*int]              `json:"hsts_max_age"`
	HSTSIncludeSubdomains   Opt[bool]              `json:"hsts_include_subdomains"`
	HSTSPreload             Opt[bool]              `json:"hsts_preload"`
}

func (u ListenerUpdate) apply(l *Listener) {
	u.Name.assign(&l.Name)
	u.Description.assign(&l.Description)
	u.AdminStateUp.assign(&l.AdminStateUp)
	u.Tags.assign(&l.Tags)
	u.ConnectionLimit.assign(&l.ConnectionLimit)
	u.DefaultTLSContainerRef.assign(&l.DefaultTLSContainerRef)
	u.SNIContainerRefs.assign(&l.SNIContainerRefs)
	u.ClientCATLSContainerRef.assign(&l.ClientCATLSContainerRef)
	u.ClientCRLContainerRef.assign(&l.ClientCRLContainerRef)
	u.ClientAuthentication.assign(&l.ClientAuthentication)
	u.DefaultPoolID.assign(&l.DefaultPoolID)
	u.InsertHeaders.assign(&l.InsertHeaders)
	u.TimeoutClientData.assign(&l.TimeoutClientData)
	u.TimeoutMemberConnect.assign(&l.TimeoutMemberConnect)
	u.TimeoutMemberData.assign(&l.TimeoutMemberData)
	u.TimeoutTCPInspect.assign(&l.TimeoutTCPInspect)
	u.AllowedCIDRs.assign(&l.AllowedCIDRs)
	u.TLSCiphers.assign(&l.TLSCiphers)
	u.TLSVersions.assign(&l.TLSVersions)
	u.ALPNProtocols.assign(&l.ALPNProtocols)
	u.HSTSMaxAge.assign(&l.HSTSMaxAge)
	u.HSTSIncludeSubdomains.assign(&l.HSTSIncludeSubdomains)
	u.HSTSPreload.assign(&l.HSTSPreload)
}

// ListenerCreate is POST /listeners, or a listener of a fully populated
// create (where LoadBalancerID is empty).
type ListenerCreate struct {
	ListenerUpdate
	Owner
	LoadBalancerID string           `json:"loadbalancer_id"`
	Protocol       string           `json:"protocol"`
	ProtocolPort   int              `json:"protocol_port"`
	DefaultPool    *NestedPool      `json:"default_pool"`
	L7Policies     []L7PolicyCreate `json:"l7policies"`
}

// PoolUpdate is PUT /pools/{id}.
type PoolUpdate struct {
	Name               Opt[string]              `json:"name"`
	Description        Opt[string]              `json:"description"`
	AdminStateUp       Opt[bool]                `json:"admin_state_up"`
	Tags               Opt[[]string]            `json:"tags"`
	LBAlgorithm        Opt[string]              `json:"lb_algorithm"`
	SessionPersistence Opt[*SessionPersistence] `json:"session_persistence"`
	TLSEnabled         Opt[bool]                `json:"tls_enabled"`
	TLSContainerRef    Opt[*string]             `json:"tls_container_ref"`
	CATLSContainerRef  Opt[*string]             `json:"ca_tls_container_ref"`
	CRLContainerRef    Opt[*string]             `json:"crl_container_ref"`
	TLSCiphers         Opt[*string]             `json:"tls_ciphers"`
	TLSVersions        Opt[[]string]            `json:"tls_versions"`
	ALPNProtocols      Opt[[]string]            `json:"alpn_protocols"`
}

func (u PoolUpdate) apply(p *Pool) {
	u.Name.assign(&p.Name)
	u.Description.assign(&p.Description)
	u.AdminStateUp.assign(&p.AdminStateUp)
	u.Tags.assign(&p.Tags)
	u.LBAlgorithm.assign(&p.LBAlgorithm)
	u.SessionPersistence.assign(&p.SessionPersistence)
	u.TLSEnabled.assign(&p.TLSEnabled)
	u.TLSContainerRef.assign(&p.TLSContainerRef)
	u.CATLSContainerRef.assign(&p.CATLSContainerRef)
	u.CRLContainerRef.assign(&p.CRLContainerRef)
	u.TLSCiphers.assign(&p.TLSCiphers)
	u.TLSVersions.assign(&p.TLSVersions)
	u.ALPNProtocols.assign(&p.ALPNProtocols)
}

// PoolCreate is POST /pools, or a pool nested in another create.
type PoolCreate struct {
	PoolUpdate
	Owner
	ListenerID     string         `json:"listener_id"`
	LoadBalancerID string         `json:"loadbalancer_id"`
	Protocol       string         `json:"protocol"`
	HealthMonitor  *MonitorCreate `json:"healthmonitor"`
	Members        []MemberCreate `json:"members"`
}

// NestedPool is a pool inside another object's create: a listener's
// default_pool, an L7 policy's redirect_pool, or an entry of a fully
// populated create's pools. Given by its name alone it refers, in a fully
// populated create, to a pool defined elsewhere in the same request.
type NestedPool struct {
	Name string
	// Def is the pool's definition; nil for a reference by name.
	Def *PoolCreate
}

// UnmarshalJSON tells a definition from a reference by the attributes
// given: a name and nothing else is a reference.
func (n *NestedPool) UnmarshalJSON(b []byte) error {
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(b, &attrs); err != nil {
		return err
	}
	var p PoolCreate
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	n.Name, n.Def = p.Name.Value, nil
	if len(attrs) > 1 {
		n.Def = &p
	}
	return nil
}

// Define is a nested pool given in full.
func Define(p PoolCreate) NestedPool { return NestedPool{Name: p.Name.Value, Def: &p} }

// definition is the pool to build when the create has no other
// definitions to refer to (a single-object create): the definition, or
// a pool with only the name.
func (n NestedPool) definition() *PoolCreate {
	if n.Def != nil {
		return n.Def
	}
	return &PoolCreate{PoolUpdate: PoolUpdate{Name: Some(n.Name)}}
}

// MemberUpdate is PUT /pools/{pool_id}/members/{id}, and the mutable part
// of a batch member update's entries.
type MemberUpdate struct {
	Name           Opt[string]   `json:"name"`
	AdminStateUp   Opt[bool]     `json:"admin_state_up"`
	Tags           Opt[[]string] `json:"tags"`
	Weight         Opt[int]      `json:"weight"`
	Backup         Opt[bool]     `json:"backup"`
	MonitorPort    Opt[*int]     `json:"monitor_port"`
	MonitorAddress Opt[*string]  `json:"monitor_address"`
}

func (u MemberUpdate) apply(m *Member) {
	u.Name.assign(&m.Name)
	u.AdminStateUp.assign(&m.AdminStateUp)
	u.Tags.assign(&m.Tags)
	u.Weight.assign(&m.Weight)
	u.Backup.assign(&m.Backup)
	u.MonitorPort.assign(&m.MonitorPort)
	u.MonitorAddress.assign(&m.MonitorAddress)
}

// MemberCreate is POST /pools/{pool_id}/members, an entry of a batch
// member update, or a member nested in a pool's create.
type MemberCreate struct {
	MemberUpdate
	Owner
	Address      string  `json:"address"`
	ProtocolPort int     `json:"protocol_port"`
	SubnetID     *string `json:"subnet_id"`
	RequestSRIOV bool    `json:"request_sriov"`
}

// MonitorUpdate is PUT /healthmonitors/{id}.
type MonitorUpdate struct {
	Name           Opt[string]   `json:"name"`
	AdminStateUp   Opt[bool]     `json:"admin_state_up"`
	Tags           Opt[[]string] `json:"tags"`
	Delay          Opt[int]      `json:"delay"`
	Timeout        Opt[int]      `json:"timeout"`
	MaxRetries     Opt[int]      `json:"max_retries"`
	MaxRetriesDown Opt[int]      `json:"max_retries_down"`
	HTTPMethod     Opt[*string]  `json:"http_method"`
	URLPath        Opt[*string]  `json:"url_path"`
	ExpectedCodes  Opt[*string]  `json:"expected_codes"`
	HTTPVersion    Opt[*float64] `json:"http_version"`
	DomainName     Opt[*string]  `json:"domain_name"`
}

func (u MonitorUpdate) apply(h *HealthMonitor) {
	u.Name.assign(&h.Name)
	u.AdminStateUp.assign(&h.AdminStateUp)
	u.Tags.assign(&h.Tags)
	u.Delay.assign(&h.Delay)
	u.Timeout.assign(&h.Timeout)
	u.MaxRetries.assign(&h.MaxRetries)
	u.MaxRetriesDown.assign(&h.MaxRetriesDown)
	u.HTTPMethod.assign(&h.HTTPMethod)
	u.URLPath.assign(&h.URLPath)
	u.ExpectedCodes.assign(&h.ExpectedCodes)
	u.HTTPVersion.assign(&h.HTTPVersion)
	u.DomainName.assign(&h.DomainName)
}

// MonitorCreate is POST /healthmonitors, or a pool's nested monitor.
type MonitorCreate struct {
	MonitorUpdate
	Owner
	PoolID string `json:"pool_id"`
	Type   string `json:"type"`
}

// L7PolicyUpdate is PUT /l7policies/{id}.
type L7PolicyUpdate struct {
	Name             Opt[string]   `json:"name"`
	Description      Opt[string]   `json:"description"`
	AdminStateUp     Opt[bool]     `json:"admin_state_up"`
	Tags             Opt[[]string] `json:"tags"`
	Action           Opt[string]   `json:"action"`
	Position         Opt[int]      `json:"position"`
	RedirectPoolID   Opt[*string]  `json:"redirect_pool_id"`
	RedirectURL      Opt[*string]  `json:"redirect_url"`
	RedirectPrefix   Opt[*string]  `json:"redirect_prefix"`
	RedirectHTTPCode Opt[*int]     `json:"redirect_http_code"`
}

func (u L7PolicyUpdate) apply(p *L7Policy) {
	u.Name.assign(&p.Name)
	u.Description.assign(&p.Description)
	u.AdminStateUp.assign(&p.AdminStateUp)
	u.Tags.assign(&p.Tags)
	u.Action.assign(&p.Action)
	u.Position.assign(&p.Position)
	u.RedirectPoolID.assign(&p.RedirectPoolID)
	u.RedirectURL.assign(&p.RedirectURL)
	u.RedirectPrefix.assign(&p.RedirectPrefix)
	u.RedirectHTTPCode.assign(&p.RedirectHTTPCode)
}

// L7PolicyCreate is POST /l7policies, or a listener's nested policy.
type L7PolicyCreate struct {
	L7PolicyUpdate
	Owner
	ListenerID   string         `json:"listener_id"`
	RedirectPool *NestedPool    `json:"redirect_pool"`
	Rules        []L7RuleCreate `json:"rules"`
}

// L7RuleUpdate is PUT /l7policies/{policy_id}/rules/{id}.
type L7RuleUpdate struct {
	AdminStateUp Opt[bool]     `json:"admin_state_up"`
	Tags         Opt[[]string] `json:"tags"`
	Type         Opt[string]   `json:"type"`
	CompareType  Opt[string]   `json:"compare_type"`
	Key          Opt[*string]  `json:"key"`
	Value        Opt[string]   `json:"value"`
	Invert       Opt[bool]     `json:"invert"`
}

func (u L7RuleUpdate) apply(r *L7Rule) {
	u.AdminStateUp.assign(&r.AdminStateUp)
	u.Tags.assign(&r.Tags)
	u.Type.assign(&r.Type)
	u.CompareType.assign(&r.CompareType)
	u.Key.assign(&r.Key)
	u.Value.assign(&r.Value)
	u.Invert.assign(&r.Invert)
}

// L7RuleCreate is POST /l7policies/{policy_id}/rules, or a policy's
// nested rule.
type L7RuleCreate struct {
	L7RuleUpdate
	Owner
}

// FlavorUpdate is PUT /flavors/{id}.
type FlavorUpdate struct {
	Name        Opt[string] `json:"name"`
	Description Opt[string] `json:"description"`
	Enabled     Opt[bool]   `json:"enabled"`
}

func (u FlavorUpdate) apply(f *Flavor) {
	u.Name.assign(&f.Name)
	u.Description.assign(&f.Description)
	u.Enabled.assign(&f.Enabled)
}

// FlavorCreate is POST /flavors.
type FlavorCreate struct {
	FlavorUpdate
	FlavorProfileID string `json:"flavor_profile_id"`
}

// FlavorProfileRequest is POST and PUT /flavorprofiles.
type FlavorProfileRequest struct {
	Name         Opt[string] `json:"name"`
	ProviderName Opt[string] `json:"provider_name"`
	FlavorData   Opt[string] `json:"flavor_data"`
}

func (u FlavorProfileRequest) apply(p *FlavorProfile) {
	u.Name.assign(&p.Name)
	u.ProviderName.assign(&p.ProviderName)
	u.FlavorData.assign(&p.FlavorData)
}

// AZUpdate is PUT /availabilityzones/{name}.
type AZUpdate struct {
	Description Opt[string] `json:"description"`
	Enabled     Opt[bool]   `json:"enabled"`
}

func (u AZUpdate) apply(az *AvailabilityZone) {
	u.Description.assign(&az.Description)
	u.Enabled.assign(&az.Enabled)
}

// AZCreate is POST /availabilityzones.
type AZCreate struct {
	AZUpdate
	Name                      string `json:"name"`
	AvailabilityZoneProfileID string `json:"availability_zone_profile_id"`
}

// AZProfileRequest is POST and PUT /availabilityzoneprofiles.
type AZProfileRequest struct {
	Name                 Opt[string] `json:"name"`
	ProviderName         Opt[string] `json:"provider_name"`
	AvailabilityZoneData Opt[string] `json:"availability_zone_data"`
}

func (u AZProfileRequest) apply(p *AZProfile) {
	u.Name.assign(&p.Name)
	u.ProviderName.assign(&p.ProviderName)
	u.AvailabilityZoneData.assign(&p.AvailabilityZoneData)
}
