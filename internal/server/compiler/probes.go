package compiler

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Probes lists the members a load balancer's monitors probe: enabled
// members, not being deleted, of enabled pools (not being deleted) under
// an enabled monitor. A member's monitor_address and monitor_port, when
// set, replace its address and port; a member without a usable address is
// left out. A nil tree has none.
func Probes(t *lbaas.Tree) []flows.Probe {
	if t == nil || t.LB == nil {
		return nil
	}
	var out []flows.Probe
	for _, p := range t.Pools {
		hm := t.PoolMonitor(p.ID)
		if hm == nil || !hm.AdminStateUp || !p.AdminStateUp || p.ProvisioningStatus == lbaas.PendingDelete {
			continue
		}
		for _, m := range t.PoolMembers(p.ID) {
			if !m.AdminStateUp || m.ProvisioningStatus == lbaas.PendingDelete {
				continue
			}
			if pr, ok := probe(hm, m); ok {
				out = append(out, pr)
			}
		}
	}
	return out
}

// probe is one member's check under monitor hm.
func probe(hm *lbaas.HealthMonitor, m *lbaas.Member) (flows.Probe, bool) {
	addr, err := netip.ParseAddr(m.Address)
	if m.MonitorAddress != nil {
		addr, err = netip.ParseAddr(*m.MonitorAddress)
	}
	if err != nil {
		return flows.Probe{}, false
	}
	port := m.ProtocolPort
	if m.MonitorPort != nil {
		port = *m.MonitorPort
	}
	pr := flows.Probe{
		MemberID: m.ID, Address: addr, Port: uint16(port), Type: flows.MonitorType(hm.Type),
		Delay: time.Duration(hm.Delay) * time.Second, Timeout: time.Duration(hm.Timeout) * time.Second,
		MaxRetries: hm.MaxRetries, MaxRetriesDown: hm.MaxRetriesDown,
		HTTPMethod: deref(hm.HTTPMethod), URLPath: deref(hm.URLPath), ExpectedCodes: deref(hm.ExpectedCodes),
		DomainName: deref(hm.DomainName), InitialStatus: m.Health, Node: flows.NodeOf(m.Tags),
	}
	if hm.HTTPVersion != nil {
		pr.HTTPVersion = strconv.FormatFloat(*hm.HTTPVersion, 'f', 1, 64)
	}
	return pr, true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
