package l7proxy

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// issueRSA is a server certificate with an RSA key, for the suites of
// RSA authentication and key exchange.
func (ca *testCA) issueRSA(t *testing.T, name string) flows.L7Certificate {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return flows.L7Certificate{Chain: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})}
}

// handshake is a client's TLS handshake with the listener at at,
// offering only versions min to max and, for TLS 1.2, suites: the suite
// and version agreed, or the error.
func handshake(at netip.AddrPort, min, max uint16, suites ...uint16) (suite, version uint16, err error) {
	c, err := tls.Dial("tcp", at.String(), &tls.Config{InsecureSkipVerify: true, ServerName: "www.example",
		MinVersion: min, MaxVersion: max, CipherSuites: suites})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	st := c.ConnectionState()
	return st.CipherSuite, st.Version, nil
}

// TestListenerCipherSuites: a TERMINATED_HTTPS listener with cipher
// suites accepts a TLS 1.2 client offering one of them and ends the
// handshake of one offering none; TLS 1.3 is not restricted by them;
// without any, Go's defaults are accepted.
func TestListenerCipherSuites(t *testing.T) { forEngines(t, testListenerCipherSuites) }

func testListenerCipherSuites(t *testing.T) {
	ca := newTestCA(t, "server CA")
	ecdsaCert, rsaCert := ca.issue(t, pkix.Name{CommonName: "www.example"}, false, "www.example"), ca.issueRSA(t, "www.example")
	p, lp := startProxy(t)
	listen := func(cert flows.L7Certificate, versions []string, suites ...uint16) {
		t.Helper()
		cfg := flows.L7{TLS: &flows.L7TLS{Certificates: []flows.L7Certificate{cert}, Versions: versions, CipherSuites: suites, HSTSMaxAge: -1}}
		if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
			t.Fatal(err)
		}
	}
	const (
		chacha = tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
		gcm128 = tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
		gcm256 = tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
		cbc    = tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA
	)
	check := func(name string, offered []uint16, min, max uint16, wantSuite, wantVersion uint16) {
		t.Helper()
		suite, version, err := handshake(lp.addr(1), min, max, offered...)
		switch {
		case wantSuite == 0 && err == nil:
			t.Errorf("%s: handshake agreed on %s, want it refused", name, tls.CipherSuiteName(suite))
		case wantSuite != 0 && err != nil:
			t.Errorf("%s: %v, want %s", name, err, tls.CipherSuiteName(wantSuite))
		case wantSuite != 0 && (suite != wantSuite || version != wantVersion):
			t.Errorf("%s: %s over %s, want %s over %s", name, tls.CipherSuiteName(suite), tls.VersionName(version),
				tls.CipherSuiteName(wantSuite), tls.VersionName(wantVersion))
		}
	}
	tls12, tls13 := uint16(tls.VersionTLS12), uint16(tls.VersionTLS13)

	listen(ecdsaCert, []string{"TLSv1.2"}, chacha, gcm128)
	check("a suite outside the list", []uint16{gcm256}, tls12, tls12, 0, 0)
	check("another suite outside the list", []uint16{cbc}, tls12, tls12, 0, 0)
	check("the list's first", []uint16{chacha}, tls12, tls12, chacha, tls12)
	check("the list's second", []uint16{gcm128}, tls12, tls12, gcm128, tls12)
	check("one outside and one inside", []uint16{gcm256, gcm128}, tls12, tls12, gcm128, tls12)
	check("a TLS 1.3 client of a TLS 1.2 listener", nil, tls13, tls13, 0, 0)

	// TLS 1.2 and 1.3: TLS 1.3's suites are Go's, the list is TLS 1.2's.
	listen(ecdsaCert, nil, gcm128)
	check("TLS 1.3", nil, tls13, tls13, tls.TLS_AES_128_GCM_SHA256, tls13)
	check("TLS 1.2 outside the list", []uint16{chacha}, tls12, tls12, 0, 0)
	check("TLS 1.2 inside the list", []uint16{gcm128}, tls12, tls12, gcm128, tls12)

	// None: Go's defaults, which include ECDHE with CBC.
	listen(ecdsaCert, []string{"TLSv1.2"})
	check("Go's defaults", []uint16{cbc}, tls12, tls12, cbc, tls12)

	// AES128-SHA: RSA key exchange, which Go leaves out of its defaults
	// but serves when named.
	rsaKex := uint16(tls.TLS_RSA_WITH_AES_128_CBC_SHA)
	listen(rsaCert, []string{"TLSv1.2"}, rsaKex)
	check("AES128-SHA named", []uint16{rsaKex}, tls12, tls12, rsaKex, tls12)
	check("ECDHE-RSA outside the list", []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}, tls12, tls12, 0, 0)
	listen(rsaCert, []string{"TLSv1.2"})
	check("AES128-SHA not named", []uint16{rsaKex}, tls12, tls12, 0, 0)
}

// TestMemberCipherSuites: a TLS pool offers its members only its cipher
// suites: a member that accepts one of them is reached, one that accepts
// none answers 503.
func TestMemberCipherSuites(t *testing.T) { forEngines(t, testMemberCipherSuites) }

func testMemberCipherSuites(t *testing.T) {
	ca := newTestCA(t, "members CA")
	cert := ca.issue(t, pkix.Name{CommonName: "member"}, false)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "member=tls\nsuite=%s\nversion=%s\n", tls.CipherSuiteName(r.TLS.CipherSuite), tls.VersionName(r.TLS.Version))
	}))
	// The member accepts TLS 1.2 with ChaCha20 only.
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{clientPair(t, cert)}, MaxVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	member := flows.Backend{MemberID: "tls", Address: ap.Addr(), Port: ap.Port(), Weight: 1}

	for _, tc := range []struct {
		name   string
		suites []uint16
		status int
	}{
		{"the member's suite among the pool's", []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}, 200},
		{"the pool's suites without the member's", []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}, 503},
		{"Go's defaults", nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, lp := startProxy(t)
			pool := flows.L7Pool{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{member},
				TLS: &flows.L7PoolTLS{CA: ca.pem, CipherSuites: tc.suites}}
			if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{pool}}}}); err != nil {
				t.Fatal(err)
			}
			a := get(t, noRedirects(), lp.addr(1), "www.example", "/")
			if a.status != tc.status {
				t.Fatalf("status %d, want %d (%v)", a.status, tc.status, a.fields)
			}
			if tc.status == 200 && (a.fields["suite"] != "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" || a.fields["version"] != "TLS 1.2") {
				t.Errorf("the member saw %v", a.fields)
			}
		})
	}
}

// TestMemberTLSKeySeesSuites: pools that differ in their suites alone do
// not share a transport.
func TestMemberTLSKeySeesSuites(t *testing.T) {
	a := tlsKey(flows.L7PoolTLS{CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}})
	if b := tlsKey(flows.L7PoolTLS{CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}); a == b {
		t.Error("two pools' suites, one key")
	}
	if b := tlsKey(flows.L7PoolTLS{}); a == b {
		t.Error("suites and none, one key")
	}
}
