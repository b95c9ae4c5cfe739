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
		{"allowed CIDRs", func(t *lbaas.Tree) { t.Listeners[0].AllowedCIDRs = []string{"198.18.0.0/16"} }, "allowed_cidrs are not supported with the OVN data plane"},
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
