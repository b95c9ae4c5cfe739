package compiler

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func prefixes(s string) []netip.Prefix {
	out := []netip.Prefix{}
	for _, f := range strings.Fields(s) {
		out = append(out, netip.MustParsePrefix(f))
	}
	return out
}

func render(ps []netip.Prefix) string {
	if ps == nil {
		return "<nil>"
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, " ")
}

func rule(v6 bool, proto, min, max int, sources string) lbaas.IngressRule {
	return lbaas.IngressRule{IPv6: v6, Protocol: proto, PortMin: min, PortMax: max, Sources: prefixes(sources)}
}

func TestSecuritySources(t *testing.T) {
	any := lbaas.AnyProtocol
	for _, tc := range []struct {
		name  string
		rules []lbaas.IngressRule
		proto flows.Protocol
		port  int
		v6    bool
		want  string
	}{
		{"no rules admit nobody", nil, flows.TCP, 80, false, ""},
		{"any protocol any port from anywhere", []lbaas.IngressRule{rule(false, any, 0, 0, "0.0.0.0/0")}, flows.TCP, 80, false, "0.0.0.0/0"},
		{"tcp rule on the port", []lbaas.IngressRule{rule(false, 6, 80, 80, "198.18.0.0/24")}, flows.TCP, 80, false, "198.18.0.0/24"},
		{"tcp rule on another port", []lbaas.IngressRule{rule(false, 6, 443, 443, "198.18.0.0/24")}, flows.TCP, 80, false, ""},
		{"port inside a range", []lbaas.IngressRule{rule(false, 6, 1, 1024, "198.18.0.0/24")}, flows.TCP, 80, false, "198.18.0.0/24"},
		{"range ends are included", []lbaas.IngressRule{rule(false, 6, 80, 90, "198.18.1.0/24"), rule(false, 6, 70, 80, "198.18.2.0/24")}, flows.TCP, 80, false, "198.18.1.0/24 198.18.2.0/24"},
		{"tcp rule does not admit udp", []lbaas.IngressRule{rule(false, 6, 0, 0, "0.0.0.0/0")}, flows.UDP, 53, false, ""},
		{"udp rule on udp", []lbaas.IngressRule{rule(false, 17, 53, 53, "198.18.3.0/24")}, flows.UDP, 53, false, "198.18.3.0/24"},
		{"sctp by number", []lbaas.IngressRule{rule(false, 132, 0, 0, "198.18.3.0/24")}, flows.SCTP, 9, false, "198.18.3.0/24"},
		{"icmp admits no listener", []lbaas.IngressRule{rule(false, 1, 0, 0, "0.0.0.0/0")}, flows.TCP, 80, false, ""},
		{"ethertype filters the family", []lbaas.IngressRule{rule(true, any, 0, 0, "::/0")}, flows.TCP, 80, false, ""},
		{"IPv6 rule for an IPv6 VIP", []lbaas.IngressRule{rule(true, any, 0, 0, "2001:2::/48"), rule(false, any, 0, 0, "0.0.0.0/0")}, flows.TCP, 80, true, "2001:2::/48"},
		{"remote group addresses", []lbaas.IngressRule{rule(false, 6, 80, 80, "198.18.17.2/32 198.18.18.2/32")}, flows.TCP, 80, false, "198.18.17.2/32 198.18.18.2/32"},
		{"remote group addresses of the other family dropped", []lbaas.IngressRule{rule(false, any, 0, 0, "198.18.17.2/32 2001:2::5/128")}, flows.TCP, 80, false, "198.18.17.2/32"},
		{"empty remote group admits nobody", []lbaas.IngressRule{rule(false, any, 0, 0, "")}, flows.TCP, 80, false, ""},
		{"union without covered prefixes", []lbaas.IngressRule{rule(false, any, 0, 0, "198.18.0.0/16"), rule(false, 6, 80, 80, "198.18.5.0/24 198.18.5.0/24")}, flows.TCP, 80, false, "198.18.0.0/16"},
		{"host bits masked", []lbaas.IngressRule{rule(false, any, 0, 0, "198.18.5.7/24")}, flows.TCP, 80, false, "198.18.5.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SecuritySources(&lbaas.SecurityRules{Ingress: tc.rules}, tc.proto, tc.port, tc.v6)
			if got == nil {
				t.Fatal("nil result: nobody must be an empty list, not nil")
			}
			if render(got) != tc.want {
				t.Errorf("got %q, want %q", render(got), tc.want)
			}
		})
	}
}

func TestIntersect(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"198.18.0.0/16", "", "198.18.0.0/16"},
		{"", "198.18.0.0/16", ""},
		{"0.0.0.0/0", "198.18.1.0/24 198.18.2.0/24", "198.18.1.0/24 198.18.2.0/24"},
		{"198.18.1.5/32", "198.18.0.0/16", "198.18.1.5/32"},
		{"198.18.1.0/24", "198.19.0.0/16", ""},
		{"198.18.0.0/16 2001:2::/48", "::/0", "2001:2::/48"},
		{"198.18.1.0/24 198.18.0.0/16", "198.18.1.0/25", "198.18.1.0/25"},
	} {
		a, b := prefixes(tc.a), prefixes(tc.b)
		if tc.b == "" {
			b = nil
		}
		if got := render(Intersect(a, b)); got != tc.want {
			t.Errorf("Intersect(%q, %q) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestCompileSecurity: a VIP port's security groups restrict each
// listener's sources, intersected with allowed_cidrs; nobody is AllowNone.
func TestCompileSecurity(t *testing.T) {
	type svc struct {
		allowed string
		none    bool
	}
	for _, tc := range []struct {
		name string
		edit func(t *lbaas.Tree)
		want svc
	}{
		{"no security groups: no filtering", nil, svc{"", false}},
		{"rule admits a subnet", func(t *lbaas.Tree) {
			t.Security = &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{rule(false, 6, 80, 80, "198.18.0.0/24")}}
		}, svc{"198.18.0.0/24", false}},
		{"no matching rule: nobody", func(t *lbaas.Tree) {
			t.Security = &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{rule(false, 6, 443, 443, "0.0.0.0/0")}}
		}, svc{"", true}},
		{"groups without rules: nobody", func(t *lbaas.Tree) { t.Security = &lbaas.SecurityRules{} }, svc{"", true}},
		{"intersected with allowed_cidrs", func(t *lbaas.Tree) {
			t.Security = &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{rule(false, lbaas.AnyProtocol, 0, 0, "0.0.0.0/0")}}
			t.Listeners[0].AllowedCIDRs = []string{"198.18.7.0/24"}
		}, svc{"198.18.7.0/24", false}},
		{"disjoint from allowed_cidrs: nobody", func(t *lbaas.Tree) {
			t.Security = &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{rule(false, lbaas.AnyProtocol, 0, 0, "198.18.1.0/24")}}
			t.Listeners[0].AllowedCIDRs = []string{"198.18.7.0/24"}
		}, svc{"", true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := sample()
			if tc.edit != nil {
				tc.edit(tree)
			}
			ss := Compile(tree)
			if len(ss) != 1 {
				t.Fatalf("got %d services, want 1", len(ss))
			}
			got := svc{render(ss[0].AllowedCIDRs), ss[0].AllowNone}
			if got.allowed == "<nil>" {
				got.allowed = ""
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCompileSecurityPerFamily: each VIP gets the rules of its ethertype.
func TestCompileSecurityPerFamily(t *testing.T) {
	tree := sample()
	tree.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2::10"}}
	tree.Security = &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{rule(false, 6, 80, 80, "198.18.0.0/24")}}
	ss := Compile(tree)
	if len(ss) != 2 {
		t.Fatalf("got %d services, want 2", len(ss))
	}
	for _, s := range ss {
		want, none := "198.18.0.0/24", false
		if s.Key.VIP.Is6() {
			want, none = "", true
		}
		if render(s.AllowedCIDRs) != want || s.AllowNone != none {
			t.Errorf("%s: allowed %q none %v, want %q none %v", s.Key.VIP, render(s.AllowedCIDRs), s.AllowNone, want, none)
		}
	}
}
