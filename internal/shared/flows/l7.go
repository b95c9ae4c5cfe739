package flows

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
)

// L7 is what a node's proxy does with the requests of an HTTP listener:
// the listener's L7 policies, in the order they are evaluated, and every
// pool they or the listener name. A service with L7 set is steered to
// the proxy on the client's own node instead of being balanced per
// connection; its Backends are the default pool's, for the probes and
// the statistics.
type L7 struct {
	// Policies are evaluated in order; the first whose rules all match
	// decides. A policy with no rule never matches (Octavia's amphora
	// skips it too).
	Policies []L7Policy
	// DefaultPool is the ID of the pool (in Pools) that takes the
	// requests no policy decides, or "" when there is none: those get
	// 503, as from an amphora without a default backend.
	DefaultPool string
	Pools       []L7Pool
	// InsertHeaders are the request headers the proxy adds, by name
	// (X-Forwarded-For, X-Forwarded-Port, X-Forwarded-Proto): those of
	// the listener's insert_headers whose value is "true".
	InsertHeaders []string
	// ClientTimeout bounds a client's idle time between requests,
	// ConnectTimeout a connection to a member, MemberTimeout the wait
	// for a member's answer (the listener's timeout_client_data,
	// timeout_member_connect, timeout_member_data); 0 is none.
	ClientTimeout  time.Duration
	ConnectTimeout time.Duration
	MemberTimeout  time.Duration
	// TLS, when set, terminates TLS before the requests are routed (a
	// TERMINATED_HTTPS listener).
	TLS *L7TLS
}

// L7TLS is how a listener terminates TLS: its certificates and keys
// (held in memory only, on the server and the nodes), how it asks for
// and checks a client's certificate, and what it offers.
type L7TLS struct {
	// Certificates are the listener's: the default first, then the SNI
	// ones; a client naming a server is given the first whose names
	// cover it, else the default.
	Certificates []L7Certificate
	// ClientAuth is NONE, OPTIONAL or MANDATORY.
	ClientAuth string
	// ClientCA and ClientCRL are PEM: the CAs a client's certificate
	// must chain to, and the revocation lists it is checked against.
	ClientCA, ClientCRL []byte
	// ALPN are the protocols offered, in order (h2, http/1.1).
	ALPN []string
	// Versions are the TLS versions accepted (TLSv1.2, TLSv1.3); none:
	// the proxy's default, TLS 1.2 and 1.3.
	Versions []string
	// CipherSuites are the TLS 1.0-1.2 suites accepted, by Go's ID, in
	// the order of the listener's tls_ciphers (tlsciphers.Translate);
	// none: Go's defaults. TLS 1.3's are Go's, whatever these are.
	CipherSuites []uint16
	// HSTSMaxAge, when at least 0, adds Strict-Transport-Security with
	// that max-age, and includeSubDomains and preload as set.
	HSTSMaxAge            int
	HSTSIncludeSubdomains bool
	HSTSPreload           bool
}

// L7Certificate is a certificate chain and its private key, PEM. It
// prints without its key, so that no log or dump shows one.
type L7Certificate struct {
	Chain, Key []byte
}

func (c L7Certificate) String() string {
	return fmt.Sprintf("certificate chain of %d bytes, key of %d bytes (not shown)", len(c.Chain), len(c.Key))
}

// GoString is String, for %#v.
func (c L7Certificate) GoString() string { return c.String() }

// LogValue is String, for slog.
func (c L7Certificate) LogValue() slog.Value { return slog.StringValue(c.String()) }

// L7Action is what a matching policy does with a request.
type L7Action string

const (
	L7Reject         L7Action = "REJECT"
	L7RedirectToPool L7Action = "REDIRECT_TO_POOL"
	L7RedirectToURL  L7Action = "REDIRECT_TO_URL"
	L7RedirectPrefix L7Action = "REDIRECT_PREFIX"
)

// L7Policy is one L7 policy of a listener.
type L7Policy struct {
	ID     string
	Action L7Action
	// Pool is the pool's ID for REDIRECT_TO_POOL.
	Pool string
	// URL is the redirect_url of REDIRECT_TO_URL or the redirect_prefix
	// of REDIRECT_PREFIX.
	URL string
	// Code is the redirect's HTTP status (301, 302, 303, 307 or 308).
	Code  int
	Rules []L7Rule
}

// L7RuleType is what part of a request a rule compares.
type L7RuleType string

const (
	RuleHostName    L7RuleType = "HOST_NAME"
	RulePath        L7RuleType = "PATH"
	RuleFileType    L7RuleType = "FILE_TYPE"
	RuleHeader      L7RuleType = "HEADER"
	RuleCookie      L7RuleType = "COOKIE"
	RuleSSLConnCert L7RuleType = "SSL_CONN_HAS_CERT"
	RuleSSLVerify   L7RuleType = "SSL_VERIFY_RESULT"
	RuleSSLDNField  L7RuleType = "SSL_DN_FIELD"
)

// L7Compare is how a rule compares.
type L7Compare string

const (
	CompareRegex      L7Compare = "REGEX"
	CompareStartsWith L7Compare = "STARTS_WITH"
	CompareEndsWith   L7Compare = "ENDS_WITH"
	CompareContains   L7Compare = "CONTAINS"
	CompareEqualTo    L7Compare = "EQUAL_TO"
)

// L7Rule is one condition of a policy; a policy matches when all of its
// rules do.
type L7Rule struct {
	Type    L7RuleType
	Compare L7Compare
	// Key names the header, the cookie or the distinguished name's field.
	Key    string
	Value  string
	Invert bool
}

// LeastConnections sends a request to the member with the fewest the
// node's proxy has open: per node, since nodes share no counters.
const LeastConnections Algorithm = "LEAST_CONNECTIONS"

// L7Pool is a pool an L7 listener's requests may go to.
type L7Pool struct {
	ID          string
	Algorithm   Algorithm
	Persistence *L7Persistence
	// ProxyProtocol is the PROXY protocol version (1 or 2) a member
	// reads before each connection's requests (PROXY and PROXYV2 pools;
	// 0: none): it names the client, so a member connection serves one
	// client only.
	ProxyProtocol int
	// Backends are the usable members, as for a Service.
	Backends []Backend
	// TLS, when set, is how the proxy connects to the members: with TLS
	// (a pool's tls_enabled), else in plain HTTP.
	TLS *L7PoolTLS
}

// L7PoolTLS is how the proxy speaks TLS to a pool's members, as the
// amphora's HAProxy does: the member's certificate verified against CA
// when there is one (else not verified at all, HAProxy's "verify
// none"), and checked against CRL; Certificate presented to the members
// when set; only Versions (none: TLS 1.2 and 1.3); ALPN offered.
type L7PoolTLS struct {
	// CA and CRL are PEM: the CAs a member's certificate must chain to
	// (ca_tls_container_ref) and the revocation lists it is checked
	// against (crl_container_ref).
	CA, CRL []byte
	// Certificate is the client certificate and key (tls_container_ref).
	Certificate *L7Certificate
	// ALPN are the protocols offered to a member, in order (h2,
	// http/1.1, http/1.0); none: HTTP/1.1 without ALPN.
	ALPN []string
	// Versions are the TLS versions the proxy accepts from a member
	// (TLSv1.2, TLSv1.3).
	Versions []string
	// CipherSuites are the TLS 1.0-1.2 suites offered to a member, as
	// L7TLS's (the pool's tls_ciphers); none: Go's defaults.
	CipherSuites []uint16
}

// Clone is a deep copy of t.
func (t *L7PoolTLS) Clone() *L7PoolTLS {
	if t == nil {
		return nil
	}
	out := &L7PoolTLS{CA: bytes.Clone(t.CA), CRL: bytes.Clone(t.CRL), ALPN: slices.Clone(t.ALPN), Versions: slices.Clone(t.Versions),
		CipherSuites: slices.Clone(t.CipherSuites)}
	if c := t.Certificate; c != nil {
		out.Certificate = &L7Certificate{Chain: bytes.Clone(c.Chain), Key: bytes.Clone(c.Key)}
	}
	return out
}

// Equal reports whether two pools' TLS are equal in every field (nil
// and empty lists are equal).
func (t *L7PoolTLS) Equal(o *L7PoolTLS) bool {
	if t == nil || o == nil {
		return t == o
	}
	return bytes.Equal(t.CA, o.CA) && bytes.Equal(t.CRL, o.CRL) && sameCertificate(t.Certificate, o.Certificate) &&
		slices.Equal(t.ALPN, o.ALPN) && slices.Equal(t.Versions, o.Versions) && slices.Equal(t.CipherSuites, o.CipherSuites)
}

func sameCertificate(a, b *L7Certificate) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Chain, b.Chain) && bytes.Equal(a.Key, b.Key)
}

// L7Persistence keeps a client's requests on one member.
type L7Persistence struct {
	// Type is SOURCE_IP, HTTP_COOKIE or APP_COOKIE.
	Type string
	// CookieName is APP_COOKIE's cookie, the one the application sets.
	CookieName string
	// Timeout is SOURCE_IP's idle time before a client may move.
	Timeout time.Duration
}

// Persistence types an L7 pool may have beside SOURCE_IP.
const (
	PersistSourceIP   = "SOURCE_IP"
	PersistHTTPCookie = "HTTP_COOKIE"
	PersistAppCookie  = "APP_COOKIE"
)

// Pool returns the pool named id, and whether there is one.
func (l *L7) Pool(id string) (L7Pool, bool) {
	i := slices.IndexFunc(l.Pools, func(p L7Pool) bool { return p.ID == id })
	if i < 0 {
		return L7Pool{}, false
	}
	return l.Pools[i], true
}

// Clone is a deep copy of l: nothing of it is shared with l.
func (l L7) Clone() L7 {
	out := l
	out.Policies = make([]L7Policy, len(l.Policies))
	for i, p := range l.Policies {
		p.Rules = slices.Clone(p.Rules)
		out.Policies[i] = p
	}
	out.Pools = make([]L7Pool, len(l.Pools))
	for i, p := range l.Pools {
		if p.Persistence != nil {
			sp := *p.Persistence
			p.Persistence = &sp
		}
		p.Backends = make([]Backend, len(p.Backends))
		for j, b := range l.Pools[i].Backends {
			b.Zones, b.ForNodes = slices.Clone(b.Zones), slices.Clone(b.ForNodes)
			p.Backends[j] = b
		}
		p.TLS = p.TLS.Clone()
		out.Pools[i] = p
	}
	out.InsertHeaders = slices.Clone(l.InsertHeaders)
	if l.TLS != nil {
		t := *l.TLS
		t.Certificates = make([]L7Certificate, len(l.TLS.Certificates))
		for i, c := range l.TLS.Certificates {
			t.Certificates[i] = L7Certificate{Chain: bytes.Clone(c.Chain), Key: bytes.Clone(c.Key)}
		}
		t.ClientCA, t.ClientCRL = bytes.Clone(t.ClientCA), bytes.Clone(t.ClientCRL)
		t.ALPN, t.Versions, t.CipherSuites = slices.Clone(t.ALPN), slices.Clone(t.Versions), slices.Clone(t.CipherSuites)
		out.TLS = &t
	}
	return out
}

// Equal reports whether two L7 configurations are equal in every field
// (nil and empty lists are equal).
func (l *L7) Equal(o *L7) bool { return sameL7(l, o) }

// sameL7 reports whether two L7 configurations are equal in every field
// (nil and empty lists are equal).
func sameL7(a, b *L7) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.EqualFunc(a.Policies, b.Policies, sameL7Policy) && a.DefaultPool == b.DefaultPool &&
		slices.EqualFunc(a.Pools, b.Pools, sameL7Pool) && slices.Equal(a.InsertHeaders, b.InsertHeaders) &&
		a.ClientTimeout == b.ClientTimeout && a.ConnectTimeout == b.ConnectTimeout && a.MemberTimeout == b.MemberTimeout &&
		sameL7TLS(a.TLS, b.TLS)
}

func sameL7TLS(a, b *L7TLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.EqualFunc(a.Certificates, b.Certificates, func(x, y L7Certificate) bool {
		return bytes.Equal(x.Chain, y.Chain) && bytes.Equal(x.Key, y.Key)
	}) && a.ClientAuth == b.ClientAuth && bytes.Equal(a.ClientCA, b.ClientCA) && bytes.Equal(a.ClientCRL, b.ClientCRL) &&
		slices.Equal(a.ALPN, b.ALPN) && slices.Equal(a.Versions, b.Versions) && slices.Equal(a.CipherSuites, b.CipherSuites) &&
		a.HSTSMaxAge == b.HSTSMaxAge &&
		a.HSTSIncludeSubdomains == b.HSTSIncludeSubdomains && a.HSTSPreload == b.HSTSPreload
}

func sameL7Policy(a, b L7Policy) bool {
	return a.ID == b.ID && a.Action == b.Action && a.Pool == b.Pool && a.URL == b.URL && a.Code == b.Code &&
		slices.Equal(a.Rules, b.Rules)
}

func sameL7Pool(a, b L7Pool) bool {
	return a.ID == b.ID && a.Algorithm == b.Algorithm && sameL7Persistence(a.Persistence, b.Persistence) && a.ProxyProtocol == b.ProxyProtocol &&
		slices.EqualFunc(a.Backends, b.Backends, SameBackend) && a.TLS.Equal(b.TLS)
}

func sameL7Persistence(a, b *L7Persistence) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// InsertHeaderNames returns, sorted, the names of the headers an
// Octavia insert_headers map turns on ("true", any case), as L7 holds
// them.
func InsertHeaderNames(insert map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(insert)) {
		if strings.EqualFold(insert[k], "true") {
			out = append(out, k)
		}
	}
	return out
}
