package flow

import (
	"errors"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

func sp(s string) *string { return &s }

// tree builds a one-listener, one-pool tree and lets each case bend it.
func tree(edit func(t *lbaas.Tree)) *lbaas.Tree {
	pid := "pool"
	t := &lbaas.Tree{
		LB:        &lbaas.LoadBalancer{Base: lbaas.Base{ID: "lb"}},
		Listeners: []*lbaas.Listener{{Base: lbaas.Base{ID: "l"}, Protocol: "TCP", ProtocolPort: 80, DefaultPoolID: &pid}},
		Pools:     []*lbaas.Pool{{Base: lbaas.Base{ID: pid}, Protocol: "TCP", LBAlgorithm: "SOURCE_IP_PORT"}},
	}
	if edit != nil {
		edit(t)
	}
	return t
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(t *lbaas.Tree)
		refuse string // "" = accepted
	}{
		{"plain TCP", nil, ""},
		{"UDP", func(t *lbaas.Tree) { t.Listeners[0].Protocol, t.Pools[0].Protocol = "UDP", "UDP" }, ""},
		{"SCTP", func(t *lbaas.Tree) { t.Listeners[0].Protocol, t.Pools[0].Protocol = "SCTP", "SCTP" }, ""},
		{"round robin", func(t *lbaas.Tree) { t.Pools[0].LBAlgorithm = "ROUND_ROBIN" }, ""},
		{"source IP persistence", func(t *lbaas.Tree) { t.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "SOURCE_IP"} }, ""},
		{"allowed CIDRs", func(t *lbaas.Tree) { t.Listeners[0].AllowedCIDRs = []string{"198.18.0.0/16"} }, ""},
		{"TCP monitor", func(t *lbaas.Tree) {
			t.Monitors = []*lbaas.HealthMonitor{{PoolID: "pool", Type: "TCP"}}
		}, ""},
		{"HTTP listener", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "HTTP" }, "HTTP protocol listeners are not supported"},
		{"TERMINATED_HTTPS listener", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "TERMINATED_HTTPS" }, "TERMINATED_HTTPS protocol listeners"},
		{"PROXY pool", func(t *lbaas.Tree) { t.Pools[0].Protocol = "PROXY" }, "PROXY protocol pools"},
		{"least connections", func(t *lbaas.Tree) { t.Pools[0].LBAlgorithm = "LEAST_CONNECTIONS" }, "LEAST_CONNECTIONS algorithm"},
		{"cookie persistence", func(t *lbaas.Tree) {
			t.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "HTTP_COOKIE"}
		}, "HTTP_COOKIE session persistence"},
		{"app cookie persistence", func(t *lbaas.Tree) {
			t.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "APP_COOKIE", CookieName: sp("c")}
		}, "APP_COOKIE session persistence"},
		{"L7 policy", func(t *lbaas.Tree) { t.L7Policies = []*lbaas.L7Policy{{ListenerID: "l", Action: "REJECT"}} }, "L7 policies"},
		{"TLS to members", func(t *lbaas.Tree) { t.Pools[0].TLSEnabled = true }, "TLS to members"},
		{"SCTP monitor", func(t *lbaas.Tree) { t.Monitors = []*lbaas.HealthMonitor{{PoolID: "pool", Type: "SCTP"}} }, "SCTP health monitors"},
		{"QoS", func(t *lbaas.Tree) { t.LB.VIPQoSPolicyID = sp("q") }, "QoS"},
		{"mixed protocols", func(t *lbaas.Tree) { t.Pools[0].Protocol = "HTTP" }, "HTTP protocol pools"},
		{"IPv4 VIP and member", func(t *lbaas.Tree) {
			t.LB.VIPAddress = "198.18.0.10"
			t.Members = []*lbaas.Member{{PoolID: "pool", Address: "198.18.1.2"}}
		}, ""},
		{"IPv6 VIP and member", func(t *lbaas.Tree) {
			t.LB.VIPAddress = "2001:2::10"
			t.Members = []*lbaas.Member{{PoolID: "pool", Address: "2001:2::2", MonitorAddress: sp("2001:2::3")}}
		}, ""},
		{"dual-stack VIPs, members of both families", func(t *lbaas.Tree) {
			t.LB.VIPAddress = "198.18.0.10"
			t.LB.AdditionalVIPs = []lbaas.AdditionalVIP{{IPAddress: "2001:2::11"}}
			t.Listeners[0].AllowedCIDRs = []string{"198.18.0.0/16", "2001:2::/48"}
			t.Members = []*lbaas.Member{{PoolID: "pool", Address: "198.18.1.2"}, {PoolID: "pool", Address: "2001:2::2"}}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := New(Immediate{}).Check(tree(tc.edit))
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var refused *lbaas.Error
			if !errors.As(err, &refused) || !errors.Is(err, lbaas.ErrUnsupported) {
				t.Fatalf("got %v, want the provider's refusal", err)
			}
			if refused.Provider != Name || refused.Action || !strings.Contains(refused.Detail, tc.refuse) {
				t.Fatalf("refusal %+v, want an option refused by %s saying %q", refused, Name, tc.refuse)
			}
		})
	}
}

func TestProfilesTakeNoOptions(t *testing.T) {
	p := New(Immediate{})
	if err := p.CheckFlavor(map[string]any{}); err != nil {
		t.Errorf("empty flavor refused: %v", err)
	}
	if err := p.CheckAZ(map[string]any{"compute_zone": "x"}); err == nil {
		t.Error("AZ data with an option accepted")
	}
}

// TestCheckOVN: with the OVN data plane, what OVN's rows cannot enforce
// or express is refused; the rest is as without it.
func TestCheckOVN(t *testing.T) {
	members := func(weights ...int) func(t *lbaas.Tree) {
		return func(t *lbaas.Tree) {
			for i, w := range weights {
				t.Members = append(t.Members, &lbaas.Member{Base: lbaas.Base{ID: string(rune('a' + i))}, PoolID: "pool", Address: "198.18.1.2", Weight: w})
			}
		}
	}
	for _, tc := range []struct {
		name   string
		edit   func(t *lbaas.Tree)
		refuse string
	}{
		{"plain TCP", nil, ""},
		{"allowed CIDRs from anywhere", func(t *lbaas.Tree) { t.Listeners[0].AllowedCIDRs = []string{"0.0.0.0/0", "::/0"} }, ""},
		{"allowed CIDRs: the agent's ACLs hold them", func(t *lbaas.Tree) { t.Listeners[0].AllowedCIDRs = []string{"198.18.0.0/16", "2001:2::/48"} }, ""},
		{"a connection limit", func(t *lbaas.Tree) { t.Listeners[0].ConnectionLimit = 100 }, "connection_limit is not supported with the OVN data plane"},
		{"a limit of 0", func(t *lbaas.Tree) { t.Listeners[0].ConnectionLimit = 0 }, "connection_limit"},
		{"weights 3 and 1", members(3, 1), ""},
		{"weights 1 and 63: 64 entries", members(1, 63), ""},
		{"weights 1 and 64: 65 entries", members(1, 64), "need 65 backend entries"},
		{"weights 100 and 200: 3 entries", members(100, 200), ""},
		{"a drained member's weight counts not", members(0, 100, 200), ""},
		{"backups apart from primaries", func(t *lbaas.Tree) {
			members(1, 40)(t)
			members(1, 40)(t)
			t.Members[2].Backup, t.Members[3].Backup = true, true
		}, ""},
		{"HTTP listener, as without OVN", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "HTTP" }, "HTTP protocol listeners"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Immediate{})
			p.OVN = true
			tr := tree(func(t *lbaas.Tree) {
				t.Listeners[0].ConnectionLimit = -1
				if tc.edit != nil {
					tc.edit(t)
				}
			})
			err := p.Check(tr)
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if err := New(Immediate{}).Check(tr); err != nil {
					t.Fatalf("refused without OVN: %v", err)
				}
				return
			}
			var refused *lbaas.Error
			if !errors.As(err, &refused) || !errors.Is(err, lbaas.ErrUnsupported) || !strings.Contains(refused.Detail, tc.refuse) {
				t.Fatalf("got %v, want the provider's refusal saying %q", err, tc.refuse)
			}
		})
	}
}

// TestCheckL7: with the node's proxy, HTTP listeners and pools, L7
// policies and the X-Forwarded headers are served; what the proxy lacks
// is refused, and without it all of them are as before.
func TestCheckL7(t *testing.T) {
	httpTree := func(edit func(t *lbaas.Tree)) func(t *lbaas.Tree) {
		return func(t *lbaas.Tree) {
			t.Listeners[0].Protocol, t.Pools[0].Protocol, t.Pools[0].LBAlgorithm = "HTTP", "HTTP", "ROUND_ROBIN"
			if edit != nil {
				edit(t)
			}
		}
	}
	rule := func(typ, cmp, value string) func(t *lbaas.Tree) {
		return httpTree(func(t *lbaas.Tree) {
			t.L7Policies = []*lbaas.L7Policy{{Base: lbaas.Base{ID: "p"}, ListenerID: "l", Action: "REJECT"}}
			t.L7Rules = []*lbaas.L7Rule{{Base: lbaas.Base{ID: "r"}, L7PolicyID: "p", Type: typ, CompareType: cmp, Value: value}}
		})
	}
	for _, tc := range []struct {
		name   string
		edit   func(t *lbaas.Tree)
		refuse string
	}{
		{"HTTP listener and pool", httpTree(nil), ""},
		{"least connections", httpTree(func(t *lbaas.Tree) { t.Pools[0].LBAlgorithm = "LEAST_CONNECTIONS" }), ""},
		{"source IP", httpTree(func(t *lbaas.Tree) { t.Pools[0].LBAlgorithm = "SOURCE_IP" }), ""},
		{"source IP and port", httpTree(func(t *lbaas.Tree) { t.Pools[0].LBAlgorithm = "SOURCE_IP_PORT" }), ""},
		{"another algorithm", httpTree(func(t *lbaas.Tree) { t.Pools[0].LBAlgorithm = "WEIGHTED_RANDOM" }), "WEIGHTED_RANDOM algorithm is not supported for HTTP pools"},
		{"cookie persistence", httpTree(func(t *lbaas.Tree) {
			t.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "HTTP_COOKIE"}
		}), ""},
		{"app cookie persistence", httpTree(func(t *lbaas.Tree) {
			t.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "APP_COOKIE", CookieName: sp("sid")}
		}), ""},
		{"X-Forwarded headers", httpTree(func(t *lbaas.Tree) {
			t.Listeners[0].InsertHeaders = map[string]string{"X-Forwarded-For": "true", "X-Forwarded-Port": "true", "X-Forwarded-Proto": "true", "X-SSL-Client-CN": "false"}
		}), ""},
		{"X-SSL headers", httpTree(func(t *lbaas.Tree) { t.Listeners[0].InsertHeaders = map[string]string{"X-SSL-Client-CN": "true"} }), "insert_headers X-SSL-Client-CN is not supported"},
		{"an L7 policy and rule", rule("PATH", "STARTS_WITH", "/api"), ""},
		{"an RE2 regular expression", rule("HOST_NAME", "REGEX", `^(www|api)\.example\.com$`), ""},
		{"lookaround", rule("PATH", "REGEX", `^/(?!admin)`), "regular expression"},
		{"PROXY pool", httpTree(func(t *lbaas.Tree) { t.Pools[0].Protocol = "PROXY" }), ""},
		{"PROXYV2 pool", httpTree(func(t *lbaas.Tree) { t.Pools[0].Protocol = "PROXYV2" }), ""},
		{"PROXY pool behind a TCP listener", func(t *lbaas.Tree) { t.Pools[0].Protocol, t.Pools[0].LBAlgorithm = "PROXY", "ROUND_ROBIN" }, "the protocols must match"},
		{"PROXY pool, source IP and port", httpTree(func(t *lbaas.Tree) { t.Pools[0].Protocol, t.Pools[0].LBAlgorithm = "PROXY", "SOURCE_IP_PORT" }), ""},
		{"TLS to members", httpTree(func(t *lbaas.Tree) { t.Pools[0].TLSEnabled = true }), ""},
		{"TLS to members of a TCP pool", func(t *lbaas.Tree) { t.Pools[0].TLSEnabled = true }, "TLS to members is not supported for TCP pools"},
		{"TERMINATED_HTTPS", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "TERMINATED_HTTPS" }, "use TCP, UDP, SCTP or HTTP"},
		{"HTTPS passed through", func(t *lbaas.Tree) { t.Listeners[0].Protocol, t.Pools[0].Protocol = "HTTPS", "HTTPS" }, ""},
		{"HTTPS to a TCP pool", func(t *lbaas.Tree) { t.Listeners[0].Protocol = "HTTPS" }, ""},
		{"an L7 policy on HTTPS", func(t *lbaas.Tree) {
			t.Listeners[0].Protocol, t.Pools[0].Protocol = "HTTPS", "HTTPS"
			t.L7Policies = []*lbaas.L7Policy{{Base: lbaas.Base{ID: "p"}, ListenerID: "l", Action: "REJECT"}}
		}, "L7 policies on HTTPS listeners are not supported"},
		{"HTTPS with cookies", func(t *lbaas.Tree) {
			t.Listeners[0].Protocol, t.Pools[0].Protocol = "HTTPS", "HTTPS"
			t.Pools[0].SessionPersistence = &lbaas.SessionPersistence{Type: "HTTP_COOKIE"}
		}, "HTTP_COOKIE session persistence is not supported"},
		{"an HTTP pool behind a TCP listener", func(t *lbaas.Tree) { t.Pools[0].Protocol, t.Pools[0].LBAlgorithm = "HTTP", "ROUND_ROBIN" }, "the protocols must match"},
		{"TCP stays as it was", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Immediate{})
			p.L7 = true
			wantChecked(t, p, tc.edit, tc.refuse)
		})
	}
	// With OVN's data plane the VMs would bypass the proxies.
	p := New(Immediate{})
	p.L7, p.OVN = true, true
	if err := p.Check(tree(httpTree(func(t *lbaas.Tree) { t.Listeners[0].ConnectionLimit = -1 }))); !errors.Is(err, lbaas.ErrUnsupported) ||
		!strings.Contains(err.Error(), "with the OVN data plane") {
		t.Errorf("HTTP with OVN: %v", err)
	}
}

// TestCheckTLS: with certificates from Barbican, TERMINATED_HTTPS
// listeners are served with HTTP pools, the X-SSL headers and a range of
// TLS versions; what Go's TLS cannot offer is refused, and without the
// certificates such listeners stay refused.
func TestCheckTLS(t *testing.T) {
	tlsTree := func(edit func(l *lbaas.Listener)) func(t *lbaas.Tree) {
		return func(t *lbaas.Tree) {
			l := t.Listeners[0]
			l.Protocol, l.DefaultTLSContainerRef = "TERMINATED_HTTPS", sp("https://kms/v1/secrets/a")
			t.Pools[0].Protocol, t.Pools[0].LBAlgorithm = "HTTP", "ROUND_ROBIN"
			if edit != nil {
				edit(l)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		edit   func(t *lbaas.Tree)
		refuse string
	}{
		{"TERMINATED_HTTPS with an HTTP pool", tlsTree(nil), ""},
		{"SNI, client CA, X-SSL headers, TLS 1.2 and 1.3", tlsTree(func(l *lbaas.Listener) {
			l.SNIContainerRefs, l.ClientCATLSContainerRef = []string{"https://kms/v1/secrets/b"}, sp("https://kms/v1/secrets/ca")
			l.InsertHeaders = map[string]string{"X-SSL-Client-CN": "true", "X-Forwarded-Proto": "true"}
			l.TLSVersions = []string{"TLSv1.3", "TLSv1.2"}
		}), ""},
		{"SSLv3", tlsTree(func(l *lbaas.Listener) { l.TLSVersions = []string{"SSLv3", "TLSv1"} }), "TLS version SSLv3 is not supported"},
		{"a gap", tlsTree(func(l *lbaas.Listener) { l.TLSVersions = []string{"TLSv1", "TLSv1.2"} }), "leave a gap"},
		{"ciphers", tlsTree(func(l *lbaas.Listener) { l.TLSCiphers = sp("ECDHE-RSA-AES128-GCM-SHA256") }), ""},
		{"Octavia's default ciphers", tlsTree(func(l *lbaas.Listener) { l.TLSCiphers = sp(octaviaCiphers) }), ""},
		{"ciphers, some not served", tlsTree(func(l *lbaas.Listener) {
			l.TLSCiphers = sp("DHE-RSA-AES256-GCM-SHA384:NO-SUCH-CIPHER:DES-CBC3-SHA:AES128-SHA")
		}), ""},
		{"ciphers, none served", tlsTree(func(l *lbaas.Listener) { l.TLSCiphers = sp("DHE-RSA-AES256-GCM-SHA384:TLS_AES_128_GCM_SHA256") }),
			"400: tls_ciphers names no cipher suite of TLS 1.2 or older that the proxy serves (not served: TLS_AES_128_GCM_SHA256, DHE-RSA-AES256-GCM-SHA384); name one of AES128-GCM-SHA256, AES128-SHA,"},
		{"ciphers, none served, TLS 1.2 and 1.3", tlsTree(func(l *lbaas.Listener) {
			l.TLSVersions, l.TLSCiphers = []string{"TLSv1.2", "TLSv1.3"}, sp("CAMELLIA256-SHA")
		}), "400: tls_ciphers names no cipher suite"},
		{"ciphers, none served, TLS 1.3 only", tlsTree(func(l *lbaas.Listener) {
			l.TLSVersions, l.TLSCiphers = []string{"TLSv1.3"}, sp("CAMELLIA256-SHA")
		}), ""},
		{"OpenSSL keywords", tlsTree(func(l *lbaas.Listener) { l.TLSCiphers = sp("ECDHE-RSA-AES128-GCM-SHA256:HIGH:!aNULL") }),
			"tls_ciphers HIGH is not supported: OpenSSL's keywords and operators"},
		{"an OpenSSL operator", tlsTree(func(l *lbaas.Listener) { l.TLSCiphers = sp("ECDHE-RSA-AES128-GCM-SHA256:@STRENGTH") }), "tls_ciphers @STRENGTH is not supported"},
		{"OpenSSL keywords, TLS 1.3 only", tlsTree(func(l *lbaas.Listener) { l.TLSVersions, l.TLSCiphers = []string{"TLSv1.3"}, sp("HIGH:!aNULL") }), ""},
		{"SSLv3 before ciphers", tlsTree(func(l *lbaas.Listener) { l.TLSVersions, l.TLSCiphers = []string{"SSLv3"}, sp("HIGH") }),
			"TLS version SSLv3 is not supported"},
		{"X-SSL on HTTP", func(t *lbaas.Tree) {
			t.Listeners[0].Protocol, t.Pools[0].Protocol, t.Pools[0].LBAlgorithm = "HTTP", "HTTP", "ROUND_ROBIN"
			t.Listeners[0].InsertHeaders = map[string]string{"X-SSL-Client-CN": "true"}
		}, "insert_headers X-SSL-Client-CN is not supported"},
		{"a TLS reference on a TCP listener", func(t *lbaas.Tree) { t.Listeners[0].DefaultTLSContainerRef = sp("x") }, "TLS termination is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Immediate{})
			p.L7, p.TLS = true, true
			wantChecked(t, p, tc.edit, tc.refuse)
		})
	}
	p := New(Immediate{})
	p.L7 = true
	if err := p.Check(tree(tlsTree(nil))); !errors.Is(err, lbaas.ErrUnsupported) || !strings.Contains(err.Error(), "TERMINATED_HTTPS protocol listeners are not supported") {
		t.Errorf("without certificates: %v", err)
	}
}

// wantChecked checks the tree edit makes: accepted when refuse is
// empty, else the provider's refusal saying refuse: a 501, or a 400
// when refuse begins with "400: ".
func wantChecked(t *testing.T, p *Provider, edit func(*lbaas.Tree), refuse string) {
	t.Helper()
	err := p.Check(tree(edit))
	if refuse == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	kind := lbaas.ErrUnsupported
	if m, ok := strings.CutPrefix(refuse, "400: "); ok {
		kind, refuse = lbaas.ErrInvalid, m
	}
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), refuse) {
		t.Fatalf("got %v, want a refusal (%v) saying %q", err, kind, refuse)
	}
}

// octaviaCiphers is Octavia's default_listener_ciphers and
// default_pool_ciphers (CIPHERS_OWASP_SUITE_B) of its 11.0.0 (Zed).
const octaviaCiphers = "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256:DHE-RSA-AES256-GCM-SHA384:" +
	"DHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-SHA256:" +
	"DHE-RSA-AES128-SHA256:ECDHE-RSA-AES256-SHA384:ECDHE-RSA-AES128-SHA256"

// TestCheckPoolTLS: TLS to the members of HTTP and PROXY pools is
// served, tls_enabled alone without a certificate manager; certificates
// need one; what Go's TLS cannot offer is refused.
func TestCheckPoolTLS(t *testing.T) {
	pool := func(edit func(p *lbaas.Pool)) func(t *lbaas.Tree) {
		return func(t *lbaas.Tree) {
			t.Listeners[0].Protocol = "HTTP"
			p := t.Pools[0]
			p.Protocol, p.LBAlgorithm, p.TLSEnabled = "HTTP", "ROUND_ROBIN", true
			edit(p)
		}
	}
	refs := func(p *lbaas.Pool) {
		p.TLSContainerRef, p.CATLSContainerRef, p.CRLContainerRef = sp("https://kms/v1/secrets/c"), sp("https://kms/v1/secrets/ca"), sp("https://kms/v1/secrets/crl")
	}
	for _, tc := range []struct {
		name      string
		tls       bool // server --tls-certificates barbican
		edit      func(t *lbaas.Tree)
		refuse    string
		refuseOff string // without --l7
	}{
		{"tls_enabled alone", false, pool(func(p *lbaas.Pool) {}), "", "HTTP protocol listeners are not supported"},
		{"ALPN and versions", false, pool(func(p *lbaas.Pool) {
			p.ALPNProtocols, p.TLSVersions = []string{"h2", "http/1.1"}, []string{"TLSv1.2", "TLSv1.3"}
		}), "", "HTTP protocol listeners"},
		{"PROXYV2 pool", false, pool(func(p *lbaas.Pool) { p.Protocol = "PROXYV2" }), "", "HTTP protocol listeners"},
		{"every reference", true, pool(refs), "", "HTTP protocol listeners"},
		{"a reference without a certificate manager", false, pool(func(p *lbaas.Pool) { p.CATLSContainerRef = sp("https://kms/v1/secrets/ca") }),
			"no certificate manager is configured", "HTTP protocol listeners"},
		{"a reference without tls_enabled, no certificate manager", false, pool(func(p *lbaas.Pool) { p.TLSEnabled, p.TLSContainerRef = false, sp("x") }),
			"no certificate manager is configured", "HTTP protocol listeners"},
		{"empty references", false, pool(func(p *lbaas.Pool) { p.TLSContainerRef, p.CATLSContainerRef = sp(""), sp("") }), "", "HTTP protocol listeners"},
		{"ciphers", true, pool(func(p *lbaas.Pool) { p.TLSCiphers = sp("ECDHE-RSA-AES128-GCM-SHA256") }), "", "HTTP protocol listeners"},
		{"ciphers, no certificate manager", false, pool(func(p *lbaas.Pool) { p.TLSCiphers = sp(octaviaCiphers) }), "", "HTTP protocol listeners"},
		{"ciphers, none served", true, pool(func(p *lbaas.Pool) { p.TLSCiphers = sp("DHE-RSA-AES256-GCM-SHA384") }),
			"400: tls_ciphers names no cipher suite of TLS 1.2 or older that the proxy serves (not served: DHE-RSA-AES256-GCM-SHA384)", "HTTP protocol listeners"},
		{"ciphers, none served, TLS 1.3 only", true, pool(func(p *lbaas.Pool) {
			p.TLSVersions, p.TLSCiphers = []string{"TLSv1.3"}, sp("DHE-RSA-AES256-GCM-SHA384")
		}), "", "HTTP protocol listeners"},
		{"OpenSSL keywords", true, pool(func(p *lbaas.Pool) { p.TLSCiphers = sp("DEFAULT:-AES128-SHA") }), "tls_ciphers DEFAULT is not supported", "HTTP protocol listeners"},
		{"keywords without tls_enabled", true, pool(func(p *lbaas.Pool) { p.TLSEnabled, p.TLSCiphers = false, sp("DEFAULT") }), "", "HTTP protocol listeners"},
		{"ciphers without tls_enabled", true, pool(func(p *lbaas.Pool) { p.TLSEnabled, p.TLSCiphers = false, sp("ECDHE-RSA-AES128-GCM-SHA256") }), "", "HTTP protocol listeners"},
		{"SSLv3", true, pool(func(p *lbaas.Pool) { p.TLSVersions = []string{"SSLv3"} }), "TLS version SSLv3 is not supported", "HTTP protocol listeners"},
		{"a gap", true, pool(func(p *lbaas.Pool) { p.TLSVersions = []string{"TLSv1.1", "TLSv1.3"} }), "leave a gap", "HTTP protocol listeners"},
		{"a TCP pool", true, func(t *lbaas.Tree) { t.Pools[0].TLSEnabled = true }, "TLS to members is not supported for TCP pools", "TLS to members is not supported."},
		{"a CA on a TCP pool", true, func(t *lbaas.Tree) { t.Pools[0].CATLSContainerRef = sp("x") }, "TLS to members is not supported for TCP pools", "TLS to members is not supported."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Immediate{})
			p.L7, p.TLS = true, tc.tls
			wantChecked(t, p, tc.edit, tc.refuse)
			wantChecked(t, New(Immediate{}), tc.edit, tc.refuseOff)
		})
	}
}
