package compiler

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// fullOutput has every field of its services, backends and probes set.
func fullOutput() Output {
	return Output{
		Services: []flows.Service{{
			Key:            flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.UDP, Port: 53},
			LoadBalancerID: "lb", ListenerID: "l", PoolID: "p", Algorithm: flows.SourceIP,
			Persistence:     &flows.Persistence{Type: "SOURCE_IP", Timeout: 90 * time.Second},
			AllowedCIDRs:    []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
			AllowNone:       true,
			ConnectionLimit: 10,
			Backends: []flows.Backend{{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 5353, Weight: 3, Node: "n1",
				Zones: []string{"zone-a"}, ForNodes: []string{"n1"}, KeepClient: true, Terminating: true}},
			LocalOnly: true, InternalLocal: true, PreferClose: true,
			HealthCheckNodePort: 30500, HealthCheckService: "ns/web", OwnVIP: true,
			L7: &flows.L7{
				Policies: []flows.L7Policy{{ID: "pol", Action: flows.L7RedirectToURL, Pool: "p2", URL: "https://example.org/", Code: 301,
					Rules: []flows.L7Rule{{Type: flows.RuleHeader, Compare: flows.CompareEqualTo, Key: "X-A", Value: "b", Invert: true}}}},
				DefaultPool: "p",
				Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.LeastConnections,
					Persistence: &flows.L7Persistence{Type: "APP_COOKIE", CookieName: "sid", Timeout: time.Minute},
					Backends: []flows.Backend{{MemberID: "m2", Address: netip.MustParseAddr("198.18.17.3"), Port: 80, Weight: 1, Node: "n2",
						Zones: []string{"zone-b"}, ForNodes: []string{"n2"}, KeepClient: true, Terminating: true}},
					ProxyProtocol: 1,
					TLS: &flows.L7PoolTLS{CA: []byte("ca"), CRL: []byte("crl"), Certificate: &flows.L7Certificate{Chain: []byte("c"), Key: []byte("k")},
						ALPN: []string{"h2"}, Versions: []string{"TLSv1.3"}, CipherSuites: []uint16{0xc02f}}}},
				InsertHeaders: []string{"X-Forwarded-For"},
				ClientTimeout: time.Second, ConnectTimeout: time.Second, MemberTimeout: time.Second,
				TLS: &flows.L7TLS{Certificates: []flows.L7Certificate{{Chain: []byte("chain"), Key: []byte("key")}}, ClientAuth: "OPTIONAL",
					ClientCA: []byte("ca"), ClientCRL: []byte("crl"), ALPN: []string{"h2"}, Versions: []string{"TLSv1.3"},
					CipherSuites: []uint16{0xc02b}, HSTSMaxAge: 10, HSTSIncludeSubdomains: true, HSTSPreload: true},
			},
		}},
		Probes: []flows.Probe{{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 5353, Type: flows.MonitorHTTP,
			Delay: time.Second, Timeout: 2 * time.Second, MaxRetries: 3, MaxRetriesDown: 2, HTTPMethod: "GET", URLPath: "/",
			ExpectedCodes: "200", HTTPVersion: "1.1", DomainName: "example.org", InitialStatus: lbaas.Online, Node: "n1"}},
	}
}

// mutations returns, for every leaf field reachable from v (through
// structs, pointers and slices), a function that changes it in place,
// named by its path; a field of a type it cannot change fails the test,
// so that a new field cannot escape the digest unnoticed.
func mutations(t *testing.T, path string, v reflect.Value) map[string]func() {
	t.Helper()
	out := map[string]func(){}
	switch v.Interface().(type) {
	case []byte:
		out[path] = func() { v.SetBytes(append(slices.Clone(v.Bytes()), 'x')) }
		return out
	case netip.Addr:
		out[path] = func() { v.Set(reflect.ValueOf(netip.MustParseAddr("2001:2::9"))) }
		return out
	case netip.Prefix:
		out[path] = func() {
			p := v.Interface().(netip.Prefix)
			v.Set(reflect.ValueOf(netip.PrefixFrom(p.Addr(), p.Bits()-1)))
		}
		return out
	}
	switch v.Kind() {
	case reflect.String:
		out[path] = func() { v.SetString(v.String() + "x") }
	case reflect.Bool:
		out[path] = func() { v.SetBool(!v.Bool()) }
	case reflect.Int, reflect.Int64:
		out[path] = func() { v.SetInt(v.Int() + 1) }
	case reflect.Uint16:
		out[path] = func() { v.SetUint(v.Uint() + 1) }
	case reflect.Struct:
		for i := range v.NumField() {
			for p, m := range mutations(t, path+"."+v.Type().Field(i).Name, v.Field(i)) {
				out[p] = m
			}
		}
	case reflect.Pointer:
		if v.IsNil() {
			t.Fatalf("%s is nil in the full output", path)
		}
		out[path+"=nil"] = func() { v.Set(reflect.Zero(v.Type())) }
		for p, m := range mutations(t, path, v.Elem()) {
			out[p] = m
		}
	case reflect.Slice:
		if v.Len() == 0 {
			t.Fatalf("%s is empty in the full output", path)
		}
		out[path+"+1"] = func() { v.Set(reflect.Append(v, v.Index(0))) }
		out[path+"-1"] = func() { v.Set(v.Slice(0, v.Len()-1)) }
		for p, m := range mutations(t, path+"[0]", v.Index(0)) {
			out[p] = m
		}
	default:
		t.Fatalf("%s: a %s; teach the digest and this test to change it", path, v.Type())
	}
	return out
}

// TestDigestSeesEveryField: changing any one field of a service, backend,
// persistence, key or probe changes the digest, and nothing else does.
func TestDigestSeesEveryField(t *testing.T) {
	base := fullOutput().Digest()
	if again := fullOutput().Digest(); again != base {
		t.Fatal("one output, two digests")
	}
	probe := fullOutput()
	names := slices.Sorted(func(yield func(string) bool) {
		for p := range mutations(t, "out", reflect.ValueOf(&probe).Elem()) {
			if !yield(p) {
				return
			}
		}
	})
	if len(names) < 40 {
		t.Fatalf("only %d fields found: %v", len(names), names)
	}
	for _, name := range names {
		o := fullOutput()
		mutations(t, "out", reflect.ValueOf(&o).Elem())[name]()
		if o.Digest() == base {
			t.Errorf("a change of %s leaves the digest as it was", name)
		}
	}
}

// TestDigestFraming: outputs that would concatenate alike differ, nil and
// empty lists are one, and order counts.
func TestDigestFraming(t *testing.T) {
	two := func(a, b string) Output {
		return Output{Services: []flows.Service{{LoadBalancerID: a, ListenerID: b}}}
	}
	if two("ab", "c").Digest() == two("a", "bc").Digest() {
		t.Error("strings run into each other")
	}
	s := flows.Service{LoadBalancerID: "lb"}
	p := flows.Probe{MemberID: "lb"}
	if (Output{Services: []flows.Service{s}}).Digest() == (Output{Probes: []flows.Probe{p}}).Digest() {
		t.Error("a service and a probe of the same text are one")
	}
	a, b := fullOutput(), fullOutput()
	a.Services[0].AllowedCIDRs, b.Services[0].AllowedCIDRs = nil, []netip.Prefix{}
	a.Services[0].Backends[0].Zones, b.Services[0].Backends[0].Zones = nil, []string{}
	if a.Digest() != b.Digest() {
		t.Error("nil and empty lists differ")
	}
	c := fullOutput()
	c.Services = append(c.Services, flows.Service{LoadBalancerID: "other"})
	d := fullOutput()
	d.Services = append([]flows.Service{{LoadBalancerID: "other"}}, d.Services...)
	if c.Digest() == d.Digest() {
		t.Error("the order of services does not count")
	}
	if (Output{}).Digest() == (Output{Services: []flows.Service{{}}}).Digest() {
		t.Error("no service and one empty service are one")
	}
	long := fullOutput()
	long.Services[0].HealthCheckService = string(make([]byte, 5000))
	if long.Digest() == fullOutput().Digest() {
		t.Error("a long string is not hashed")
	}
}

// TestOf: Of is Compile and Probes.
func TestOf(t *testing.T) {
	tr := monitored()
	o := Of(tr)
	if !reflect.DeepEqual(o.Services, Compile(tr)) || !reflect.DeepEqual(o.Probes, Probes(tr)) {
		t.Fatalf("Of: %+v", o)
	}
	if len(o.Services) == 0 || len(o.Probes) == 0 {
		t.Fatal("the tree compiles to nothing: the test proves little")
	}
}

// BenchmarkDigest compares the digest of a load balancer's output with
// compiling it, at 10 and 1,000 members:
//
//	go test -run '^$' -bench 'Digest|Of' ./internal/server/compiler/
func BenchmarkDigest(b *testing.B) {
	for _, n := range []int{10, 1000} {
		tr := monitored()
		tr.Members = nil
		for i := range n {
			tr.Members = append(tr.Members, member(fmt.Sprint("m", i), fmt.Sprintf("198.18.%d.%d", 16+i/250, 1+i%250), 8080, 1))
		}
		o := Of(tr)
		b.Run(fmt.Sprint("Of/members=", n), func(b *testing.B) {
			for b.Loop() {
				Of(tr)
			}
		})
		b.Run(fmt.Sprint("Digest/members=", n), func(b *testing.B) {
			for b.Loop() {
				o.Digest()
			}
		})
	}
}
