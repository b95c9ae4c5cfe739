package compiler

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func base(id string) lbaas.Base {
	return lbaas.Base{ID: id, AdminStateUp: true, ProvisioningStatus: lbaas.Active}
}

func member(id, addr string, port, weight int) *lbaas.Member {
	return &lbaas.Member{Base: base(id), PoolID: "pool", Address: addr, ProtocolPort: port, Weight: weight}
}

// sample is an LB with one TCP listener on 80 and a pool of two members.
func sample() *lbaas.Tree {
	pid := "pool"
	return &lbaas.Tree{
		LB:        &lbaas.LoadBalancer{Base: base("lb"), VIPAddress: "198.19.0.10"},
		Listeners: []*lbaas.Listener{{Base: base("l"), Protocol: "TCP", ProtocolPort: 80, ConnectionLimit: -1, DefaultPoolID: &pid}},
		Pools:     []*lbaas.Pool{{Base: base(pid), Protocol: "TCP", LBAlgorithm: "ROUND_ROBIN"}},
		Members:   []*lbaas.Member{member("m2", "198.18.18.2", 8080, 1), member("m1", "198.18.17.2", 8080, 3)},
	}
}

func fip(id, addr, fixed string) *lbaas.FloatingIP {
	return &lbaas.FloatingIP{ID: id, FloatingIPAddress: addr, FixedIPAddress: fixed}
}

// brief renders services compactly: key → backends.
func brief(ss []flows.Service) string {
	var parts []string
	for _, s := range ss {
		var bs []string
		for _, b := range s.Backends {
			bs = append(bs, fmt.Sprintf("%s:%d/%d", b.Address, b.Port, b.Weight))
		}
		parts = append(parts, fmt.Sprintf("%s %s:%d -> [%s]", s.Key.Protocol, s.Key.VIP, s.Key.Port, strings.Join(bs, " ")))
	}
	return strings.Join(parts, "; ")
}

func TestCompile(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *lbaas.Tree)
		want string
	}{
		{"members sorted with weights", nil, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"weight 0 takes no new connections", func(t *lbaas.Tree) { t.Members[1].Weight = 0 }, "TCP 198.19.0.10:80 -> [198.18.18.2:8080/1]"},
		{"admin down member", func(t *lbaas.Tree) { t.Members[0].AdminStateUp = false }, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3]"},
		{"member in ERROR by health", func(t *lbaas.Tree) { t.Members[0].OperatingStatus = lbaas.OpError }, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3]"},
		{"member being deleted", func(t *lbaas.Tree) { t.Members[0].ProvisioningStatus = lbaas.PendingDelete }, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3]"},
		{"backup unused while a primary is up", func(t *lbaas.Tree) { t.Members[0].Backup = true }, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3]"},
		{"backup takes over when no primary is usable", func(t *lbaas.Tree) {
			t.Members[0].Backup = true
			t.Members[1].OperatingStatus = lbaas.OpError
		}, "TCP 198.19.0.10:80 -> [198.18.18.2:8080/1]"},
		{"no usable member rejects", func(t *lbaas.Tree) { t.Members = nil }, "TCP 198.19.0.10:80 -> []"},
		{"no pool rejects", func(t *lbaas.Tree) { t.Listeners[0].DefaultPoolID = nil }, "TCP 198.19.0.10:80 -> []"},
		{"admin down pool rejects", func(t *lbaas.Tree) { t.Pools[0].AdminStateUp = false }, "TCP 198.19.0.10:80 -> []"},
		{"admin down listener does not listen", func(t *lbaas.Tree) { t.Listeners[0].AdminStateUp = false }, ""},
		{"admin down LB does not listen", func(t *lbaas.Tree) { t.LB.AdminStateUp = false }, ""},
		{"LB being deleted", func(t *lbaas.Tree) { t.LB.ProvisioningStatus = lbaas.PendingDelete }, ""},
		{"TLS listeners not yet served", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "TERMINATED_HTTPS" }, ""},
		{"HTTPS is passed through as TCP", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "HTTPS" }, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"an HTTP listener is TCP to the data plane", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "HTTP" }, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"UDP", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "UDP" }, "UDP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"SCTP", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "SCTP" }, "SCTP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"additional VIPs, backends of their family", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "198.19.0.11"}, {IPAddress: "fd00::10"}}
			t.Members = append(t.Members, member("m6", "fd00::2", 8080, 1))
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 198.19.0.11:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP fd00::10:80 -> [fd00::2:8080/1]"},
		{"floating IP of the VIP serves every listener", func(t *lbaas.Tree) {
			t.Listeners = append(t.Listeners, &lbaas.Listener{Base: base("l2"), Protocol: "UDP", ProtocolPort: 53, ConnectionLimit: -1})
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.10")}
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 198.19.128.7:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; UDP 198.19.0.10:53 -> []; UDP 198.19.128.7:53 -> []"},
		{"floating IP of an additional VIP", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "198.19.0.11"}}
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.11")}
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 198.19.0.11:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 198.19.128.7:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"floating IP to another address of the port is not served", func(t *lbaas.Tree) {
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.99")}
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"floating IP equal to a VIP is not a second key", func(t *lbaas.Tree) {
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.0.10", "198.19.0.10"), fip("f2", "198.19.128.7", "198.19.0.10"), fip("f3", "198.19.128.7", "198.19.0.10")}
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 198.19.128.7:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"floating IP keeps allowed_cidrs of its family", func(t *lbaas.Tree) {
			t.Listeners[0].AllowedCIDRs = []string{"fd00::/8"}
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.10")}
		}, ""},
		{"node port: one service per family on every node's addresses, whatever the VIPs", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "198.19.0.11"}}
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.10")}
			t.Listeners[0].ProtocolPort = 30080
			t.Listeners[0].Tags = []string{flows.TagNodePort}
			t.Members = append(t.Members, member("m6", "2001:2:0:11::2", 8080, 1))
		}, "TCP 0.0.0.0:30080 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP :::30080 -> [2001:2:0:11::2:8080/1]"},
		{"node port beside a VIP listener", func(t *lbaas.Tree) {
			np := &lbaas.Listener{Base: base("np"), Protocol: "UDP", ProtocolPort: 30053, ConnectionLimit: -1}
			np.Tags = []string{flows.TagNodePort}
			t.Listeners = append(t.Listeners, np)
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; UDP 0.0.0.0:30053 -> []"},
		{"external IPs of a listener: more keys of that listener only, none twice", func(t *lbaas.Tree) {
			t.Listeners[0].Tags = []string{flows.TagExternalIPPrefix + "198.19.200.1", flows.TagExternalIPPrefix + "198.19.0.10",
				flows.TagExternalIPPrefix + "198.19.200.1", flows.TagExternalIPPrefix + "not-an-address", flows.TagLocalOnly}
			t.Listeners = append(t.Listeners, &lbaas.Listener{Base: base("l2"), Protocol: "UDP", ProtocolPort: 53, ConnectionLimit: -1})
		}, "TCP 198.19.0.10:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; TCP 198.19.200.1:80 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]; UDP 198.19.0.10:53 -> []"},
		{"external IP tag on a node port is not a key", func(t *lbaas.Tree) {
			t.Listeners[0].ProtocolPort = 30080
			t.Listeners[0].Tags = []string{flows.TagNodePort, flows.TagExternalIPPrefix + "198.19.200.1"}
		}, "TCP 0.0.0.0:30080 -> [198.18.17.2:8080/3 198.18.18.2:8080/1]"},
		{"disabled node port does not listen", func(t *lbaas.Tree) {
			t.Listeners[0].Tags = []string{flows.TagNodePort}
			t.Listeners[0].AdminStateUp = false
		}, ""},
		{"disabled LB serves no floating IP", func(t *lbaas.Tree) {
			t.LB.AdminStateUp = false
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.10")}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := sample()
			if tc.edit != nil {
				tc.edit(tr)
			}
			if got := brief(Compile(tr)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestCompileAttributes(t *testing.T) {
	tr := sample()
	timeout := 30
	tr.Pools[0].LBAlgorithm = "SOURCE_IP"
	tr.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "SOURCE_IP", PersistenceTimeout: &timeout}
	tr.Listeners[0].AllowedCIDRs = []string{"198.18.17.5/16", "fd00::/8"}
	tr.Listeners[0].ConnectionLimit = 100
	tr.Listeners[0].Tags = []string{flows.TagLocalOnly, flows.TagInternalLocal, flows.TagPreferClose}
	tr.Members[0].Tags = []string{"x", flows.TagNodePrefix + "n2", flows.TagZonePrefix + "zone-b", flows.TagZonePrefix + "zone-a", flows.TagZonePrefix + "zone-b",
		flows.TagForNodePrefix + "n2"}
	ss := Compile(tr)
	if len(ss) != 1 {
		t.Fatalf("%d services", len(ss))
	}
	s := ss[0]
	if s.Algorithm != flows.SourceIP || s.Persistence == nil || s.Persistence.Timeout != 30*time.Second {
		t.Errorf("algorithm %s, persistence %+v", s.Algorithm, s.Persistence)
	}
	if len(s.AllowedCIDRs) != 1 || s.AllowedCIDRs[0] != netip.MustParsePrefix("198.18.0.0/16") {
		t.Errorf("allowed CIDRs %v: want the IPv4 one, masked", s.AllowedCIDRs)
	}
	if !s.LocalOnly || !s.InternalLocal || !s.PreferClose || s.ConnectionLimit != 100 || s.LoadBalancerID != "lb" || s.ListenerID != "l" || s.PoolID != "pool" {
		t.Errorf("service %+v", s)
	}
	if s.Backends[1].Node != "n2" || s.Backends[0].Node != "" {
		t.Errorf("nodes %q %q", s.Backends[0].Node, s.Backends[1].Node)
	}
	if z := s.Backends[1].Zones; len(z) != 2 || z[0] != "zone-a" || z[1] != "zone-b" || s.Backends[0].Zones != nil {
		t.Errorf("zones %q %q, want the member's zone tags sorted without repeats", s.Backends[0].Zones, z)
	}
	if n := s.Backends[1].ForNodes; len(n) != 1 || n[0] != "n2" || s.Backends[0].ForNodes != nil {
		t.Errorf("for-nodes %q %q, want the member's node hints", s.Backends[0].ForNodes, n)
	}
	// Persistence without a timeout takes Octavia's default.
	tr.Pools[0].SessionPersistence.PersistenceTimeout = nil
	if p := Compile(tr)[0].Persistence; p.Timeout != DefaultPersistenceTimeout {
		t.Errorf("default timeout %s", p.Timeout)
	}
}

// A node port keeps the listener's policies and ignores the VIP port's
// security groups.
func TestCompileNodePortAttributes(t *testing.T) {
	tr := sample()
	tr.Listeners[0].Tags = []string{flows.TagNodePort, flows.TagLocalOnly}
	tr.Members[0].Tags = []string{flows.TagNodePrefix + "n2"}
	tr.Security = &lbaas.SecurityRules{} // admits no source to the VIPs
	ss := Compile(tr)
	if len(ss) != 1 {
		t.Fatalf("%d services", len(ss))
	}
	s := ss[0]
	if !s.Key.NodePort() || !s.LocalOnly || s.AllowNone || s.PoolID != "pool" || s.ListenerID != "l" || s.Backends[1].Node != "n2" {
		t.Errorf("service %+v", s)
	}
}

// The health-check node port of a listener reaches its services, VIP
// and node port alike, with the Service named by the load balancer.
func TestCompileHealthCheckNodePort(t *testing.T) {
	for _, tc := range []struct {
		name        string
		lbTags      []string
		tags        []string
		wantPort    uint16
		wantService string
	}{
		{"none", []string{flows.TagKubeServicePrefix + "ns/web"}, []string{flows.TagLocalOnly}, 0, ""},
		{"on a VIP listener", []string{"x", flows.TagKubeServicePrefix + "ns/web"}, []string{flows.TagLocalOnly, flows.TagHealthCheckNodePortPrefix + "30500"}, 30500, "ns/web"},
		{"on a node port", []string{flows.TagKubeServicePrefix + "ns/web"}, []string{flows.TagNodePort, flows.TagLocalOnly, flows.TagHealthCheckNodePortPrefix + "30500"}, 30500, "ns/web"},
		{"a load balancer of no Service", nil, []string{flows.TagHealthCheckNodePortPrefix + "30501"}, 30501, ""},
		{"a tag that is no port", nil, []string{flows.TagHealthCheckNodePortPrefix + "http"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := sample()
			tr.LB.Tags = tc.lbTags
			tr.Listeners[0].Tags = tc.tags
			ss := Compile(tr)
			if len(ss) == 0 {
				t.Fatal("no services")
			}
			for _, s := range ss {
				if s.HealthCheckNodePort != tc.wantPort || s.HealthCheckService != tc.wantService {
					t.Errorf("%s: health check %d %q, want %d %q", s.Key, s.HealthCheckNodePort, s.HealthCheckService, tc.wantPort, tc.wantService)
				}
			}
		})
	}
}

// A floating IP's services are the VIP's in all but the address.
func TestFloatingIPServiceIsTheVIPs(t *testing.T) {
	tr := sample()
	timeout := 30
	tr.Pools[0].LBAlgorithm = "SOURCE_IP"
	tr.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "SOURCE_IP", PersistenceTimeout: &timeout}
	tr.Listeners[0].AllowedCIDRs = []string{"198.18.0.0/16"}
	tr.Listeners[0].ConnectionLimit = 100
	tr.Listeners[0].Tags = []string{flows.TagLocalOnly}
	tr.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.10")}
	ss := Compile(tr)
	if len(ss) != 2 {
		t.Fatalf("%d services, want the VIP's and the floating IP's", len(ss))
	}
	vip, fl := ss[0], ss[1]
	if fl.Key.VIP != netip.MustParseAddr("198.19.128.7") || fl.Key.Port != vip.Key.Port || fl.Key.Protocol != vip.Key.Protocol {
		t.Fatalf("floating IP key %+v, VIP key %+v", fl.Key, vip.Key)
	}
	fl.Key = vip.Key
	if !reflect.DeepEqual(fl, vip) {
		t.Errorf("floating IP service\n%+v\nwant the VIP's\n%+v", fl, vip)
	}
}

// A floating IP equal to another load balancer's VIP (which IPAM never
// gives out) is one more claim on the key: the table still holds it once,
// for the senior claimant, here the load balancer whose VIP it is.
func TestCompileAllFloatingIPOnAnotherVIP(t *testing.T) {
	a, b := sample(), sample()
	a.LB.CreatedAt = "2026-11-22T08:25:28.000002"
	b.LB.ID, b.LB.CreatedAt, b.LB.VIPAddress = "b", "2026-11-22T08:25:28.000003", "198.19.0.20"
	b.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.0.10", "198.19.0.20")}
	tab := CompileAll([]*lbaas.Tree{b, a}, 1)
	if len(tab.Services) != 2 {
		t.Fatalf("%d services, want one per VIP", len(tab.Services))
	}
	if s := tab.Services[flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}]; s.LoadBalancerID != "lb" {
		t.Errorf("198.19.0.10:80 held by %q, want the load balancer whose VIP it is", s.LoadBalancerID)
	}
}

func TestCompileAllSeniorClaimWins(t *testing.T) {
	a, b := sample(), sample()
	a.LB.CreatedAt = "2026-11-22T08:25:28.000002"
	b.LB.ID, b.LB.CreatedAt = "a-younger", "2026-11-22T08:25:28.000003"
	b.Members = b.Members[:1]
	for _, order := range [][]*lbaas.Tree{{a, b}, {b, a}, {nil, b, a}} {
		tab := CompileAll(order, 7)
		if tab.Revision != 7 || len(tab.Services) != 1 {
			t.Fatalf("table %+v", tab)
		}
		for _, s := range tab.Services {
			if s.LoadBalancerID != "lb" {
				t.Errorf("key held by %s, want the older lb", s.LoadBalancerID)
			}
		}
	}
}

func TestSeniority(t *testing.T) {
	for _, tc := range []struct {
		a, b Seniority
		want bool
	}{
		{Seniority{"2026-11-22T08:25:28.000001", "z"}, Seniority{"2026-11-22T08:25:28.000002", "a"}, true},
		{Seniority{"2026-11-22T08:25:29.000000", "a"}, Seniority{"2026-11-22T08:25:28.999999", "z"}, false},
		{Seniority{"2026-11-22T08:25:28.000001", "a"}, Seniority{"2026-11-22T08:25:28.000001", "b"}, true},
		{Seniority{"2026-11-22T08:25:28.000001", "b"}, Seniority{"2026-11-22T08:25:28.000001", "a"}, false},
		{Seniority{"2026-11-22T08:25:28.000001", "a"}, Seniority{"2026-11-22T08:25:28.000001", "a"}, false},
	} {
		if got := tc.a.Before(tc.b); got != tc.want {
			t.Errorf("%v before %v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A service is on the load balancer's own address (OwnVIP) for its VIP,
// additional VIPs and their floating IPs; not for a listener's external
// IPs, unless one is a VIP, nor for a node port.
func TestCompileOwnVIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *lbaas.Tree)
		want string
	}{
		{"VIP", nil, "198.19.0.10:80/TCP own"},
		{"additional VIPs and floating IPs", func(t *lbaas.Tree) {
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "198.19.0.11"}, {IPAddress: "2001:2::10"}}
			t.FloatingIPs = []*lbaas.FloatingIP{fip("f1", "198.19.128.7", "198.19.0.11")}
		}, "198.19.0.10:80/TCP own; 198.19.0.11:80/TCP own; [2001:2::10]:80/TCP own; 198.19.128.7:80/TCP own"},
		{"external IPs are borrowed, one equal to the VIP is the VIP", func(t *lbaas.Tree) {
			t.Listeners[0].Tags = []string{flows.TagExternalIPPrefix + "198.19.200.1", flows.TagExternalIPPrefix + "198.19.0.10", flows.TagExternalIPPrefix + "2001:2::7"}
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2::10"}}
		}, "198.19.0.10:80/TCP own; [2001:2::10]:80/TCP own; 198.19.200.1:80/TCP borrowed; [2001:2::7]:80/TCP borrowed"},
		{"external IP of a listener, VIP of another", func(t *lbaas.Tree) {
			t.Listeners[0].Tags = []string{flows.TagExternalIPPrefix + "198.19.200.1"}
			t.Listeners = append(t.Listeners, &lbaas.Listener{Base: base("l2"), Protocol: "UDP", ProtocolPort: 53, ConnectionLimit: -1})
		}, "198.19.0.10:80/TCP own; 198.19.200.1:80/TCP borrowed; 198.19.0.10:53/UDP own"},
		{"node port", func(t *lbaas.Tree) {
			t.Listeners[0].Tags = []string{flows.TagNodePort}
			t.Members = append(t.Members, member("m6", "2001:2:0:11::2", 8080, 1))
		}, "0.0.0.0:80/TCP borrowed; [::]:80/TCP borrowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := sample()
			if tc.edit != nil {
				tc.edit(tr)
			}
			var parts []string
			for _, s := range Compile(tr) {
				own := "borrowed"
				if s.OwnVIP {
					own = "own"
				}
				parts = append(parts, s.Key.String()+" "+own)
			}
			if got := strings.Join(parts, "; "); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
