package l7proxy

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// memberTLS is a pool's TLS to its members ready to use, as the amphora's
// HAProxy speaks it ("ssl" on the pool's servers): the member's
// certificate verified against the pool's CA and CRL when it has a CA,
// not at all when it has none ("verify none"); the pool's certificate
// presented whenever a member asks; the pool's versions, cipher suites
// and ALPN. No server name is checked or sent: members are addressed by
// IP.
type memberTLS struct {
	config *tls.Config
	// h1, h2: the HTTP versions the proxy may speak to the members.
	h1, h2 bool
	// key names the configuration: pools with the same TLS share one
	// transport, and with it their idle member connections.
	key [sha256.Size]byte
}

// errMemberCert marks a member certificate the proxy refused.
var errMemberCert = errors.New("member certificate refused")

func compileMemberTLS(t flows.L7PoolTLS) (*memberTLS, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13,
		// Verified by VerifyConnection below (or not at all): Go's own
		// check would ask for the member's name.
		InsecureSkipVerify: true,
		// Offered for TLS 1.2 and older (none: Go's defaults).
		CipherSuites: slices.Clone(t.CipherSuites)}
	if err := versionRange(cfg, t.Versions); err != nil {
		return nil, err
	}
	if len(t.CA) > 0 {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(t.CA) {
			return nil, errors.New("the members' CA holds no certificate")
		}
		crls, err := parseCRLs(t.CRL)
		if err != nil {
			return nil, fmt.Errorf("members' %w", err)
		}
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if err := verifyChain(cs.PeerCertificates, roots, crls, x509.ExtKeyUsageServerAuth, "member"); err != nil {
				return fmt.Errorf("%w: %w", errMemberCert, err)
			}
			return nil
		}
	} else if len(t.CRL) > 0 {
		return nil, errors.New("a members' CRL without a CA")
	}
	if c := t.Certificate; c != nil {
		pair, err := tls.X509KeyPair(c.Chain, c.Key)
		if err != nil {
			return nil, fmt.Errorf("the certificate presented to members: %w", err)
		}
		// Sent whenever a member asks, whatever CAs it names, as
		// HAProxy's "crt" is.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	// HTTP/1.1 whatever ALPN says: a member that chooses no protocol
	// speaks it, as HAProxy falls back to it.
	out := &memberTLS{config: cfg, h1: true}
	for _, p := range t.ALPN {
		switch p {
		case "h2":
			out.h2 = true
		case "http/1.1", "http/1.0":
		default:
			return nil, fmt.Errorf("ALPN protocol %q is not supported", p)
		}
	}
	cfg.NextProtos = slices.Clone(t.ALPN)
	out.key = tlsKey(t)
	return out, nil
}

// tlsKey is a digest of every field of a pool's TLS.
func tlsKey(t flows.L7PoolTLS) [sha256.Size]byte {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	field(t.CA)
	field(t.CRL)
	if c := t.Certificate; c != nil {
		field([]byte{1})
		field(c.Chain)
		field(c.Key)
	} else {
		field(nil)
	}
	for _, l := range [][]string{t.ALPN, t.Versions} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(l))))
		for _, s := range l {
			field([]byte(s))
		}
	}
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(t.CipherSuites))))
	for _, id := range t.CipherSuites {
		h.Write(binary.BigEndian.AppendUint16(nil, id))
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// configure makes tr speak the pool's TLS to its members.
func (m *memberTLS) configure(tr *http.Transport) {
	tr.TLSClientConfig = m.config.Clone()
	var ps http.Protocols
	ps.SetHTTP1(m.h1)
	ps.SetHTTP2(m.h2)
	tr.Protocols = &ps
}

// memberTransport is the transport of the pools whose TLS is m's, made
// on first use; a transport no pool uses any more is dropped by
// dropTransports.
func (p *Proxy) memberTransport(m *memberTLS) *http.Transport {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if tr := p.transports[m.key]; tr != nil {
		return tr
	}
	tr := &http.Transport{
		DialContext:         p.dial,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	m.configure(tr)
	p.transports[m.key] = tr
	return tr
}

// dropTransports closes the idle connections of the TLS transports that
// no pool of routes uses, and forgets them.
func (p *Proxy) dropTransports(routes map[uint16]*router) {
	used := map[[sha256.Size]byte]bool{}
	for _, r := range routes {
		for _, pl := range r.pools {
			if pl.tls != nil {
				used[pl.tls.key] = true
			}
		}
	}
	p.tmu.Lock()
	defer p.tmu.Unlock()
	for _, k := range slices.Collect(maps.Keys(p.transports)) {
		if !used[k] {
			p.transports[k].CloseIdleConnections()
			delete(p.transports, k)
		}
	}
}
