package flowpb

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func fullService() flows.Service {
	return flows.Service{
		Key:            flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.UDP, Port: 53},
		LoadBalancerID: "lb", ListenerID: "l", PoolID: "p", Algorithm: flows.SourceIP,
		Persistence:     &flows.Persistence{Type: "SOURCE_IP", Timeout: 90 * time.Second},
		AllowedCIDRs:    []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		ConnectionLimit: 10,
		Backends: []flows.Backend{
			{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 5353, Weight: 3, Node: "n1", Zones: []string{"zone-a", "zone-b"}, ForNodes: []string{"n1"}, Terminating: true},
			{MemberID: "m2", Address: netip.MustParseAddr("198.18.18.2"), Port: 5353, Weight: 1},
		},
		// Every field set for the wire tests, though AllowNone never
		// comes with AllowedCIDRs from the compiler.
		LocalOnly: true, InternalLocal: true, PreferClose: true, AllowNone: true, OwnVIP: true,
		HealthCheckNodePort: 30500, HealthCheckService: "ns/web",
		L7: &flows.L7{
			Policies: []flows.L7Policy{
				{ID: "p1", Action: flows.L7RedirectToPool, Pool: "api", Rules: []flows.L7Rule{
					{Type: flows.RuleHeader, Compare: flows.CompareContains, Key: "X-A", Value: "b", Invert: true},
					{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/api"},
				}},
				{ID: "p2", Action: flows.L7RedirectPrefix, URL: "https://example.org", Code: 308, Rules: []flows.L7Rule{{Type: flows.RuleHostName, Compare: flows.CompareEqualTo, Value: "a"}}},
			},
			DefaultPool: "p",
			Pools: []flows.L7Pool{
				{ID: "p", Algorithm: flows.RoundRobin, Persistence: &flows.L7Persistence{Type: "SOURCE_IP", Timeout: time.Minute},
					Backends: []flows.Backend{{MemberID: "m3", Address: netip.MustParseAddr("2001:2::3"), Port: 80, Weight: 2, Node: "n2", Zones: []string{"z"}, ForNodes: []string{"n2"}, Terminating: true}},
					TLS: &flows.L7PoolTLS{CA: []byte("ca"), CRL: []byte("crl"), Certificate: &flows.L7Certificate{Chain: []byte("c"), Key: []byte("k")},
						ALPN: []string{"h2"}, Versions: []string{"TLSv1.3"}, CipherSuites: []uint16{0xc02f, 0x002f}}},
				{ID: "api", Algorithm: flows.LeastConnections, Persistence: &flows.L7Persistence{Type: "APP_COOKIE", CookieName: "sid"}, ProxyProtocol: 2},
			},
			InsertHeaders: []string{"X-Forwarded-For", "X-Forwarded-Port"},
			ClientTimeout: 50 * time.Second, ConnectTimeout: 5 * time.Second, MemberTimeout: time.Minute,
			TLS: &flows.L7TLS{Certificates: []flows.L7Certificate{{Chain: []byte("chain"), Key: []byte("key")}, {Chain: []byte("sni"), Key: []byte("k2")}},
				ClientAuth: "MANDATORY", ClientCA: []byte("ca"), ClientCRL: []byte("crl"), ALPN: []string{"h2", "http/1.1"},
				Versions: []string{"TLSv1.2", "TLSv1.3"}, CipherSuites: []uint16{0xcca9, 0xc02b}, HSTSMaxAge: 31536000, HSTSIncludeSubdomains: true, HSTSPreload: true},
		},
	}
}

func fullProbe() flows.Probe {
	return flows.Probe{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 8080, Type: flows.MonitorHTTP,
		Delay: 5 * time.Second, Timeout: 3 * time.Second, MaxRetries: 2, MaxRetriesDown: 4,
		HTTPMethod: "HEAD", URLPath: "/healthz", ExpectedCodes: "200-204", HTTPVersion: "1.1", DomainName: "example.test",
		InitialStatus: "ONLINE", Node: "n1"}
}

// wire marshals m and reads it back into a fresh message of its type, so
// that round trips go through the real encoding.
func wire[M proto.Message](t *testing.T, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundTrip: every field survives the wire (a probe's node is not
// sent).
func TestRoundTrip(t *testing.T) {
	s := fullService()
	if got := ServiceFromProto(wire(t, ServiceToProto(s))); !reflect.DeepEqual(got, s) {
		t.Errorf("service:\n got  %+v\n want %+v", got, s)
	}
	if got := KeyFromProto(wire(t, KeyToProto(s.Key))); got != s.Key {
		t.Errorf("key %+v, want %+v", got, s.Key)
	}
	if got := BackendFromProto(wire(t, BackendToProto(s.Backends[0]))); !reflect.DeepEqual(got, s.Backends[0]) {
		t.Errorf("backend %+v, want %+v", got, s.Backends[0])
	}
	other := s
	other.Key.Port = 54
	id, got := LoadBalancerServicesFromProto(wire(t, LoadBalancerServicesToProto("lb", []flows.Service{s, other})))
	if id != "lb" || len(got) != 2 || !reflect.DeepEqual(got[0], s) || !reflect.DeepEqual(got[1], other) {
		t.Errorf("load balancer services: %s %+v", id, got)
	}
	p := fullProbe()
	want := p
	want.Node = ""
	if got := ProbeFromProto(wire(t, ProbeToProto(p))); got != want {
		t.Errorf("probe:\n got  %+v\n want %+v", got, want)
	}
}

// TestEveryProtoFieldSet: encoding a value with every field set fills
// every field of the message, so a field added to the protocol fails
// here until it is translated.
func TestEveryProtoFieldSet(t *testing.T) {
	s := fullService()
	for name, m := range map[string]proto.Message{
		"Service": ServiceToProto(s), "ServiceKey": KeyToProto(s.Key), "Backend": BackendToProto(s.Backends[0]), "Probe": ProbeToProto(fullProbe()),
		"LoadBalancerServices": LoadBalancerServicesToProto(s.LoadBalancerID, []flows.Service{s}),
	} {
		r := m.ProtoReflect()
		fields := r.Descriptor().Fields()
		for i := range fields.Len() {
			if f := fields.Get(i); !r.Has(f) {
				t.Errorf("%s.%s is not set by the encoder", name, f.Name())
			}
		}
	}
}

func TestEdges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func() bool
	}{
		{"no persistence sends no timeout", func() bool {
			s := fullService()
			s.Persistence = nil
			return ServiceToProto(s).GetPersistenceTimeoutMs() == 0 && ServiceFromProto(ServiceToProto(s)).Persistence == nil
		}},
		{"a CIDR that does not parse is left out", func() bool {
			p := ServiceToProto(fullService())
			p.AllowedCidrs = append([]string{"nonsense"}, p.AllowedCidrs...)
			got := ServiceFromProto(p).AllowedCIDRs
			return len(got) == 1 && got[0] == netip.MustParsePrefix("198.18.0.0/15")
		}},
		{"an IPv6 key", func() bool {
			k := flows.Key{VIP: netip.MustParseAddr("2001:2::10"), Protocol: flows.TCP, Port: 443}
			return KeyFromProto(KeyToProto(k)) == k && len(KeyToProto(k).GetVip()) == 16
		}},
		{"a probe address that does not decode is invalid", func() bool {
			return !ProbeFromProto(&agentv1.Probe{MemberId: "m", Address: []byte{1, 2, 3}}).Address.IsValid()
		}},
		{"a load balancer's services belong to it", func() bool {
			p := LoadBalancerServicesToProto("lb-a", []flows.Service{fullService()})
			p.Services[0].LoadbalancerId = "lb-b"
			_, got := LoadBalancerServicesFromProto(p)
			return got[0].LoadBalancerID == "lb-a"
		}},
		{"a load balancer without services", func() bool {
			id, got := LoadBalancerServicesFromProto(wire(t, LoadBalancerServicesToProto("lb-a", nil)))
			return id == "lb-a" && len(got) == 0
		}},
		{"durations travel in milliseconds", func() bool {
			p := ProbeToProto(fullProbe())
			return p.GetDelayMs() == 5000 && p.GetTimeoutMs() == 3000
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.check() {
				t.Error("does not hold")
			}
		})
	}
}

func TestStatsRoundTrip(t *testing.T) {
	s := fullService()
	b0, b1 := s.Backends[0], s.Backends[1]
	gone := netip.MustParseAddrPort("198.18.17.99:80")
	st := flows.Stats{Counters: flows.Counters{Connections: 7, BytesIn: 1 << 40, BytesOut: 3, Refused: 2}, Active: 5,
		Members: map[netip.AddrPort]flows.Counters{
			netip.AddrPortFrom(b0.Address, b0.Port): {Connections: 4, BytesIn: 1 << 39, BytesOut: 1},
			netip.AddrPortFrom(b1.Address, b1.Port): {Connections: 3, BytesIn: 1 << 39, BytesOut: 2},
			gone:                                    {BytesIn: 9}}}
	gotS, gotSt := StatsFromProto(wire(t, StatsToProto(s, st)))
	// Members in address order; one the service no longer has, without
	// an id.
	want := flows.Service{Key: s.Key, LoadBalancerID: s.LoadBalancerID, ListenerID: s.ListenerID}
	for _, b := range s.Backends[:2] {
		want.Backends = append(want.Backends, flows.Backend{MemberID: b.MemberID, Address: b.Address, Port: b.Port})
	}
	want.Backends = append(want.Backends, flows.Backend{Address: gone.Addr(), Port: gone.Port()})
	slices.SortFunc(want.Backends, func(a, b flows.Backend) int {
		return netip.AddrPortFrom(a.Address, a.Port).Compare(netip.AddrPortFrom(b.Address, b.Port))
	})
	if !reflect.DeepEqual(gotS, want) || !reflect.DeepEqual(gotSt, st) {
		t.Errorf("round trip: %+v %+v, want %+v %+v", gotS, gotSt, want, st)
	}
}
