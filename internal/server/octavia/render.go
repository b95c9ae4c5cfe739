package octavia

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// The domain's objects as Octavia's response types (response.go), each
// with what it refers to in its tree.

func refs[T any](xs []*T, id func(*T) string) []lbaas.Ref {
	out := make([]lbaas.Ref, 0, len(xs))
	for _, x := range xs {
		out = append(out, lbaas.Ref{ID: id(x)})
	}
	return out
}

func listenerID(l *lbaas.Listener) string { return l.ID }
func poolID(p *lbaas.Pool) string         { return p.ID }
func memberID(m *lbaas.Member) string     { return m.ID }
func policyID(p *lbaas.L7Policy) string   { return p.ID }
func ruleID(r *lbaas.L7Rule) string       { return r.ID }

func additionalVIPs(xs []lbaas.AdditionalVIP) []AdditionalVIPResponse {
	if xs == nil {
		return nil
	}
	out := make([]AdditionalVIPResponse, len(xs))
	for i, x := range xs {
		out[i] = AdditionalVIPResponse{IPAddress: x.IPAddress, PortID: x.PortID, SubnetID: x.SubnetID}
	}
	return out
}

func sessionPersistence(sp *lbaas.SessionPersistence) *SessionPersistenceResponse {
	if sp == nil {
		return nil
	}
	return &SessionPersistenceResponse{CookieName: sp.CookieName, PersistenceGranularity: sp.PersistenceGranularity,
		PersistenceTimeout: sp.PersistenceTimeout, Type: sp.Type}
}

func loadBalancerOf[L, P any](lb *lbaas.LoadBalancer, listeners []L, pools []P) loadBalancerResponse[L, P] {
	return loadBalancerResponse[L, P]{
		AdditionalVIPs: additionalVIPs(lb.AdditionalVIPs), AdminStateUp: lb.AdminStateUp, AvailabilityZone: lb.AvailabilityZone,
		CreatedAt: lb.CreatedAt, Description: lb.Description, FlavorID: lb.FlavorID, ID: lb.ID, Listeners: listeners, Name: lb.Name,
		OperatingStatus: lb.OperatingStatus, Pools: pools, ProjectID: lb.ProjectID, Provider: lb.Provider,
		ProvisioningStatus: lb.ProvisioningStatus, Tags: lb.Tags, TenantID: lb.ProjectID, UpdatedAt: lb.UpdatedAt,
		VIPAddress: lb.VIPAddress, VIPNetworkID: lb.VIPNetworkID, VIPPortID: lb.VIPPortID, VIPQoSPolicyID: lb.VIPQoSPolicyID,
		VIPSGIDs: lb.VIPSGIDs, VIPSubnetID: lb.VIPSubnetID, VIPVnicType: lb.VIPVnicType, OwnsVIPPort: lb.OwnsVIPPort,
	}
}

func renderLB(t *lbaas.Tree) LoadBalancerResponse {
	return loadBalancerOf(t.LB, refs(t.Listeners, listenerID), refs(t.Pools, poolID))
}

func listenerOf[P any](t *lbaas.Tree, l *lbaas.Listener, policies []P) listenerResponse[P] {
	return listenerResponse[P]{
		AdminStateUp: l.AdminStateUp, AllowedCIDRs: l.AllowedCIDRs, ALPNProtocols: l.ALPNProtocols,
		ClientAuthentication: l.ClientAuthentication, ClientCATLSContainerRef: l.ClientCATLSContainerRef,
		ClientCRLContainerRef: l.ClientCRLContainerRef, ConnectionLimit: l.ConnectionLimit, CreatedAt: l.CreatedAt,
		DefaultPoolID: l.DefaultPoolID, DefaultTLSContainerRef: l.DefaultTLSContainerRef, Description: l.Description,
		HSTSIncludeSubdomains: l.HSTSIncludeSubdomains, HSTSMaxAge: l.HSTSMaxAge, HSTSPreload: l.HSTSPreload, ID: l.ID,
		InsertHeaders: l.InsertHeaders, L7Policies: policies, LoadBalancers: []lbaas.Ref{{ID: t.LB.ID}}, Name: l.Name,
		OperatingStatus: l.OperatingStatus, ProjectID: l.ProjectID, Protocol: l.Protocol, ProtocolPort: l.ProtocolPort,
		ProvisioningStatus: l.ProvisioningStatus, SNIContainerRefs: l.SNIContainerRefs, Tags: l.Tags, TenantID: l.ProjectID,
		TimeoutClientData: l.TimeoutClientData, TimeoutMemberConnect: l.TimeoutMemberConnect, TimeoutMemberData: l.TimeoutMemberData,
		TimeoutTCPInspect: l.TimeoutTCPInspect, TLSCiphers: l.TLSCiphers, TLSVersions: l.TLSVersions, UpdatedAt: l.UpdatedAt,
		LoadBalancerID: l.LoadBalancerID,
	}
}

func renderListener(t *lbaas.Tree, l *lbaas.Listener) ListenerResponse {
	return listenerOf(t, l, refs(t.ListenerPolicies(l.ID), policyID))
}

// monitorID is the pool's health monitor's id, or nil.
func monitorID(t *lbaas.Tree, p *lbaas.Pool) *string {
	if h := t.PoolMonitor(p.ID); h != nil {
		return &h.ID
	}
	return nil
}

func renderPool(t *lbaas.Tree, p *lbaas.Pool) PoolResponse {
	return PoolResponse{
		ALPNProtocols: p.ALPNProtocols, AdminStateUp: p.AdminStateUp, CATLSContainerRef: p.CATLSContainerRef,
		CRLContainerRef: p.CRLContainerRef, CreatedAt: p.CreatedAt, Description: p.Description, HealthMonitorID: monitorID(t, p),
		ID: p.ID, LBAlgorithm: p.LBAlgorithm, Listeners: refs(t.ListenersOfPool(p.ID), listenerID),
		LoadBalancers: []lbaas.Ref{{ID: t.LB.ID}}, Members: refs(t.PoolMembers(p.ID), memberID), Name: p.Name,
		OperatingStatus: p.OperatingStatus, ProjectID: p.ProjectID, Protocol: p.Protocol, ProvisioningStatus: p.ProvisioningStatus,
		SessionPersistence: sessionPersistence(p.SessionPersistence), TLSCiphers: p.TLSCiphers, TLSContainerRef: p.TLSContainerRef,
		TLSEnabled: p.TLSEnabled, TLSVersions: p.TLSVersions, Tags: p.Tags, TenantID: p.ProjectID, UpdatedAt: p.UpdatedAt,
		LoadBalancerID: p.LoadBalancerID, ListenerID: p.ListenerID,
	}
}

// renderPoolFull is a pool of a fully populated create's answer: its
// members and health monitor in full.
func renderPoolFull(t *lbaas.Tree, p *lbaas.Pool) PoolFullResponse {
	members := []MemberResponse{}
	for _, m := range t.PoolMembers(p.ID) {
		members = append(members, renderMember(m))
	}
	var monitor *HealthMonitorResponse
	if h := t.PoolMonitor(p.ID); h != nil {
		r := renderMonitor(h)
		monitor = &r
	}
	return PoolFullResponse{
		ALPNProtocols: p.ALPNProtocols, AdminStateUp: p.AdminStateUp, CATLSContainerRef: p.CATLSContainerRef,
		CRLContainerRef: p.CRLContainerRef, CreatedAt: p.CreatedAt, Description: p.Description, HealthMonitor: monitor,
		HealthMonitorID: monitorID(t, p), ID: p.ID, LBAlgorithm: p.LBAlgorithm, Listeners: refs(t.ListenersOfPool(p.ID), listenerID),
		LoadBalancers: []lbaas.Ref{{ID: t.LB.ID}}, Members: members, Name: p.Name, OperatingStatus: p.OperatingStatus,
		ProjectID: p.ProjectID, Protocol: p.Protocol, ProvisioningStatus: p.ProvisioningStatus,
		SessionPersistence: sessionPersistence(p.SessionPersistence), TLSCiphers: p.TLSCiphers, TLSContainerRef: p.TLSContainerRef,
		TLSEnabled: p.TLSEnabled, TLSVersions: p.TLSVersions, Tags: p.Tags, TenantID: p.ProjectID, UpdatedAt: p.UpdatedAt,
	}
}

func renderMember(m *lbaas.Member) MemberResponse {
	return MemberResponse{
		Address: m.Address, AdminStateUp: m.AdminStateUp, Backup: m.Backup, CreatedAt: m.CreatedAt, ID: m.ID,
		MonitorAddress: m.MonitorAddress, MonitorPort: m.MonitorPort, Name: m.Name, OperatingStatus: m.OperatingStatus,
		ProjectID: m.ProjectID, ProtocolPort: m.ProtocolPort, ProvisioningStatus: m.ProvisioningStatus, SubnetID: m.SubnetID,
		Tags: m.Tags, TenantID: m.ProjectID, UpdatedAt: m.UpdatedAt, VnicType: m.VnicType, Weight: m.Weight,
		PoolID: m.PoolID, Health: m.Health,
	}
}

func renderMonitor(h *lbaas.HealthMonitor) HealthMonitorResponse {
	return HealthMonitorResponse{
		AdminStateUp: h.AdminStateUp, CreatedAt: h.CreatedAt, Delay: h.Delay, DomainName: h.DomainName,
		ExpectedCodes: h.ExpectedCodes, HTTPMethod: h.HTTPMethod, HTTPVersion: h.HTTPVersion, ID: h.ID, MaxRetries: h.MaxRetries,
		MaxRetriesDown: h.MaxRetriesDown, Name: h.Name, OperatingStatus: h.OperatingStatus, Pools: []lbaas.Ref{{ID: h.PoolID}},
		ProjectID: h.ProjectID, ProvisioningStatus: h.ProvisioningStatus, Tags: h.Tags, TenantID: h.ProjectID, Timeout: h.Timeout,
		Type: h.Type, URLPath: h.URLPath, UpdatedAt: h.UpdatedAt, PoolID: h.PoolID,
	}
}

func policyOf[R any](p *lbaas.L7Policy, rules []R) l7PolicyResponse[R] {
	return l7PolicyResponse[R]{
		Action: p.Action, AdminStateUp: p.AdminStateUp, CreatedAt: p.CreatedAt, Description: p.Description, ID: p.ID,
		Name: p.Name, OperatingStatus: p.OperatingStatus, Position: p.Position, ProjectID: p.ProjectID,
		ProvisioningStatus: p.ProvisioningStatus, RedirectHTTPCode: p.RedirectHTTPCode, RedirectPoolID: p.RedirectPoolID,
		RedirectPrefix: p.RedirectPrefix, RedirectURL: p.RedirectURL, Rules: rules, Tags: p.Tags, TenantID: p.ProjectID,
		UpdatedAt: p.UpdatedAt, ListenerID: p.ListenerID,
	}
}

func renderPolicy(t *lbaas.Tree, p *lbaas.L7Policy) L7PolicyResponse {
	return policyOf(p, refs(t.PolicyRules(p.ID), ruleID))
}

func renderRule(r *lbaas.L7Rule) L7RuleResponse {
	return L7RuleResponse{
		AdminStateUp: r.AdminStateUp, CompareType: r.CompareType, CreatedAt: r.CreatedAt, ID: r.ID, Invert: r.Invert, Key: r.Key,
		OperatingStatus: r.OperatingStatus, ProjectID: r.ProjectID, ProvisioningStatus: r.ProvisioningStatus, Tags: r.Tags,
		TenantID: r.ProjectID, Type: r.Type, UpdatedAt: r.UpdatedAt, Value: r.Value, L7PolicyID: r.L7PolicyID,
	}
}

// renderFull is the LoadBalancerFullResponse of a single-call create:
// listeners and pools as full objects with their own children inlined.
func renderFull(t *lbaas.Tree) LoadBalancerFullResponse {
	listeners := []ListenerFullResponse{}
	for _, l := range t.Listeners {
		policies := []L7PolicyFullResponse{}
		for _, p := range t.ListenerPolicies(l.ID) {
			rules := []L7RuleResponse{}
			for _, r := range t.PolicyRules(p.ID) {
				rules = append(rules, renderRule(r))
			}
			policies = append(policies, policyOf(p, rules))
		}
		listeners = append(listeners, listenerOf(t, l, policies))
	}
	pools := []PoolFullResponse{}
	for _, p := range t.Pools {
		pools = append(pools, renderPoolFull(t, p))
	}
	return loadBalancerOf(t.LB, listeners, pools)
}

// statusTree is GET /loadbalancers/{id}/status, in the shape Octavia's
// code returns (health_monitor key; only pools reachable from listeners).
func statusTree(t *lbaas.Tree) StatusRoot {
	listeners := []ListenerStatus{}
	for _, l := range t.Listeners {
		pools := []PoolStatus{}
		seen := map[string]bool{}
		addPool := func(id string) {
			p := t.Pool(id)
			if p == nil || seen[id] {
				return
			}
			seen[id] = true
			members := []MemberStatus{}
			for _, x := range t.PoolMembers(p.ID) {
				members = append(members, MemberStatus{Address: x.Address, ID: x.ID, Name: x.Name, OperatingStatus: x.OperatingStatus,
					ProtocolPort: x.ProtocolPort, ProvisioningStatus: x.ProvisioningStatus})
			}
			ps := PoolStatus{ID: p.ID, Members: members, Name: p.Name, OperatingStatus: p.OperatingStatus, ProvisioningStatus: p.ProvisioningStatus}
			if h := t.PoolMonitor(p.ID); h != nil {
				ps.HealthMonitor = &HealthMonitorStatus{ID: h.ID, Name: h.Name, OperatingStatus: h.OperatingStatus,
					ProvisioningStatus: h.ProvisioningStatus, Type: h.Type}
			}
			pools = append(pools, ps)
		}
		if l.DefaultPoolID != nil {
			addPool(*l.DefaultPoolID)
		}
		for _, pol := range t.ListenerPolicies(l.ID) {
			if pol.RedirectPoolID != nil {
				addPool(*pol.RedirectPoolID)
			}
		}
		listeners = append(listeners, ListenerStatus{ID: l.ID, Name: l.Name, OperatingStatus: l.OperatingStatus, Pools: pools,
			ProvisioningStatus: l.ProvisioningStatus})
	}
	var root StatusRoot
	root.Statuses.LoadBalancer = LoadBalancerStatus{ID: t.LB.ID, Listeners: listeners, Name: t.LB.Name,
		OperatingStatus: t.LB.OperatingStatus, ProvisioningStatus: t.LB.ProvisioningStatus}
	return root
}

func renderStats(c store.Counts) StatsResponse {
	return StatsResponse{ActiveConnections: c.ActiveConnections, BytesIn: c.BytesIn, BytesOut: c.BytesOut,
		RequestErrors: c.RequestErrors, TotalConnections: c.TotalConnections}
}

func renderAnnounced(a Announced) AnnouncementsRoot {
	out := AnnouncementsResponse{Addresses: make([]AnnouncedAddress, 0, len(a.Addresses)), AnnouncingNodes: a.Announcing, UnseenNodes: a.Unseen}
	for _, v := range slices.SortedFunc(maps.Keys(a.Addresses), netip.Addr.Compare) {
		nodes := slices.Sorted(slices.Values(a.Addresses[v]))
		if nodes == nil {
			nodes = []string{}
		}
		out.Addresses = append(out.Addresses, AnnouncedAddress{Address: v.String(), Nodes: nodes, InRanges: a.InRanges[v]})
	}
	return AnnouncementsRoot{out}
}

func renderFlavor(f *lbaas.Flavor) FlavorResponse {
	return FlavorResponse{Description: f.Description, Enabled: f.Enabled, FlavorProfileID: f.FlavorProfileID, ID: f.ID, Name: f.Name}
}

func renderFlavorProfile(p *lbaas.FlavorProfile) FlavorProfileResponse {
	return FlavorProfileResponse{FlavorData: p.FlavorData, ID: p.ID, Name: p.Name, ProviderName: p.ProviderName}
}

func renderAZ(az *lbaas.AvailabilityZone) AvailabilityZoneResponse {
	return AvailabilityZoneResponse{AvailabilityZoneProfileID: az.AvailabilityZoneProfileID, Description: az.Description,
		Enabled: az.Enabled, Name: az.Name}
}

func renderAZProfile(p *lbaas.AZProfile) AvailabilityZoneProfileResponse {
	return AvailabilityZoneProfileResponse{AvailabilityZoneData: p.AvailabilityZoneData, ID: p.ID, Name: p.Name, ProviderName: p.ProviderName}
}

// renderQuota gives -1 for no limit.
func renderQuota(q lbaas.Quota) QuotaResponse {
	v := func(p *int) int {
		if p == nil {
			return -1
		}
		return *p
	}
	return QuotaResponse{HealthMonitor: v(q.HealthMonitor), HealthMonitorOld: v(q.HealthMonitor), L7Policy: v(q.L7Policy),
		L7Rule: v(q.L7Rule), Listener: v(q.Listener), LoadBalancer: v(q.LoadBalancer), LoadBalancerOld: v(q.LoadBalancer),
		Member: v(q.Member), Pool: v(q.Pool)}
}
