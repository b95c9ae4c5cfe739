// Package flow is the "flow" provider: load balancers realized as kernel
// flows on every node. It refuses, with Octavia's 501, everything a
// connection-level (L4) flow data plane cannot do, so clients and
// octavia-tempest-plugin see an honest "not supported" instead of a
// silently ignored option.
package flow

import (
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/tlsciphers"
)

// Name is the provider's name in the API.
const Name = flows.ProviderName

// Realizer makes a committed change real on the nodes and reports back:
// the server's fan-out hub (internal/server/fanout, once every agent has
// programmed it), or Immediate.
type Realizer interface {
	Realize(lbID string, change int64, done func(error))
}

// Immediate completes every change as soon as it is committed: for the
// tests, benchmarks and test harnesses that run the API without agents.
type Immediate struct{}

// Realize reports success asynchronously, as a real provider would.
func (Immediate) Realize(_ string, _ int64, done func(error)) { go done(nil) }

// Provider is the flow provider.
type Provider struct {
	Realizer Realizer
	// OVN: the cloud's VMs reach the VIPs through OVN's load balancers
	// (agent --dataplane ovn, the server's --neutron-vip-ports ovn), so
	// what those cannot enforce or express is refused rather than
	// served to the nodes alone.
	OVN bool
	// L7: HTTP listeners are served by every node's proxy (the agents'
	// internal/node/l7proxy), with their L7 policies, HTTP pools and
	// insert_headers; off, they are refused as before.
	L7 bool
	// TLS: with L7, TERMINATED_HTTPS listeners are served too, their
	// certificates read from Barbican (internal/server/tlscerts).
	TLS bool
}

// New returns the flow provider realizing changes through r.
func New(r Realizer) *Provider { return &Provider{Realizer: r} }

func (p *Provider) Name() string { return Name }

// Description is what GET /providers says of the flow provider.
const Description = "flowlb distributed L4 load balancing as kernel flows on every node"

func (p *Provider) Description() string { return Description }

func (p *Provider) Realize(lbID string, change int64, done func(error)) {
	p.Realizer.Realize(lbID, change, done)
}

// What flows can carry, the data plane implement and the agents probe is
// listed in internal/shared/flows (flows.Protocols, Algorithms, MonitorTypes).

func l4(protocol string) bool {
	_, ok := flows.ParseProtocol(protocol)
	return ok
}

func refuse(format string, args ...any) error {
	return lbaas.Unsupported(Name, format, args...)
}

// Check refuses what a flow data plane cannot serve.
func (p *Provider) Check(t *lbaas.Tree) error {
	if q := t.LB.VIPQoSPolicyID; q != nil && *q != "" {
		return refuse("VIP QoS policies are not supported.")
	}
	if len(t.LB.VIPSGIDs) > 0 {
		return refuse("VIP security groups are not supported.")
	}
	// Both address families are served: each VIP forwards to the members
	// of its own family (internal/server/compiler), so an IPv4 and an IPv6
	// member may share a pool, as under Octavia's amphora provider.
	for _, l := range t.Listeners {
		if !l4(l.Protocol) && !p.http(l.Protocol) {
			return refuse("%s protocol listeners are not supported; use %s.", l.Protocol, p.protocols())
		}
		terminates := l.Protocol == terminatedHTTPS
		if !terminates && (l.DefaultTLSContainerRef != nil || len(l.SNIContainerRefs) > 0 || l.ClientCATLSContainerRef != nil) {
			return refuse("TLS termination is not supported.")
		}
		if len(l.InsertHeaders) > 0 && !p.http(l.Protocol) {
			return refuse("insert_headers is not supported.")
		}
		allowed := insertable
		if terminates {
			allowed = append(slices.Clone(insertable), sslInsertable...)
		}
		for _, h := range flows.InsertHeaderNames(l.InsertHeaders) {
			if !slices.ContainsFunc(allowed, func(a string) bool { return strings.EqualFold(a, h) }) {
				return refuse("insert_headers %s is not supported; %s are.", h, strings.Join(allowed, ", "))
			}
		}
		if terminates {
			if err := checkTLSListener(l); err != nil {
				return err
			}
		}
	}
	if len(t.L7Policies) > 0 && !p.L7 {
		return refuse("L7 policies are not supported.")
	}
	for _, pol := range t.L7Policies {
		if l := t.Listener(pol.ListenerID); l != nil && !p.http(l.Protocol) {
			return refuse("L7 policies on %s listeners are not supported: their traffic is passed through to the members unread.", l.Protocol)
		}
	}
	if err := checkRules(t); err != nil {
		return err
	}
	if p.OVN {
		if err := checkOVN(t); err != nil {
			return err
		}
	}
	for _, pool := range t.Pools {
		if p.http(pool.Protocol) || p.proxied(pool.Protocol) {
			if err := checkHTTPPool(pool); err != nil {
				return err
			}
		} else if err := checkL4Pool(pool); err != nil {
			return err
		}
		if err := p.checkPoolTLS(pool); err != nil {
			return err
		}
		if hm := t.PoolMonitor(pool.ID); hm != nil {
			if _, ok := flows.ParseMonitorType(hm.Type); !ok {
				return refuse("%s health monitors are not supported.", hm.Type)
			}
		}
		for _, l := range t.ListenersOfPool(pool.ID) {
			if l.Protocol != pool.Protocol && !(p.http(l.Protocol) && (p.proxied(pool.Protocol) || p.http(pool.Protocol))) && !sameFlow(l.Protocol, pool.Protocol) {
				return refuse("a %s listener with a %s pool is not supported; the protocols must match.", l.Protocol, pool.Protocol)
			}
		}
	}
	return nil
}

// sameFlow reports whether a listener and a pool protocol are one flow
// protocol (HTTPS passed through, and TCP).
func sameFlow(listener, pool string) bool {
	a, ok := flows.ParseProtocol(listener)
	b, ok2 := flows.ParseProtocol(pool)
	return ok && ok2 && a == b
}

// http reports whether protocol is one the node's proxy serves.
func (p *Provider) http(protocol string) bool {
	return p.L7 && (protocol == "HTTP" || (p.TLS && protocol == terminatedHTTPS))
}

const terminatedHTTPS = "TERMINATED_HTTPS"

// sslInsertable are the headers a TERMINATED_HTTPS listener's proxy
// inserts beside the X-Forwarded ones.
var sslInsertable = []string{"X-SSL-Client-Verify", "X-SSL-Client-Has-Cert", "X-SSL-Client-DN", "X-SSL-Client-CN", "X-SSL-Issuer",
	"X-SSL-Client-SHA1", "X-SSL-Client-Not-Before", "X-SSL-Client-Not-After"}

// tlsVersionOrder are the TLS versions the node's proxy (Go's TLS)
// serves, oldest first: a listener's must be a run of them.
var tlsVersionOrder = []string{"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"}

// checkTLSListener refuses what the node's proxy cannot terminate:
// SSLv3, versions with a gap (checkVersions), tls_ciphers it cannot
// serve (checkCiphers).
func checkTLSListener(l *lbaas.Listener) error {
	if err := checkVersions(l.TLSVersions); err != nil {
		return err
	}
	return checkCiphers(l.TLSCiphers, l.TLSVersions)
}

// checkCiphers refuses a tls_ciphers the node's proxy cannot serve as
// HAProxy would: OpenSSL's keywords and operators (501: valid for
// Octavia, which hands them to OpenSSL, but Go's TLS has no such
// selection to honour them exactly), and, where TLS 1.2 or older is
// allowed, a list naming no suite Go serves (400: HAProxy would not load
// it either, OpenSSL's "no cipher match"). Only TLS 1.3 allowed, the list
// does not apply and anything is taken (tlsciphers.Suites).
func checkCiphers(list *string, versions []string) error {
	if !set(list) {
		return nil
	}
	_, err := tlsciphers.Suites(*list, versions)
	var kw *tlsciphers.KeywordError
	var none *tlsciphers.NoSuiteError
	switch {
	case errors.As(err, &kw):
		return refuse("tls_ciphers %s is not supported: OpenSSL's keywords and operators cannot be honoured by the proxy's TLS; name the cipher suites, among %s.",
			kw.Element, strings.Join(tlsciphers.Served(), ", "))
	case errors.As(err, &none):
		return lbaas.Validation("tls_ciphers names no cipher suite of TLS 1.2 or older that the proxy serves (not served: %s); name one of %s, or allow TLS 1.3 only.",
			strings.Join(none.Dropped, ", "), strings.Join(tlsciphers.Served(), ", "))
	}
	return err
}

// checkVersions refuses TLS versions Go's TLS lacks, and versions with a
// gap.
func checkVersions(versions []string) error {
	var idx []int
	for _, v := range versions {
		i := slices.Index(tlsVersionOrder, v)
		if i < 0 {
			return refuse("TLS version %s is not supported; %s are.", v, strings.Join(tlsVersionOrder, ", "))
		}
		idx = append(idx, i)
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	if len(idx) > 0 && idx[len(idx)-1]-idx[0] != len(idx)-1 {
		return refuse("TLS versions %s leave a gap; only a range of versions is supported.", strings.Join(versions, ", "))
	}
	return nil
}

// checkPoolTLS refuses what the node's proxy cannot do of a pool's TLS
// to its members: any on a pool it does not proxy, certificates without
// a certificate manager to read them from (server --tls-certificates),
// SSLv3, versions with a gap, tls_ciphers it cannot serve.
func (p *Provider) checkPoolTLS(pool *lbaas.Pool) error {
	refs := set(pool.TLSContainerRef) || set(pool.CATLSContainerRef) || set(pool.CRLContainerRef)
	if !pool.TLSEnabled && !refs {
		return nil
	}
	if !p.http(pool.Protocol) && !p.proxied(pool.Protocol) {
		if p.L7 {
			return refuse("TLS to members is not supported for %s pools; it is for HTTP, PROXY and PROXYV2 pools.", pool.Protocol)
		}
		return refuse("TLS to members is not supported.")
	}
	if refs && !p.TLS {
		return refuse("TLS to members with certificates (tls_container_ref, ca_tls_container_ref, crl_container_ref) is not supported: no certificate manager is configured; tls_enabled alone is.")
	}
	if !pool.TLSEnabled {
		return nil
	}
	if err := checkVersions(pool.TLSVersions); err != nil {
		return err
	}
	return checkCiphers(pool.TLSCiphers, pool.TLSVersions)
}

func set(s *string) bool { return s != nil && *s != "" }

// proxied reports whether protocol is a pool protocol whose members the
// node's proxy sends HTTP after a PROXY protocol header.
func (p *Provider) proxied(protocol string) bool {
	return p.L7 && (protocol == "PROXY" || protocol == "PROXYV2")
}

// protocols names the listener protocols served, for a refusal.
func (p *Provider) protocols() string {
	if p.L7 && p.TLS {
		return "TCP, UDP, SCTP, HTTP or TERMINATED_HTTPS"
	}
	if p.L7 {
		return "TCP, UDP, SCTP or HTTP"
	}
	return "TCP, UDP or SCTP"
}

// insertable are the headers the node's proxy inserts (the X-SSL-*
// ones need TLS termination).
var insertable = []string{"X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto"}

func checkL4Pool(pool *lbaas.Pool) error {
	if !l4(pool.Protocol) {
		return refuse("%s protocol pools are not supported; use TCP, UDP or SCTP.", pool.Protocol)
	}
	if _, ok := flows.ParseAlgorithm(pool.LBAlgorithm); !ok {
		return refuse("%s algorithm is not supported.", pool.LBAlgorithm)
	}
	if sp := pool.SessionPersistence; sp != nil && sp.Type != "SOURCE_IP" {
		return refuse("%s session persistence is not supported; only SOURCE_IP is.", sp.Type)
	}
	return nil
}

// httpAlgorithms are what the node's proxy balances HTTP pools with.
var httpAlgorithms = []string{string(flows.RoundRobin), string(flows.LeastConnections), string(flows.SourceIP), string(flows.SourceIPPort)}

func checkHTTPPool(pool *lbaas.Pool) error {
	if !slices.Contains(httpAlgorithms, pool.LBAlgorithm) {
		return refuse("%s algorithm is not supported for HTTP pools; %s are.", pool.LBAlgorithm, strings.Join(httpAlgorithms, ", "))
	}
	return nil
}

// checkRules refuses a regular expression the node's proxy cannot
// evaluate: Octavia checks them with Python's re, the proxy runs Go's
// RE2, which lacks backreferences and lookaround.
func checkRules(t *lbaas.Tree) error {
	for _, r := range t.L7Rules {
		if r.CompareType != string(flows.CompareRegex) {
			continue
		}
		if _, err := regexp.Compile(r.Value); err != nil {
			return refuse("L7 rule %s: the regular expression %q is not supported (RE2 syntax: no backreferences or lookaround): %v.", r.ID, r.Value, err)
		}
	}
	return nil
}

// checkOVN refuses what OVN's Load_Balancer rows cannot hold: a
// connection limit (a VM would get past it), and weights that need more
// than flows.MaxWeightEntries repetitions. allowed_cidrs are held by the
// agent's ACLs, on the VIP and its floating IPs.
func checkOVN(t *lbaas.Tree) error {
	for _, l := range t.Listeners {
		if !l4(l.Protocol) {
			return refuse("%s protocol listeners are not supported with the OVN data plane.", l.Protocol)
		}
		if l.ConnectionLimit >= 0 {
			return refuse("connection_limit is not supported with the OVN data plane: OVN's load balancers have no limit.")
		}
	}
	for _, pool := range t.Pools {
		var primaries, backups []int
		for _, m := range t.PoolMembers(pool.ID) {
			switch {
			case m.Weight == 0:
			case m.Backup:
				backups = append(backups, m.Weight)
			default:
				primaries = append(primaries, m.Weight)
			}
		}
		for _, ws := range [][]int{primaries, backups} {
			if n := flows.WeightEntries(ws); n > flows.MaxWeightEntries {
				return refuse("pool %s's member weights need %d backend entries with the OVN data plane, which has no weights and writes at most %d; use weights with a larger common divisor.", pool.ID, n, flows.MaxWeightEntries)
			}
		}
	}
	return nil
}

func (p *Provider) FlavorCapabilities() []lbaas.Capability { return nil }

func (p *Provider) AZCapabilities() []lbaas.Capability { return nil }

// CheckFlavor accepts only an empty flavor: the provider has no options yet.
func (p *Provider) CheckFlavor(data map[string]any) error { return noOptions(data) }

// CheckAZ accepts only empty AZ data.
func (p *Provider) CheckAZ(data map[string]any) error { return noOptions(data) }

func noOptions(data map[string]any) error {
	for k := range data {
		return refuse("%s is not a supported option.", k)
	}
	return nil
}
