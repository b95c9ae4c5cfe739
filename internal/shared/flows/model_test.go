package flows

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func fullService() Service {
	return Service{
		Key:            Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: UDP, Port: 53},
		LoadBalancerID: "lb", ListenerID: "l", PoolID: "p", Algorithm: SourceIP,
		Persistence:     &Persistence{Type: "SOURCE_IP", Timeout: 90 * time.Second},
		AllowedCIDRs:    []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		ConnectionLimit: 10,
		Backends: []Backend{
			{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 5353, Weight: 3, Node: "n1", Zones: []string{"zone-a"}},
		},
		LocalOnly: true, InternalLocal: true, PreferClose: true,
		HealthCheckNodePort: 30500, HealthCheckService: "ns/web",
		L7: fullL7(),
	}
}

// TestServiceEqual: a change to any one field makes a service differ;
// the table names every field, so a new field fails here until Equal
// compares it.
func TestServiceEqual(t *testing.T) {
	changes := map[string]func(s *Service){
		"Key":                 func(s *Service) { s.Key.Port++ },
		"LoadBalancerID":      func(s *Service) { s.LoadBalancerID = "other" },
		"ListenerID":          func(s *Service) { s.ListenerID = "other" },
		"PoolID":              func(s *Service) { s.PoolID = "other" },
		"Algorithm":           func(s *Service) { s.Algorithm = RoundRobin },
		"Persistence":         func(s *Service) { s.Persistence = &Persistence{Type: "SOURCE_IP", Timeout: time.Second} },
		"AllowedCIDRs":        func(s *Service) { s.AllowedCIDRs = nil },
		"AllowNone":           func(s *Service) { s.AllowNone = true },
		"OwnVIP":              func(s *Service) { s.OwnVIP = !s.OwnVIP },
		"ConnectionLimit":     func(s *Service) { s.ConnectionLimit = -1 },
		"Backends":            func(s *Service) { s.Backends[0].Zones = []string{"zone-b"} },
		"LocalOnly":           func(s *Service) { s.LocalOnly = false },
		"InternalLocal":       func(s *Service) { s.InternalLocal = false },
		"PreferClose":         func(s *Service) { s.PreferClose = false },
		"HealthCheckNodePort": func(s *Service) { s.HealthCheckNodePort++ },
		"HealthCheckService":  func(s *Service) { s.HealthCheckService = "ns/other" },
		"L7":                  func(s *Service) { s.L7 = nil },
	}
	fields := reflect.TypeFor[Service]()
	for i := range fields.NumField() {
		if _, ok := changes[fields.Field(i).Name]; !ok {
			t.Errorf("field %s has no case here: make Equal compare it and add one", fields.Field(i).Name)
		}
	}
	if a, b := fullService(), fullService(); !a.Equal(b) {
		t.Fatal("a service differs from its copy")
	}
	for name, change := range changes {
		a, b := fullService(), fullService()
		change(&b)
		if a.Equal(b) || b.Equal(a) {
			t.Errorf("a change of %s went unnoticed", name)
		}
	}
	// Unset and empty are the same.
	a, b := fullService(), fullService()
	a.Persistence, b.Persistence = nil, nil
	a.AllowedCIDRs, b.AllowedCIDRs = nil, []netip.Prefix{}
	a.Backends[0].Zones, b.Backends[0].Zones = nil, []string{}
	if !a.Equal(b) {
		t.Error("nil and empty lists differ")
	}
	b.Persistence = &Persistence{}
	if a.Equal(b) {
		t.Error("no persistence equals a zero one")
	}
}

// TestSameBackend: every field of a backend counts.
func TestSameBackend(t *testing.T) {
	base := fullService().Backends[0]
	changes := map[string]func(b *Backend){
		"MemberID":    func(b *Backend) { b.MemberID = "other" },
		"Address":     func(b *Backend) { b.Address = netip.MustParseAddr("198.18.17.3") },
		"Port":        func(b *Backend) { b.Port++ },
		"Weight":      func(b *Backend) { b.Weight++ },
		"Node":        func(b *Backend) { b.Node = "n2" },
		"Zones":       func(b *Backend) { b.Zones = append([]string{}, "zone-a", "zone-b") },
		"ForNodes":    func(b *Backend) { b.ForNodes = []string{"n9"} },
		"KeepClient":  func(b *Backend) { b.KeepClient = true },
		"Terminating": func(b *Backend) { b.Terminating = true },
	}
	fields := reflect.TypeFor[Backend]()
	for i := range fields.NumField() {
		if _, ok := changes[fields.Field(i).Name]; !ok {
			t.Errorf("field %s has no case here: make SameBackend compare it and add one", fields.Field(i).Name)
		}
	}
	for name, change := range changes {
		b := base
		b.Zones = append([]string{}, base.Zones...)
		change(&b)
		if SameBackend(base, b) {
			t.Errorf("a change of %s went unnoticed", name)
		}
	}
}

func TestKeyNodePort(t *testing.T) {
	for _, tc := range []struct {
		vip  string
		want bool
	}{{"0.0.0.0", true}, {"198.19.0.10", false}, {"::", true}, {"2001:2::10", false}} {
		if got := (Key{VIP: netip.MustParseAddr(tc.vip), Protocol: TCP, Port: 30080}).NodePort(); got != tc.want {
			t.Errorf("%s: NodePort %v, want %v", tc.vip, got, tc.want)
		}
	}
}

// TestServable: who may attract a service's outside traffic.
func TestServable(t *testing.T) {
	svc := func(local bool, nodes ...string) Service {
		s := Service{Key: Key{VIP: netip.MustParseAddr("198.19.128.1"), Protocol: TCP, Port: 80}, LocalOnly: local}
		for i, n := range nodes {
			s.Backends = append(s.Backends, Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, byte(i + 2)}), Port: 8080, Weight: 1, Node: n})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		svc  Service
		want bool
	}{
		{"cluster policy with backends anywhere", svc(false, "n2"), true},
		{"cluster policy without backends", svc(false), false},
		{"local-only with a backend here", svc(true, "n2", "n1"), true},
		{"local-only with backends elsewhere only", svc(true, "n2", "n3"), false},
		{"local-only with a backend of unknown node", svc(true, ""), false},
	} {
		if got := tc.svc.Servable("n1"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
