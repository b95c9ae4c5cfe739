package flows

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func fullL7() *L7 {
	return &L7{
		Policies: []L7Policy{
			{ID: "p1", Action: L7RedirectToPool, Pool: "pool-b", Rules: []L7Rule{{Type: RuleHeader, Compare: CompareContains, Key: "X-A", Value: "b"}}},
			{ID: "p2", Action: L7RedirectToURL, URL: "https://example.org/", Code: 301, Rules: []L7Rule{{Type: RulePath, Compare: CompareStartsWith, Value: "/old"}}},
		},
		DefaultPool: "pool-a",
		Pools: []L7Pool{
			{ID: "pool-a", Algorithm: RoundRobin, Backends: []Backend{{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 80, Weight: 1}},
				TLS: &L7PoolTLS{CA: []byte("ca"), CRL: []byte("crl"), Certificate: &L7Certificate{Chain: []byte("chain"), Key: []byte("key")},
					ALPN: []string{"h2", "http/1.1"}, Versions: []string{"TLSv1.2", "TLSv1.3"}, CipherSuites: []uint16{0xc02f, 0xc030}}},
			{ID: "pool-b", Algorithm: LeastConnections, Persistence: &L7Persistence{Type: PersistAppCookie, CookieName: "sid"}},
		},
		InsertHeaders: []string{"X-Forwarded-For"},
		ClientTimeout: 50 * time.Second, ConnectTimeout: 5 * time.Second, MemberTimeout: 50 * time.Second,
		TLS: &L7TLS{Certificates: []L7Certificate{{Chain: []byte("chain"), Key: []byte("key")}}, ClientAuth: "OPTIONAL",
			ClientCA: []byte("ca"), ClientCRL: []byte("crl"), ALPN: []string{"h2"}, Versions: []string{"TLSv1.3"},
			CipherSuites: []uint16{0xc02b, 0xc02f}, HSTSMaxAge: 10, HSTSIncludeSubdomains: true},
	}
}

// TestSameL7: a change to any one field of an L7 configuration, its
// policies, rules, pools or persistence makes it differ; every field of
// each is named here.
func TestSameL7(t *testing.T) {
	changes := map[string]func(l *L7){
		"L7.Policies":                 func(l *L7) { l.Policies = l.Policies[:1] },
		"L7.DefaultPool":              func(l *L7) { l.DefaultPool = "pool-b" },
		"L7.Pools":                    func(l *L7) { l.Pools = l.Pools[:1] },
		"L7.InsertHeaders":            func(l *L7) { l.InsertHeaders = nil },
		"L7.ClientTimeout":            func(l *L7) { l.ClientTimeout++ },
		"L7.ConnectTimeout":           func(l *L7) { l.ConnectTimeout++ },
		"L7.MemberTimeout":            func(l *L7) { l.MemberTimeout++ },
		"L7.TLS":                      func(l *L7) { l.TLS = nil },
		"L7TLS.Certificates":          func(l *L7) { l.TLS.Certificates[0].Key = []byte("other") },
		"L7TLS.ClientAuth":            func(l *L7) { l.TLS.ClientAuth = "MANDATORY" },
		"L7TLS.ClientCA":              func(l *L7) { l.TLS.ClientCA = nil },
		"L7TLS.ClientCRL":             func(l *L7) { l.TLS.ClientCRL = []byte("crl2") },
		"L7TLS.ALPN":                  func(l *L7) { l.TLS.ALPN = append(l.TLS.ALPN, "http/1.1") },
		"L7TLS.Versions":              func(l *L7) { l.TLS.Versions = nil },
		"L7TLS.CipherSuites":          func(l *L7) { l.TLS.CipherSuites = []uint16{0xc02f, 0xc02b} },
		"L7TLS.HSTSMaxAge":            func(l *L7) { l.TLS.HSTSMaxAge = -1 },
		"L7TLS.HSTSIncludeSubdomains": func(l *L7) { l.TLS.HSTSIncludeSubdomains = false },
		"L7TLS.HSTSPreload":           func(l *L7) { l.TLS.HSTSPreload = true },
		"L7Policy.ID":                 func(l *L7) { l.Policies[0].ID = "other" },
		"L7Policy.Action":             func(l *L7) { l.Policies[0].Action = L7Reject },
		"L7Policy.Pool":               func(l *L7) { l.Policies[0].Pool = "pool-a" },
		"L7Policy.URL":                func(l *L7) { l.Policies[1].URL = "https://example.com/" },
		"L7Policy.Code":               func(l *L7) { l.Policies[1].Code = 302 },
		"L7Policy.Rules":              func(l *L7) { l.Policies[0].Rules[0].Invert = true },
		"L7Pool.ID":                   func(l *L7) { l.Pools[0].ID = "other" },
		"L7Pool.Algorithm":            func(l *L7) { l.Pools[0].Algorithm = SourceIP },
		"L7Pool.Persistence":          func(l *L7) { l.Pools[0].Persistence = &L7Persistence{Type: PersistHTTPCookie} },
		"L7Pool.Backends":             func(l *L7) { l.Pools[0].Backends[0].Weight = 2 },
		"L7Pool.ProxyProtocol":        func(l *L7) { l.Pools[0].ProxyProtocol = 2 },
		"L7Pool.TLS":                  func(l *L7) { l.Pools[0].TLS = nil },
		"L7PoolTLS.CA":                func(l *L7) { l.Pools[0].TLS.CA = nil },
		"L7PoolTLS.CRL":               func(l *L7) { l.Pools[0].TLS.CRL = []byte("crl2") },
		"L7PoolTLS.Certificate":       func(l *L7) { l.Pools[0].TLS.Certificate.Key = []byte("other") },
		"L7PoolTLS.ALPN":              func(l *L7) { l.Pools[0].TLS.ALPN = l.Pools[0].TLS.ALPN[1:] },
		"L7PoolTLS.Versions":          func(l *L7) { l.Pools[0].TLS.Versions = []string{"TLSv1.3"} },
		"L7PoolTLS.CipherSuites":      func(l *L7) { l.Pools[0].TLS.CipherSuites = nil },
		"L7Persistence.Type":          func(l *L7) { l.Pools[1].Persistence.Type = PersistHTTPCookie },
		"L7Persistence.CookieName":    func(l *L7) { l.Pools[1].Persistence.CookieName = "other" },
		"L7Persistence.Timeout":       func(l *L7) { l.Pools[1].Persistence.Timeout = time.Minute },
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[L7](), reflect.TypeFor[L7Policy](), reflect.TypeFor[L7Pool](), reflect.TypeFor[L7Persistence](), reflect.TypeFor[L7TLS](), reflect.TypeFor[L7PoolTLS]()} {
		for i := range typ.NumField() {
			if name := typ.Name() + "." + typ.Field(i).Name; changes[name] == nil {
				t.Errorf("field %s has no case here: make sameL7 compare it and add one", name)
			}
		}
	}
	if !sameL7(fullL7(), fullL7()) {
		t.Fatal("an L7 configuration differs from its copy")
	}
	for name, change := range changes {
		a, b := fullL7(), fullL7()
		change(b)
		if sameL7(a, b) || sameL7(b, a) {
			t.Errorf("a change of %s went unnoticed", name)
		}
	}
	if sameL7(fullL7(), nil) || !sameL7(nil, nil) {
		t.Error("nil compares wrongly")
	}
	a, b := fullL7(), fullL7()
	a.InsertHeaders, b.InsertHeaders = nil, []string{}
	if !sameL7(a, b) {
		t.Error("nil and empty lists differ")
	}
}

func TestInsertHeaderNames(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]string
		want []string
	}{
		{nil, nil},
		{map[string]string{"X-Forwarded-For": "true"}, []string{"X-Forwarded-For"}},
		{map[string]string{"X-Forwarded-Proto": "True", "X-Forwarded-For": "false", "X-Forwarded-Port": "TRUE"}, []string{"X-Forwarded-Port", "X-Forwarded-Proto"}},
		{map[string]string{"X-Forwarded-For": "yes"}, nil},
	} {
		if got := InsertHeaderNames(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("InsertHeaderNames(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestL7Pool(t *testing.T) {
	l := fullL7()
	if p, ok := l.Pool("pool-b"); !ok || p.Algorithm != LeastConnections {
		t.Errorf("Pool(pool-b) = %+v, %v", p, ok)
	}
	if _, ok := l.Pool("none"); ok {
		t.Error("Pool(none) found a pool")
	}
}

// TestL7CertificatePrintsNoKey: no format, nested or not, shows a key.
func TestL7CertificatePrintsNoKey(t *testing.T) {
	l := fullL7()
	l.TLS.Certificates[0].Key = []byte("-----BEGIN PRIVATE KEY----- secret")
	l.Pools[0].TLS.Certificate.Key = []byte("-----BEGIN PRIVATE KEY----- secret")
	for _, s := range []string{fmt.Sprint(l.TLS.Certificates[0]), fmt.Sprintf("%+v", *l.TLS), fmt.Sprintf("%+v", l.Pools), fmt.Sprintf("%#v", l.Pools[0].TLS), fmt.Sprintf("%#v", l.TLS.Certificates), fmt.Sprintf("%v", []L7Certificate{l.TLS.Certificates[0]})} {
		if strings.Contains(s, "secret") || strings.Contains(s, "PRIVATE") {
			t.Errorf("a key printed: %s", s)
		}
	}
}

// TestL7Clone: a clone is equal and shares nothing: a change to any field
// of it leaves the original as it was.
func TestL7Clone(t *testing.T) {
	orig := fullL7()
	c := orig.Clone()
	if !sameL7(orig, &c) {
		t.Fatal("a clone differs")
	}
	c.Policies[0].Rules[0].Value = "x"
	c.Pools[0].Backends[0].Zones = append(c.Pools[0].Backends[0].Zones, "z")
	c.Pools[0].Backends[0].Weight = 9
	c.Pools[1].Persistence.CookieName = "x"
	c.InsertHeaders[0] = "x"
	c.TLS.Certificates[0].Key[0] = 'x'
	c.TLS.ClientCA[0] = 'x'
	c.TLS.ALPN[0] = "x"
	c.TLS.ClientAuth = "x"
	c.Pools[0].TLS.Certificate.Key[0] = 'x'
	c.Pools[0].TLS.CA[0] = 'x'
	c.Pools[0].TLS.ALPN[0] = "x"
	if !sameL7(orig, fullL7()) {
		t.Error("changing the clone changed the original")
	}
}
