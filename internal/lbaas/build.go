package lbaas

import (
	"net/netip"
	"strings"

	"github.com/flowlb/flowlb/internal/octavia/fault"
)

// Defaults for fields whose Octavia default comes from configuration.
const (
	DefaultTimeoutClientData    = 50000
	DefaultTimeoutMemberConnect = 5000
	DefaultTimeoutMemberData    = 50000
	DefaultTimeoutTCPInspect    = 0
)

// l4 groups protocols by the transport they ride on, for port clashes.
func l4(protocol string) string {
	switch protocol {
	case "UDP":
		return "UDP"
	case "SCTP":
		return "SCTP"
	default:
		return "TCP"
	}
}

// buildListener makes a listener of t from validated attrs (nested
// default_pool and l7policies already removed).
func (s *Service) buildListener(t *Tree, attrs map[string]any) (*Listener, error) {
	l := &Listener{
		Base:                 s.newBase(t.LB.ProjectID, attrs),
		LoadBalancerID:       t.LB.ID,
		ConnectionLimit:      -1,
		ClientAuthentication: "NONE",
		TimeoutClientData:    DefaultTimeoutClientData,
		TimeoutMemberConnect: DefaultTimeoutMemberConnect,
		TimeoutMemberData:    DefaultTimeoutMemberData,
		TimeoutTCPInspect:    DefaultTimeoutTCPInspect,
		InsertHeaders:        map[string]string{},
		AllowedCIDRs:         []string{},
		SNIContainerRefs:     []string{},
		TLSVersions:          []string{},
		ALPNProtocols:        []string{},
	}
	base := l.Base
	if err := apply(l, without(attrs, "project_id", "tenant_id", "loadbalancer_id", "default_pool", "l7policies")); err != nil {
		return nil, err
	}
	l.ID, l.ProjectID, l.ProvisioningStatus, l.OperatingStatus, l.CreatedAt = base.ID, base.ProjectID, PendingCreate, Offline, base.CreatedAt
	l.LoadBalancerID = t.LB.ID
	if l.Tags == nil {
		l.Tags = []string{}
	}
	if err := s.checkListener(t, l); err != nil {
		return nil, err
	}
	return l, nil
}

// checkListener enforces the rules that span objects.
func (s *Service) checkListener(t *Tree, l *Listener) error {
	for _, o := range t.Listeners {
		if o.ID != l.ID && o.ProtocolPort == l.ProtocolPort && l4(o.Protocol) == l4(l.Protocol) {
			return fault.Conflict("Another Listener on this Load Balancer is already using protocol %s and protocol_port %d", l.Protocol, l.ProtocolPort)
		}
	}
	if len(l.InsertHeaders) > 0 && l.Protocol != "HTTP" && l.Protocol != "TERMINATED_HTTPS" {
		return fault.Validation("The insert_headers option is only available for HTTP and TERMINATED_HTTPS listeners.")
	}
	if l.Protocol == "TERMINATED_HTTPS" && (l.DefaultTLSContainerRef == nil || *l.DefaultTLSContainerRef == "") {
		return fault.Validation("An SNI or default certificate container reference must be provided for TERMINATED_HTTPS listeners.")
	}
	vip, vipErr := netip.ParseAddr(t.LB.VIPAddress)
	for _, c := range l.AllowedCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fault.BadRequest("Invalid input for field/attribute allowed_cidrs. Value: '%s'.", c)
		}
		if vipErr == nil && p.Addr().Is4() != vip.Is4() && len(t.LB.AdditionalVIPs) == 0 {
			return fault.Validation("CIDR %s IP version incompatible with all VIPs %s IP version.", c, t.LB.VIPAddress)
		}
	}
	if l.DefaultPoolID != nil && *l.DefaultPoolID != "" {
		p := t.pool(*l.DefaultPoolID)
		if p == nil {
			return fault.BadRequest("Pool %s not found.", *l.DefaultPoolID)
		}
		if err := compatible(l.Protocol, p.Protocol); err != nil {
			return err
		}
	}
	return nil
}

// compatible enforces Octavia's listener/pool protocol combinations.
func compatible(listener, pool string) error {
	ok := map[string][]string{
		"HTTP":             {"HTTP", "PROXY", "PROXYV2"},
		"HTTPS":            {"HTTPS", "PROXY", "PROXYV2", "TCP"},
		"TCP":              {"HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP"},
		"TERMINATED_HTTPS": {"HTTP", "PROXY", "PROXYV2"},
		"UDP":              {"UDP"},
		"SCTP":             {"SCTP"},
		"PROMETHEUS":       {},
	}
	for _, p := range ok[listener] {
		if p == pool {
			return nil
		}
	}
	return fault.Validation("The pool protocol '%s' is invalid while the listener protocol is '%s'.", pool, listener)
}

// buildPool makes a pool of t from validated attrs (nested members and
// healthmonitor removed). listener, if not nil, gets it as default pool.
func (s *Service) buildPool(t *Tree, attrs map[string]any, listener *Listener) (*Pool, error) {
	p := &Pool{Base: s.newBase(t.LB.ProjectID, attrs), LoadBalancerID: t.LB.ID, TLSVersions: []string{}, ALPNProtocols: []string{}}
	base := p.Base
	if err := apply(p, without(attrs, "project_id", "tenant_id", "loadbalancer_id", "listener_id", "members", "healthmonitor")); err != nil {
		return nil, err
	}
	p.ID, p.ProjectID, p.ProvisioningStatus, p.OperatingStatus, p.CreatedAt = base.ID, base.ProjectID, PendingCreate, Offline, base.CreatedAt
	p.LoadBalancerID = t.LB.ID
	if p.Tags == nil {
		p.Tags = []string{}
	}
	if p.Protocol == "" && listener != nil {
		p.Protocol = listener.Protocol
	}
	if p.Protocol == "" {
		return nil, fault.BadRequest("Invalid input for field/attribute protocol. Value: 'Unset'. Mandatory field missing.")
	}
	if p.LBAlgorithm == "" {
		return nil, fault.BadRequest("Invalid input for field/attribute lb_algorithm. Value: 'Unset'. Mandatory field missing.")
	}
	if listener != nil {
		if listener.DefaultPoolID != nil && *listener.DefaultPoolID != "" {
			return nil, fault.Conflict("This listener already has a default pool")
		}
		if err := compatible(listener.Protocol, p.Protocol); err != nil {
			return nil, err
		}
		p.ListenerID = listener.ID
		id := p.ID
		listener.DefaultPoolID = &id
		t.markDirty(listener)
	}
	if err := checkPersistence(p); err != nil {
		return nil, err
	}
	return p, nil
}

func checkPersistence(p *Pool) error {
	sp := p.SessionPersistence
	if sp == nil {
		return nil
	}
	switch sp.Type {
	case "APP_COOKIE":
		if sp.CookieName == nil || *sp.CookieName == "" {
			return fault.Validation("A cookie_name must be provided with APP_COOKIE session persistence.")
		}
	case "HTTP_COOKIE", "SOURCE_IP":
		if sp.CookieName != nil && *sp.CookieName != "" {
			return fault.Validation("Cookie names are not supported for %s persistence.", sp.Type)
		}
	}
	if p.Protocol != "UDP" && p.Protocol != "SCTP" && (sp.PersistenceTimeout != nil || sp.PersistenceGranularity != nil) {
		// Octavia accepts the timeout for other protocols too and ignores it
		// there; flowlb applies it to every SOURCE_IP pool, so keep it.
		return nil
	}
	return nil
}

// buildMember makes a member of pool p from validated attrs.
func (s *Service) buildMember(t *Tree, p *Pool, attrs map[string]any) (*Member, error) {
	m := &Member{Base: s.newBase(t.LB.ProjectID, attrs), LoadBalancerID: t.LB.ID, PoolID: p.ID, Weight: 1}
	base := m.Base
	if err := apply(m, without(attrs, "project_id", "tenant_id", "pool_id", "request_sriov")); err != nil {
		return nil, err
	}
	m.ID, m.ProjectID, m.ProvisioningStatus, m.OperatingStatus, m.CreatedAt = base.ID, base.ProjectID, PendingCreate, Offline, base.CreatedAt
	m.PoolID, m.LoadBalancerID = p.ID, t.LB.ID
	if m.Tags == nil {
		m.Tags = []string{}
	}
	if v, _ := attrs["request_sriov"].(bool); v {
		return nil, fault.New(400, "The load balancer flavor does not allow SR-IOV member ports.")
	}
	if m.VnicType == "" {
		m.VnicType = "normal"
	}
	if err := checkMemberAddress(m); err != nil {
		return nil, err
	}
	for _, o := range t.poolMembers(p.ID) {
		if o.ID != m.ID && sameAddr(o.Address, m.Address) && o.ProtocolPort == m.ProtocolPort {
			return nil, fault.Conflict("Another member on this pool is already using ip %s on protocol_port %d", m.Address, m.ProtocolPort)
		}
	}
	return m, nil
}

func sameAddr(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return x == y
}

// checkMemberAddress refuses addresses no data plane can send to, as
// Octavia's validate.ip_not_reserved does.
func checkMemberAddress(m *Member) error {
	a, err := netip.ParseAddr(m.Address)
	if err != nil {
		return fault.New(400, "The IP Address %s is invalid.", m.Address)
	}
	if a.IsLoopback() || a.IsMulticast() || a.IsUnspecified() || a.IsLinkLocalUnicast() {
		return fault.Validation("The IP Address %s is reserved.", m.Address)
	}
	return nil
}

// buildMonitor makes the health monitor of pool p.
func (s *Service) buildMonitor(t *Tree, p *Pool, attrs map[string]any) (*HealthMonitor, error) {
	if t.poolMonitor(p.ID) != nil {
		return nil, fault.Conflict("This pool already has a health monitor")
	}
	h := &HealthMonitor{Base: s.newBase(t.LB.ProjectID, attrs), LoadBalancerID: t.LB.ID, PoolID: p.ID, MaxRetriesDown: 3}
	base := h.Base
	if err := apply(h, without(attrs, "project_id", "tenant_id", "pool_id")); err != nil {
		return nil, err
	}
	h.ID, h.ProjectID, h.ProvisioningStatus, h.OperatingStatus, h.CreatedAt = base.ID, base.ProjectID, PendingCreate, Offline, base.CreatedAt
	h.PoolID, h.LoadBalancerID = p.ID, t.LB.ID
	if h.Tags == nil {
		h.Tags = []string{}
	}
	if h.Type == "HTTP" || h.Type == "HTTPS" {
		def := func(p **string, v string) {
			if *p == nil {
				*p = &v
			}
		}
		def(&h.HTTPMethod, "GET")
		def(&h.URLPath, "/")
		def(&h.ExpectedCodes, "200")
	}
	if err := checkMonitor(p, h); err != nil {
		return nil, err
	}
	return h, nil
}

// checkMonitor validates a monitor against its pool. A timeout above the
// delay is accepted as Octavia accepts it (its tempest suite creates
// delay 2, timeout 3): probes of a member never overlap, so the interval
// just stretches.
func checkMonitor(p *Pool, h *HealthMonitor) error {
	http := h.Type == "HTTP" || h.Type == "HTTPS"
	if !http && (h.HTTPMethod != nil || h.URLPath != nil || h.ExpectedCodes != nil || h.HTTPVersion != nil || h.DomainName != nil) {
		var which []string
		if h.HTTPMethod != nil {
			which = append(which, "http_method")
		}
		if h.URLPath != nil {
			which = append(which, "url_path")
		}
		if h.ExpectedCodes != nil {
			which = append(which, "expected_codes")
		}
		if h.HTTPVersion != nil {
			which = append(which, "http_version")
		}
		if h.DomainName != nil {
			which = append(which, "domain_name")
		}
		return fault.Validation("The following fields are not valid for %s health monitors: %s.", h.Type, strings.Join(which, ", "))
	}
	if h.DomainName != nil && (h.HTTPVersion == nil || *h.HTTPVersion < 1.1) {
		return fault.Validation("The domain_name field is only valid with HTTP version 1.1.")
	}
	if p.Protocol == "UDP" || p.Protocol == "SCTP" {
		switch h.Type {
		case "UDP-CONNECT", "SCTP", "HTTP", "TCP":
		default:
			return fault.Validation("The associated pool protocol is %s, so only a UDP-CONNECT, HTTP, TCP or SCTP type health monitor is supported.", p.Protocol)
		}
	} else if h.Type == "UDP-CONNECT" {
		return fault.Validation("The associated pool protocol is %s, so only a HTTP, HTTPS, PING, SCTP, TCP or TLS-HELLO type health monitor is supported.", p.Protocol)
	}
	return nil
}

// buildPolicy makes an L7 policy of listener l.
func (s *Service) buildPolicy(t *Tree, l *Listener, attrs map[string]any) (*L7Policy, error) {
	pol := &L7Policy{Base: s.newBase(t.LB.ProjectID, attrs), LoadBalancerID: t.LB.ID, ListenerID: l.ID, Position: 2147483647}
	base := pol.Base
	if err := apply(pol, without(attrs, "project_id", "tenant_id", "listener_id", "rules", "redirect_pool")); err != nil {
		return nil, err
	}
	pol.ID, pol.ProjectID, pol.ProvisioningStatus, pol.OperatingStatus, pol.CreatedAt = base.ID, base.ProjectID, PendingCreate, Offline, base.CreatedAt
	pol.ListenerID, pol.LoadBalancerID = l.ID, t.LB.ID
	if pol.Tags == nil {
		pol.Tags = []string{}
	}
	if err := checkPolicy(t, l, pol); err != nil {
		return nil, err
	}
	// Positions are dense from 1; a new policy goes where asked and pushes
	// the rest down.
	others := t.listenerPolicies(l.ID)
	if pol.Position > len(others)+1 {
		pol.Position = len(others) + 1
	}
	for _, o := range others {
		if o.Position >= pol.Position {
			o.Position++
			t.markDirty(o)
		}
	}
	return pol, nil
}

func checkPolicy(t *Tree, l *Listener, p *L7Policy) error {
	switch p.Action {
	case "REDIRECT_TO_POOL":
		if p.RedirectPoolID == nil || *p.RedirectPoolID == "" {
			return fault.New(400, "Invalid L7 Policy arguments: redirect_pool_id or redirect_pool must not be None")
		}
		pool := t.pool(*p.RedirectPoolID)
		if pool == nil {
			return fault.New(400, "Pool %s not found.", *p.RedirectPoolID)
		}
		if err := compatible(l.Protocol, pool.Protocol); err != nil {
			return err
		}
		p.RedirectURL, p.RedirectPrefix, p.RedirectHTTPCode = nil, nil, nil
	case "REDIRECT_TO_URL":
		if p.RedirectURL == nil || *p.RedirectURL == "" {
			return fault.New(400, "Invalid L7 Policy arguments: redirect_url must not be None")
		}
		p.RedirectPoolID, p.RedirectPrefix = nil, nil
		if p.RedirectHTTPCode == nil {
			c := 302
			p.RedirectHTTPCode = &c
		}
	case "REDIRECT_PREFIX":
		if p.RedirectPrefix == nil || *p.RedirectPrefix == "" {
			return fault.New(400, "Invalid L7 Policy arguments: redirect_prefix must not be None")
		}
		p.RedirectPoolID, p.RedirectURL = nil, nil
		if p.RedirectHTTPCode == nil {
			c := 302
			p.RedirectHTTPCode = &c
		}
	case "REJECT":
		p.RedirectPoolID, p.RedirectURL, p.RedirectPrefix, p.RedirectHTTPCode = nil, nil, nil, nil
	}
	if l.Protocol == "UDP" || l.Protocol == "SCTP" || l.Protocol == "TCP" {
		return fault.New(400, "Protocol %s listeners cannot have child objects.", l.Protocol)
	}
	return nil
}

// buildRule makes an L7 rule of policy pol.
func (s *Service) buildRule(t *Tree, pol *L7Policy, attrs map[string]any) (*L7Rule, error) {
	if len(t.policyRules(pol.ID)) >= 50 {
		return nil, fault.Conflict("Too many rules on L7 policy %s", pol.ID)
	}
	r := &L7Rule{Base: s.newBase(t.LB.ProjectID, attrs), LoadBalancerID: t.LB.ID, L7PolicyID: pol.ID}
	base := r.Base
	if err := apply(r, without(attrs, "project_id", "tenant_id", "l7policy_id")); err != nil {
		return nil, err
	}
	r.ID, r.ProjectID, r.ProvisioningStatus, r.OperatingStatus, r.CreatedAt = base.ID, base.ProjectID, PendingCreate, Offline, base.CreatedAt
	r.L7PolicyID, r.LoadBalancerID = pol.ID, t.LB.ID
	if r.Tags == nil {
		r.Tags = []string{}
	}
	if err := checkRule(r); err != nil {
		return nil, err
	}
	return r, nil
}

func checkRule(r *L7Rule) error {
	needsKey := r.Type == "HEADER" || r.Type == "COOKIE" || r.Type == "SSL_DN_FIELD"
	if needsKey && (r.Key == nil || *r.Key == "") {
		return fault.New(400, "Error parsing L7Rule: key must be specified for %s rules.", r.Type)
	}
	switch r.Type {
	case "FILE_TYPE":
		if r.CompareType != "REGEX" && r.CompareType != "EQUAL_TO" {
			return fault.New(400, "Error parsing L7Rule: invalid compare type for file type rule.")
		}
	case "SSL_CONN_HAS_CERT":
		if r.CompareType != "EQUAL_TO" || r.Value != "True" {
			return fault.New(400, "Error parsing L7Rule: L7rule type SSL_CONN_HAS_CERT only supports EQUAL_TO comparison with value 'True'.")
		}
	}
	return nil
}
