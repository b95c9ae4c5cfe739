package l7proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// router is one listener's L7 configuration ready to serve: its
// policies compiled, its pools with their balancers.
type router struct {
	// vip is the address and port the listener's clients connect to.
	vip         netip.AddrPort
	policies    []policy
	defaultPool *pool
	pools       []*pool
	insert      []string
	// tls terminates TLS before the requests (nil: plain HTTP).
	tls *terminator
	cfg flows.L7
	// readsHeaders: a rule reads a header or a cookie.
	readsHeaders bool
	// insertsSSL: insert names an X-SSL-* header.
	insertsSSL bool
}

type policy struct {
	id     string
	action flows.L7Action
	pool   *pool
	url    string
	code   int
	rules  []rule
}

// decision is what a listener does with one request: answer it itself
// (status, and location for a redirect) or pass it to pool.
type decision struct {
	status   int
	location string
	pool     *pool
	// policy is the ID of the policy that decided, "" for the default.
	policy string
}

// compile prepares an L7 configuration; an error names the part that
// cannot be served, and nothing of it is used.
func compile(cfg flows.L7) (*router, error) {
	// A copy of its own: the router is kept and compared with the next
	// configuration, which must not be the same values changed.
	cfg = cfg.Clone()
	r := &router{cfg: cfg, insert: cfg.InsertHeaders}
	for _, h := range r.insert {
		r.insertsSSL = r.insertsSSL || sslHeaders[http.CanonicalHeaderKey(h)] != nil
	}
	if cfg.TLS != nil {
		t, err := compileTLS(*cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		r.tls = t
	}
	pools := make(map[string]*pool, len(cfg.Pools))
	for _, p := range cfg.Pools {
		if _, dup := pools[p.ID]; dup {
			return nil, fmt.Errorf("pool %s is listed twice", p.ID)
		}
		bp, err := newPool(p)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.ID, err)
		}
		pools[p.ID] = bp
		r.pools = append(r.pools, bp)
	}
	if cfg.DefaultPool != "" {
		p, ok := pools[cfg.DefaultPool]
		if !ok {
			return nil, fmt.Errorf("default pool %s is not among the pools", cfg.DefaultPool)
		}
		r.defaultPool = p
	}
	for _, p := range cfg.Policies {
		cp := policy{id: p.ID, action: p.Action, url: p.URL, code: p.Code}
		switch p.Action {
		case flows.L7Reject:
		case flows.L7RedirectToPool:
			bp, ok := pools[p.Pool]
			if !ok {
				return nil, fmt.Errorf("policy %s: pool %s is not among the pools", p.ID, p.Pool)
			}
			cp.pool = bp
		case flows.L7RedirectToURL, flows.L7RedirectPrefix:
			if p.URL == "" {
				return nil, fmt.Errorf("policy %s: %s needs a URL", p.ID, p.Action)
			}
			if cp.code == 0 {
				cp.code = http.StatusFound
			}
			if !redirectCode(cp.code) {
				return nil, fmt.Errorf("policy %s: %d is not a redirect status", p.ID, cp.code)
			}
		default:
			return nil, fmt.Errorf("policy %s: unknown action %q", p.ID, p.Action)
		}
		for i, rl := range p.Rules {
			cr, err := compileRule(rl)
			if err != nil {
				return nil, fmt.Errorf("policy %s, rule %d: %w", p.ID, i+1, err)
			}
			cp.rules = append(cp.rules, cr)
			r.readsHeaders = r.readsHeaders || cr.typ == flows.RuleHeader || cr.typ == flows.RuleCookie
		}
		r.policies = append(r.policies, cp)
	}
	return r, nil
}

func redirectCode(c int) bool {
	switch c {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// decide applies the policies in order: the first whose rules all match
// decides; a policy without rules never matches. Otherwise the default
// pool takes the request, or 503 when there is none.
func (r *router) decide(req *http.Request) decision {
	for _, p := range r.policies {
		if !p.matches(req) {
			continue
		}
		switch p.action {
		case flows.L7Reject:
			return decision{status: http.StatusForbidden, policy: p.id}
		case flows.L7RedirectToURL:
			return decision{status: p.code, location: p.url, policy: p.id}
		case flows.L7RedirectPrefix:
			return decision{status: p.code, location: prefixed(p.url, req), policy: p.id}
		case flows.L7RedirectToPool:
			return decision{pool: p.pool, policy: p.id}
		}
	}
	if r.defaultPool == nil {
		return decision{status: http.StatusServiceUnavailable}
	}
	return decision{pool: r.defaultPool}
}

func (p policy) matches(req *http.Request) bool {
	if len(p.rules) == 0 {
		return false
	}
	for _, rl := range p.rules {
		if !rl.match(req) {
			return false
		}
	}
	return true
}

// prefixed is HAProxy's "redirect prefix": the prefix followed by the
// request's whole URI (path and query); a prefix of exactly "/" adds
// nothing before it.
func prefixed(prefix string, req *http.Request) string {
	uri := req.URL.RequestURI()
	if prefix == "/" {
		return uri
	}
	return prefix + uri
}

type verifyKey struct{}

// withVerifyResult records, for the rules and headers of the requests on
// a TLS connection, the result of verifying the client's certificate as
// OpenSSL numbers it (0 when it verified).
func withVerifyResult(ctx context.Context, result int) context.Context {
	return context.WithValue(ctx, verifyKey{}, result)
}

// verifiedContext is the context of the lean engine's requests on a
// listener that terminates TLS: a certificate that did not verify ended
// the handshake.
var verifiedContext = withVerifyResult(context.Background(), 0)

func verifyResultOf(req *http.Request) (int, bool) {
	v, ok := req.Context().Value(verifyKey{}).(int)
	return v, ok
}
