package compiler

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// monitored is sample() with a TCP monitor on its pool.
func monitored() *lbaas.Tree {
	t := sample()
	t.Monitors = []*lbaas.HealthMonitor{{Base: base("hm"), PoolID: "pool", Type: "TCP", Delay: 5, Timeout: 3, MaxRetries: 2, MaxRetriesDown: 4}}
	return t
}

// tcpProbe is the probe monitored() gives member id at addr.
func tcpProbe(id, addr string) flows.Probe {
	return flows.Probe{MemberID: id, Address: netip.MustParseAddr(addr), Port: 8080, Type: flows.MonitorTCP,
		Delay: 5 * time.Second, Timeout: 3 * time.Second, MaxRetries: 2, MaxRetriesDown: 4}
}

func TestProbes(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		tree func() *lbaas.Tree
		want []flows.Probe
	}{
		{"no tree", func() *lbaas.Tree { return nil }, nil},
		{"no monitor", sample, nil},
		{"every member of a monitored pool", monitored, []flows.Probe{tcpProbe("m2", "198.18.18.2"), tcpProbe("m1", "198.18.17.2")}},
		{"admin down monitor", func() *lbaas.Tree { t := monitored(); t.Monitors[0].AdminStateUp = false; return t }, nil},
		{"admin down pool", func() *lbaas.Tree { t := monitored(); t.Pools[0].AdminStateUp = false; return t }, nil},
		{"pool being deleted", func() *lbaas.Tree { t := monitored(); t.Pools[0].ProvisioningStatus = lbaas.PendingDelete; return t }, nil},
		{"admin down member", func() *lbaas.Tree { t := monitored(); t.Members[0].AdminStateUp = false; return t },
			[]flows.Probe{tcpProbe("m1", "198.18.17.2")}},
		{"member being deleted", func() *lbaas.Tree { t := monitored(); t.Members[0].ProvisioningStatus = lbaas.PendingDelete; return t },
			[]flows.Probe{tcpProbe("m1", "198.18.17.2")}},
		{"member of weight 0 and in ERROR still probed", func() *lbaas.Tree {
			t := monitored()
			t.Members[0].Weight = 0
			t.Members[0].OperatingStatus, t.Members[0].Health = lbaas.OpError, lbaas.OpError
			return t
		}, []flows.Probe{func() flows.Probe { p := tcpProbe("m2", "198.18.18.2"); p.InitialStatus = lbaas.OpError; return p }(), tcpProbe("m1", "198.18.17.2")}},
		{"unusable address left out", func() *lbaas.Tree { t := monitored(); t.Members[0].Address = "not-an-address"; return t },
			[]flows.Probe{tcpProbe("m1", "198.18.17.2")}},
		{"monitor address and port, node tag", func() *lbaas.Tree {
			t := monitored()
			port := 9000
			t.Members = t.Members[1:]
			t.Members[0].MonitorAddress, t.Members[0].MonitorPort = str("198.18.17.9"), &port
			t.Members[0].Tags = []string{flows.TagNodePrefix + "n1"}
			return t
		}, []flows.Probe{func() flows.Probe {
			p := tcpProbe("m1", "198.18.17.9")
			p.Port, p.Node = 9000, "n1"
			return p
		}()}},
		{"unusable monitor address left out", func() *lbaas.Tree { t := monitored(); t.Members[0].MonitorAddress = str("x"); return t },
			[]flows.Probe{tcpProbe("m1", "198.18.17.2")}},
		{"HTTP fields", func() *lbaas.Tree {
			t := monitored()
			t.Members = t.Members[1:]
			version := 1.1
			hm := t.Monitors[0]
			hm.Type, hm.HTTPMethod, hm.URLPath, hm.ExpectedCodes, hm.HTTPVersion, hm.DomainName = "HTTP", str("HEAD"), str("/healthz"), str("200-204"), &version, str("example.test")
			return t
		}, []flows.Probe{func() flows.Probe {
			p := tcpProbe("m1", "198.18.17.2")
			p.Type, p.HTTPMethod, p.URLPath, p.ExpectedCodes, p.HTTPVersion, p.DomainName = flows.MonitorHTTP, "HEAD", "/healthz", "200-204", "1.1", "example.test"
			return p
		}()}},
		{"HTTP version 1.0 keeps its decimal", func() *lbaas.Tree {
			t := monitored()
			t.Members = t.Members[1:]
			version := 1.0
			t.Monitors[0].HTTPVersion = &version
			return t
		}, []flows.Probe{func() flows.Probe { p := tcpProbe("m1", "198.18.17.2"); p.HTTPVersion = "1.0"; return p }()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Probes(tc.tree()); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
