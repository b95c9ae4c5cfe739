package compiler

import (
	"slices"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// L7Protocols are the listener protocols whose requests the node's proxy
// routes; their services carry flows.L7 and are TCP to the data plane.
var L7Protocols = []string{"HTTP"}

func isL7(protocol string) bool { return slices.Contains(L7Protocols, protocol) }

// l7Of is what the node's proxy does with listener l's requests: its live
// policies in position order, each with its live rules (a policy left
// with none is left out, as the amphora skips it, and so is one that
// redirects to a pool that is disabled or being deleted), and every live
// pool they or the listener name. Members are chosen as for L4 (backends):
// a proxy connects to either address family, so none is filtered. A pool
// with tls_enabled carries its TLS to the members, its certificates from
// certs; one whose certificates cannot be had has no member, so that no
// request goes to its members otherwise than as asked.
func l7Of(t *lbaas.Tree, l *lbaas.Listener, certs Certificates) *flows.L7 {
	cfg := &flows.L7{
		InsertHeaders:  flows.InsertHeaderNames(l.InsertHeaders),
		ClientTimeout:  millis(l.TimeoutClientData),
		ConnectTimeout: millis(l.TimeoutMemberConnect),
		MemberTimeout:  millis(l.TimeoutMemberData),
	}
	usePool := func(id string) bool {
		p := t.Pool(id)
		if p == nil || !live(p.Base) {
			return false
		}
		if _, ok := cfg.Pool(id); !ok {
			lp := flows.L7Pool{
				ID: p.ID, Algorithm: flows.Algorithm(p.LBAlgorithm), Persistence: l7Persistence(p), Backends: backends(t.PoolMembers(p.ID)),
				ProxyProtocol: proxyProtocols[p.Protocol],
			}
			if p.TLSEnabled {
				var ok bool
				if lp.TLS, ok = poolTLSOf(p, certs); !ok {
					// Fail closed: 503 rather than plain HTTP or an
					// unverified member.
					lp.Backends = nil
				}
			}
			cfg.Pools = append(cfg.Pools, lp)
		}
		return true
	}
	if l.DefaultPoolID != nil && usePool(*l.DefaultPoolID) {
		cfg.DefaultPool = *l.DefaultPoolID
	}
	for _, p := range t.ListenerPolicies(l.ID) {
		if !live(p.Base) {
			continue
		}
		pol := flows.L7Policy{ID: p.ID, Action: flows.L7Action(p.Action)}
		switch pol.Action {
		case flows.L7RedirectToPool:
			if p.RedirectPoolID == nil || !usePool(*p.RedirectPoolID) {
				continue
			}
			pol.Pool = *p.RedirectPoolID
		case flows.L7RedirectToURL:
			pol.URL = deref(p.RedirectURL)
		case flows.L7RedirectPrefix:
			pol.URL = deref(p.RedirectPrefix)
		}
		if pol.Action == flows.L7RedirectToURL || pol.Action == flows.L7RedirectPrefix {
			if p.RedirectHTTPCode != nil {
				pol.Code = *p.RedirectHTTPCode
			}
		}
		for _, r := range t.PolicyRules(p.ID) {
			if !live(r.Base) {
				continue
			}
			pol.Rules = append(pol.Rules, flows.L7Rule{
				Type: flows.L7RuleType(r.Type), Compare: flows.L7Compare(r.CompareType), Key: deref(r.Key), Value: r.Value, Invert: r.Invert,
			})
		}
		if len(pol.Rules) == 0 {
			continue
		}
		cfg.Policies = append(cfg.Policies, pol)
	}
	return cfg
}

// proxyProtocols are the PROXY protocol versions of the pool protocols
// that send one.
var proxyProtocols = map[string]int{"PROXY": 1, "PROXYV2": 2}

// l7Persistence carries every persistence type Octavia has; the flow
// provider refuses those the proxy lacks.
func l7Persistence(p *lbaas.Pool) *flows.L7Persistence {
	sp := p.SessionPersistence
	if sp == nil {
		return nil
	}
	out := &flows.L7Persistence{Type: sp.Type, CookieName: deref(sp.CookieName)}
	if sp.Type == flows.PersistSourceIP {
		out.Timeout = DefaultPersistenceTimeout
		if sp.PersistenceTimeout != nil && *sp.PersistenceTimeout > 0 {
			out.Timeout = time.Duration(*sp.PersistenceTimeout) * time.Second
		}
	}
	return out
}

func millis(ms int) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
