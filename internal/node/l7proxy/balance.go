package l7proxy

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Cookie names the proxy reads and sets for persistence. HTTPCookie is the
// amphora's ("cookie SRV insert"): its value is the member's ID, so that
// every node's proxy sends the request to the same member without
// sharing a table. appCookieSuffix names the cookie set beside an
// application's own (APP_COOKIE), with the same content.
const (
	HTTPCookie      = "SRV"
	appCookieSuffix = "_flowlb_member"
)

// backend is a member a pool may send a request to.
type backend struct {
	flows.Backend
	// hostPort is the member's address for the request's URL.
	hostPort string
	// active counts the node's requests to the member still open, for
	// LEAST_CONNECTIONS.
	active atomic.Int64
	// counters: what the proxy counts for the member (nil in a
	// configuration that is only checked).
	counters *memberCounters
	// idle are the lean engine's idle connections to the member (nil in
	// a configuration that is only checked).
	idle *memberIdle
}

// pool chooses a member for each request.
type pool struct {
	id      string
	alg     flows.Algorithm
	persist *flows.L7Persistence
	// proxyVersion is the PROXY header's version its members read (0:
	// none).
	proxyVersion byte
	// tls is how the proxy speaks TLS to the members (nil: it does
	// not), transport the proxy's transport for it.
	tls       *memberTLS
	transport http.RoundTripper
	backends  []*backend
	byID      map[string]*backend
	// rotation is ROUND_ROBIN's order: backend indexes interleaved by
	// weight (smooth weighted round robin), walked by next.
	rotation []int
	next     atomic.Uint64
	// table maps hashes to backends for SOURCE_IP and for application
	// cookies without a member cookie: Maglev, the same on every node, so
	// a client lands on the same member whichever node it connects from.
	table []int
}

func newPool(p flows.L7Pool) (*pool, error) {
	switch p.Algorithm {
	case flows.RoundRobin, flows.LeastConnections, flows.SourceIP, flows.SourceIPPort:
	default:
		return nil, fmt.Errorf("algorithm %q is not supported for HTTP", p.Algorithm)
	}
	if sp := p.Persistence; sp != nil {
		switch sp.Type {
		case flows.PersistSourceIP, flows.PersistHTTPCookie:
		case flows.PersistAppCookie:
			if sp.CookieName == "" {
				return nil, fmt.Errorf("APP_COOKIE persistence needs a cookie name")
			}
		default:
			return nil, fmt.Errorf("session persistence %q is not supported", sp.Type)
		}
	}
	if p.ProxyProtocol < 0 || p.ProxyProtocol > 2 {
		return nil, fmt.Errorf("PROXY protocol version %d", p.ProxyProtocol)
	}
	out := &pool{id: p.ID, alg: p.Algorithm, persist: p.Persistence, proxyVersion: byte(p.ProxyProtocol), byID: make(map[string]*backend, len(p.Backends))}
	if p.TLS != nil {
		m, err := compileMemberTLS(*p.TLS)
		if err != nil {
			return nil, fmt.Errorf("TLS to members: %w", err)
		}
		out.tls = m
	}
	for _, b := range p.Backends {
		if b.Weight < 1 {
			continue
		}
		nb := &backend{Backend: b, hostPort: netip.AddrPortFrom(b.Address, b.Port).String()}
		out.backends = append(out.backends, nb)
		out.byID[b.MemberID] = nb
	}
	out.rotation = smoothRotation(out.backends)
	if len(out.backends) > 0 {
		bs := make([]flows.Backend, len(out.backends))
		for i, b := range out.backends {
			bs[i] = b.Backend
		}
		out.table = flows.Maglev(bs, flows.TableSize(len(bs)))
	}
	return out, nil
}

// smoothRotation is the order in which ROUND_ROBIN visits the backends:
// each appears as often as its weight over the weights' common divisor,
// spread out (nginx's smooth weighted round robin), so that a member of
// weight 3 beside one of weight 1 gets three requests in four, not three
// in a row.
func smoothRotation(bs []*backend) []int {
	if len(bs) == 0 {
		return nil
	}
	weights := make([]int, len(bs))
	for i, b := range bs {
		weights[i] = b.Weight
	}
	g := flows.WeightDivisor(weights)
	total := 0
	for i := range weights {
		weights[i] /= g
		total += weights[i]
	}
	current := make([]int, len(bs))
	out := make([]int, 0, total)
	for range total {
		best := 0
		for i, w := range weights {
			current[i] += w
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= total
		out = append(out, best)
	}
	return out
}

// pick returns the member for a request from from (the client's address
// and port), and whether the
// response must set the member cookie (HTTP_COOKIE persistence, when the
// request named no member it could keep). nil when the pool has no
// member.
func (p *pool) pick(req *http.Request, from netip.AddrPort) (*backend, bool) {
	client := from.Addr()
	if len(p.backends) == 0 {
		return nil, false
	}
	if sp := p.persist; sp != nil {
		switch sp.Type {
		case flows.PersistHTTPCookie:
			if b := p.named(req, HTTPCookie); b != nil {
				return b, false
			}
			return p.choose(from), true
		case flows.PersistAppCookie:
			if b := p.named(req, sp.CookieName+appCookieSuffix); b != nil {
				return b, false
			}
			if c, err := req.Cookie(sp.CookieName); err == nil && c.Value != "" {
				return p.hashed(c.Value), false
			}
			return p.choose(from), false
		case flows.PersistSourceIP:
			return p.hashed(client.String()), false
		}
	}
	return p.choose(from), false
}

// named is the member a persistence cookie names, if it is still one of
// the pool's usable members.
func (p *pool) named(req *http.Request, cookie string) *backend {
	c, err := req.Cookie(cookie)
	if err != nil {
		return nil
	}
	return p.byID[c.Value]
}

// choose applies the pool's algorithm.
func (p *pool) choose(from netip.AddrPort) *backend {
	switch p.alg {
	case flows.SourceIP:
		return p.hashed(from.Addr().String())
	case flows.SourceIPPort:
		// Each client connection keeps one member, on every node.
		return p.hashed(from.String())
	case flows.LeastConnections:
		return p.leastActive()
	}
	n := p.next.Add(1) - 1
	return p.backends[p.rotation[n%uint64(len(p.rotation))]]
}

// leastActive is the member with the fewest open requests for its
// weight; ties go round the pool, so that an idle pool still spreads.
func (p *pool) leastActive() *backend {
	start := int(p.next.Add(1)-1) % len(p.backends)
	var best *backend
	var bestLoad float64
	for i := range p.backends {
		b := p.backends[(start+i)%len(p.backends)]
		load := float64(b.active.Load()) / float64(b.Weight)
		if best == nil || load < bestLoad {
			best, bestLoad = b, load
		}
	}
	return best
}

// hashed maps a key onto the pool's Maglev table.
func (p *pool) hashed(key string) *backend {
	h := fnv.New64a()
	h.Write([]byte(key))
	return p.backends[p.table[h.Sum64()%uint64(len(p.table))]]
}

// memberCookie is the cookie that keeps a client on b.
func (p *pool) memberCookie(b *backend) *http.Cookie {
	name := HTTPCookie
	if p.persist != nil && p.persist.Type == flows.PersistAppCookie {
		name = p.persist.CookieName + appCookieSuffix
	}
	return &http.Cookie{Name: name, Value: b.MemberID, Path: "/", HttpOnly: true}
}

// String names the pool in logs.
func (p *pool) String() string { return p.id + "(" + strconv.Itoa(len(p.backends)) + " members)" }
