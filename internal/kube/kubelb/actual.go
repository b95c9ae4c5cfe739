package kubelb

import (
	"context"
	"fmt"
	"net/url"
)

// Actual is what Octavia holds of one desired load balancer: what Plan
// compares. Load fills it.
type Actual struct {
	// LB is the load balancer of the wanted name; nil when there is none.
	LB *ActualLB
	// Listeners are LB's, read only when its VIPs are the wanted ones
	// (otherwise it is replaced and they do not matter).
	Listeners []ActualListener
	// UpdatedAt is LB's updated_at as read ACTIVE before its listeners
	// were (Check): what was read is at least that new.
	UpdatedAt string
}

// The parts of Octavia's objects that Plan compares, as the API returns
// them.
type (
	ActualLB struct {
		ID                 string      `json:"id"`
		Name               string      `json:"name"`
		VIPAddress         string      `json:"vip_address"`
		VIPSubnetID        string      `json:"vip_subnet_id"`
		VIPPortID          string      `json:"vip_port_id"`
		AdditionalVIPs     []ActualVIP `json:"additional_vips"`
		ProvisioningStatus string      `json:"provisioning_status"`
		Provider           string      `json:"provider"`
		Tags               []string    `json:"tags"`
		UpdatedAt          string      `json:"updated_at"`
	}
	ActualVIP struct {
		SubnetID  string `json:"subnet_id"`
		IPAddress string `json:"ip_address,omitempty"`
	}
	ActualListener struct {
		ID            string   `json:"id"`
		Name          string   `json:"name"`
		Protocol      string   `json:"protocol"`
		ProtocolPort  int      `json:"protocol_port"`
		AllowedCIDRs  []string `json:"allowed_cidrs"`
		Tags          []string `json:"tags"`
		DefaultPoolID string   `json:"default_pool_id"`
		ClientData    int      `json:"timeout_client_data"`
		MemberConnect int      `json:"timeout_member_connect"`
		MemberData    int      `json:"timeout_member_data"`
		TCPInspect    int      `json:"timeout_tcp_inspect"`
		// Pool is the default pool, read only for the listeners the
		// desired load balancer keeps (the others are deleted by id).
		Pool *ActualPool `json:"-"`
	}
	ActualPool struct {
		ID                 string             `json:"id"`
		Name               string             `json:"name"`
		LBAlgorithm        string             `json:"lb_algorithm"`
		SessionPersistence *ActualPersistence `json:"session_persistence"`
		HealthMonitorID    string             `json:"healthmonitor_id"`
		Members            []ActualMember     `json:"-"`
		Monitor            *ActualMonitor     `json:"-"` // nil: none
	}
	ActualPersistence struct {
		Type               string `json:"type"`
		PersistenceTimeout int    `json:"persistence_timeout,omitempty"`
	}
	ActualMember struct {
		Name         string   `json:"name"`
		Address      string   `json:"address"`
		ProtocolPort int      `json:"protocol_port"`
		Tags         []string `json:"tags"`
	}
	ActualMonitor struct {
		ID             string `json:"id"`
		Type           string `json:"type"`
		Delay          int    `json:"delay"`
		Timeout        int    `json:"timeout"`
		MaxRetries     int    `json:"max_retries"`
		MaxRetriesDown int    `json:"max_retries_down"`
	}
)

// Ours reports whether lb, found by the name the controller of cluster
// gives a Service's load balancer, is that controller's: it carries
// TagCluster of cluster, as every load balancer the controller makes
// does. Another one of that name (cloud-provider-openstack names its own
// kube_service_<cluster>_<namespace>_<name> too) is neither changed nor
// deleted.
func Ours(lb *ActualLB, cluster string) bool {
	for _, t := range lb.Tags {
		if t == TagCluster+cluster {
			return true
		}
	}
	return false
}

// key identifies a listener within its load balancer, as listenerKey
// does a desired one.
func (l ActualListener) key() string { return fmt.Sprintf("%s/%d", l.Protocol, l.ProtocolPort) }

func listenerKey(l Listener) string { return fmt.Sprintf("%s/%d", l.Protocol, l.Port) }

// Load reads what Plan compares for want, and no more: the load balancer
// named want.Name and, when its VIPs are want's, once it is ACTIVE (what
// is read while a change is under way could be stale), its listeners and,
// for each listener that want keeps, the pool with its members and
// monitor.
func (o *Octavia) Load(ctx context.Context, want *LB) (*Actual, error) {
	cur, err := o.Find(ctx, want.Name)
	if err != nil {
		return nil, fmt.Errorf("find load balancer %s: %w", want.Name, err)
	}
	actual := &Actual{LB: cur}
	if cur == nil || !sameVIPs(cur, want) {
		return actual, nil
	}
	seen, err := o.waitActive(ctx, cur.ID)
	if err != nil {
		return nil, err
	}
	actual.UpdatedAt = seen.UpdatedAt
	listeners, err := listAll[ActualListener](ctx, o, o.url("listeners"), "listeners", url.Values{"loadbalancer_id": {cur.ID}})
	if err != nil {
		return nil, fmt.Errorf("list listeners of %s: %w", cur.ID, err)
	}
	kept := map[string]bool{}
	for _, l := range want.Listeners {
		kept[listenerKey(l)] = true
	}
	for i, l := range listeners {
		if !kept[l.key()] || l.DefaultPoolID == "" {
			continue
		}
		if listeners[i].Pool, err = o.loadPool(ctx, l.DefaultPoolID); err != nil {
			return nil, err
		}
	}
	actual.Listeners = listeners
	return actual, nil
}

// loadPool reads a pool, its members and its health monitor.
func (o *Octavia) loadPool(ctx context.Context, id string) (*ActualPool, error) {
	var pr struct {
		P ActualPool `json:"pool"`
	}
	if err := o.get(ctx, o.url("pools", id), &pr); err != nil {
		return nil, fmt.Errorf("get pool %s: %w", id, err)
	}
	members, err := listAll[ActualMember](ctx, o, o.url("pools", id, "members"), "members", nil)
	if err != nil {
		return nil, fmt.Errorf("list members of pool %s: %w", id, err)
	}
	p := &pr.P
	p.Members = members
	if p.HealthMonitorID != "" {
		var out struct {
			M ActualMonitor `json:"healthmonitor"`
		}
		if err := o.get(ctx, o.url("healthmonitors", p.HealthMonitorID), &out); err != nil {
			return nil, fmt.Errorf("get health monitor %s: %w", p.HealthMonitorID, err)
		}
		p.Monitor = &out.M
	}
	return p, nil
}
