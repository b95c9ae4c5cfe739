// Package flow is the "flow" provider: load balancers realized as kernel
// flows on every node. It refuses, with Octavia's 501, everything a
// connection-level (L4) flow data plane cannot do, so clients and
// octavia-tempest-plugin see an honest "not supported" instead of a
// silently ignored option.
package flow

import (
	"net/netip"
	"slices"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Name is the provider's name in the API.
const Name = flows.ProviderName

// Realizer makes a committed change real on the nodes and reports back:
// the server's fan-out hub (internal/server/fanout, once every agent has
// programmed it), or Immediate.
type Realizer interface {
	Realize(lbID string, change int64, done func(error))
}

// Immediate completes every change as soon as it is committed: for the
// tests, benchmarks and test harnesses that run the API without agents.
type Immediate struct{}

// Realize reports success asynchronously, as a real provider would.
func (Immediate) Realize(_ string, _ int64, done func(error)) { go done(nil) }

// Provider is the flow provider.
type Provider struct {
	Realizer Realizer
	// OVN: the cloud's VMs reach the VIPs through OVN's load balancers
	// (agent --dataplane ovn, the server's --neutron-vip-ports ovn), so
	// what those cannot enforce or express is refused rather than
	// served to the nodes alone.
	OVN bool
}

// New returns the flow provider realizing changes through r.
func New(r Realizer) *Provider { return &Provider{Realizer: r} }

func (p *Provider) Name() string { return Name }

// Description is what GET /providers says of the flow provider.
const Description = "flowlb distributed L4 load balancing as kernel flows on every node"

func (p *Provider) Description() string { return Description }

func (p *Provider) Realize(lbID string, change int64, done func(error)) {
	p.Realizer.Realize(lbID, change, done)
}

// What flows can carry, the data plane implement and the agents probe is
// listed in internal/shared/flows (flows.Protocols, Algorithms, MonitorTypes).

func l4(protocol string) bool {
	_, ok := flows.ParseProtocol(protocol)
	return ok
}

func refuse(format string, args ...any) error {
	return lbaas.Unsupported(Name, format, args...)
}

// Check refuses what a flow data plane cannot serve.
func (p *Provider) Check(t *lbaas.Tree) error {
	if q := t.LB.VIPQoSPolicyID; q != nil && *q != "" {
		return refuse("VIP QoS policies are not supported.")
	}
	if len(t.LB.VIPSGIDs) > 0 {
		return refuse("VIP security groups are not supported.")
	}
	// Both address families are served: each VIP forwards to the members
	// of its own family (internal/server/compiler), so an IPv4 and an IPv6
	// member may share a pool, as under Octavia's amphora provider.
	for _, l := range t.Listeners {
		if !l4(l.Protocol) {
			return refuse("%s protocol listeners are not supported; use TCP, UDP or SCTP.", l.Protocol)
		}
		if l.DefaultTLSContainerRef != nil || len(l.SNIContainerRefs) > 0 || l.ClientCATLSContainerRef != nil {
			return refuse("TLS termination is not supported.")
		}
		if len(l.InsertHeaders) > 0 {
			return refuse("insert_headers is not supported.")
		}
	}
	if len(t.L7Policies) > 0 {
		return refuse("L7 policies are not supported.")
	}
	if p.OVN {
		if err := checkOVN(t); err != nil {
			return err
		}
	}
	for _, pool := range t.Pools {
		if !l4(pool.Protocol) {
			return refuse("%s protocol pools are not supported; use TCP, UDP or SCTP.", pool.Protocol)
		}
		if _, ok := flows.ParseAlgorithm(pool.LBAlgorithm); !ok {
			return refuse("%s algorithm is not supported.", pool.LBAlgorithm)
		}
		if sp := pool.SessionPersistence; sp != nil && sp.Type != "SOURCE_IP" {
			return refuse("%s session persistence is not supported; only SOURCE_IP is.", sp.Type)
		}
		if pool.TLSEnabled || pool.TLSContainerRef != nil || pool.CATLSContainerRef != nil {
			return refuse("TLS to members is not supported.")
		}
		if hm := t.PoolMonitor(pool.ID); hm != nil {
			if _, ok := flows.ParseMonitorType(hm.Type); !ok {
				return refuse("%s health monitors are not supported.", hm.Type)
			}
		}
		for _, l := range t.ListenersOfPool(pool.ID) {
			if l.Protocol != pool.Protocol {
				return refuse("a %s listener with a %s pool is not supported; the protocols must match.", l.Protocol, pool.Protocol)
			}
		}
	}
	return nil
}

// checkOVN refuses what OVN's Load_Balancer rows cannot hold: a source
// restriction or a connection limit (a VM would get past them), and
// weights that need more than flows.MaxWeightEntries repetitions.
func checkOVN(t *lbaas.Tree) error {
	for _, l := range t.Listeners {
		if len(l.AllowedCIDRs) > 0 && !slices.ContainsFunc(l.AllowedCIDRs, everySource) {
			return refuse("allowed_cidrs are not supported with the OVN data plane: OVN's load balancers cannot enforce them for the cloud's VMs.")
		}
		if l.ConnectionLimit >= 0 {
			return refuse("connection_limit is not supported with the OVN data plane: OVN's load balancers have no limit.")
		}
	}
	for _, pool := range t.Pools {
		var primaries, backups []int
		for _, m := range t.PoolMembers(pool.ID) {
			switch {
			case m.Weight == 0:
			case m.Backup:
				backups = append(backups, m.Weight)
			default:
				primaries = append(primaries, m.Weight)
			}
		}
		for _, ws := range [][]int{primaries, backups} {
			if n := flows.WeightEntries(ws); n > flows.MaxWeightEntries {
				return refuse("pool %s's member weights need %d backend entries with the OVN data plane, which has no weights and writes at most %d; use weights with a larger common divisor.", pool.ID, n, flows.MaxWeightEntries)
			}
		}
	}
	return nil
}

// everySource is an allowed CIDR that admits every source of its family.
func everySource(cidr string) bool {
	p, err := netip.ParsePrefix(cidr)
	return err == nil && p.Bits() == 0
}

func (p *Provider) FlavorCapabilities() []lbaas.Capability { return nil }

func (p *Provider) AZCapabilities() []lbaas.Capability { return nil }

// CheckFlavor accepts only an empty flavor: the provider has no options yet.
func (p *Provider) CheckFlavor(data map[string]any) error { return noOptions(data) }

// CheckAZ accepts only empty AZ data.
func (p *Provider) CheckAZ(data map[string]any) error { return noOptions(data) }

func noOptions(data map[string]any) error {
	for k := range data {
		return refuse("%s is not a supported option.", k)
	}
	return nil
}
