package l7proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// testCA issues certificates for the tests.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	serial int64
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue returns a certificate (PEM chain, key) for names, or a client
// certificate with that subject when client.
func (ca *testCA) issue(t testing.TB, subject pkix.Name, client bool, names ...string) flows.L7Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: subject, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return flows.L7Certificate{Chain: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}
}

// crl revokes the certificates of the given serials.
func (ca *testCA) crl(t *testing.T, serials ...int64) []byte {
	t.Helper()
	var entries []x509.RevocationListEntry
	for _, s := range serials {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: big.NewInt(s), RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now().Add(-time.Minute),
		NextUpdate: time.Now().Add(time.Hour), RevokedCertificateEntries: entries}, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

func clientPair(t *testing.T, c flows.L7Certificate) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(c.Chain, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// TestTLSTermination: a TERMINATED_HTTPS listener picks its certificate
// by SNI, asks for and checks client certificates against its CAs and
// revocation list, offers h2, inserts the X-SSL headers and HSTS, and its
// requests are routed as HTTP's.
func TestTLSTermination(t *testing.T) { forEngines(t, testTLSTermination) }

func testTLSTermination(t *testing.T) {
	serverCA, clientCA, otherCA := newTestCA(t, "server CA"), newTestCA(t, "client CA"), newTestCA(t, "other CA")
	def := serverCA.issue(t, pkix.Name{CommonName: "www.example"}, false, "www.example")
	sni := serverCA.issue(t, pkix.Name{CommonName: "api"}, false, "*.api.example")
	alice := clientCA.issue(t, pkix.Name{Country: []string{"FR"}, Organization: []string{"Org"}, CommonName: "alice"}, true)
	mallory := clientCA.issue(t, pkix.Name{CommonName: "mallory"}, true)
	stranger := otherCA.issue(t, pkix.Name{CommonName: "stranger"}, true)
	revokedSerial := clientCA.serial // mallory's

	seen := make(chan http.Header, 16)
	m := startMember(t, "m1", func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Strict-Transport-Security", "max-age=1")
	})
	p, lp := startProxy(t)
	cfg := flows.L7{DefaultPool: "p", Pools: []flows.L7Pool{{ID: "p", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}}},
		InsertHeaders: []string{"X-Forwarded-Proto", "X-SSL-Client-Verify", "X-SSL-Client-Has-Cert", "X-SSL-Client-CN", "X-SSL-Client-DN", "X-SSL-Issuer"},
		Policies: []flows.L7Policy{{ID: "certless", Action: flows.L7Reject, Rules: []flows.L7Rule{
			{Type: flows.RuleSSLConnCert, Compare: flows.CompareEqualTo, Value: "tRUe", Invert: true},
			{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/private"}}}},
		TLS: &flows.L7TLS{Certificates: []flows.L7Certificate{def, sni}, ClientAuth: "OPTIONAL", ClientCA: clientCA.pem,
			ClientCRL: clientCA.crl(t, revokedSerial), ALPN: []string{"h2", "http/1.1"}, HSTSMaxAge: 31536000, HSTSIncludeSubdomains: true},
	}
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	at := lp.addr(1).String()
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	client := func(name string, certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name, Certificates: certs}, ForceAttemptHTTP2: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", at)
			}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 5 * time.Second}
	}

	// SNI: each name gets its certificate, others the default; h2 is
	// negotiated; the member sees HTTPS and no client certificate.
	for _, tc := range []struct{ name, cn string }{{"www.example", "www.example"}, {"x.api.example", "api"}, {"unknown.example", "www.example"}} {
		c := client(tc.name)
		if tc.name == "unknown.example" {
			c.Transport.(*http.Transport).TLSClientConfig.InsecureSkipVerify = true
		}
		resp, err := c.Get("https://" + tc.name + "/")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != tc.cn {
			t.Errorf("%s: certificate %s, want %s", tc.name, got, tc.cn)
		}
		if resp.ProtoMajor != 2 {
			t.Errorf("%s: %s, want HTTP/2 through ALPN", tc.name, resp.Proto)
		}
		if got := resp.Header.Values("Strict-Transport-Security"); len(got) != 1 || got[0] != "max-age=31536000; includeSubDomains" {
			t.Errorf("%s: Strict-Transport-Security %q", tc.name, got)
		}
		h := <-seen
		if h.Get("X-Forwarded-Proto") != "https" || h.Get("X-Ssl-Client-Has-Cert") != "0" || h.Get("X-Ssl-Client-Verify") != "0" || h.Get("X-Ssl-Client-Cn") != "" {
			t.Errorf("%s: the member saw %v", tc.name, h)
		}
	}

	// Without a certificate /private is rejected; with alice's it passes,
	// and the member learns who she is.
	anon := client("www.example")
	if resp, err := anon.Get("https://www.example/private/x"); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("without a certificate: %v %v", resp, err)
	}
	resp, err := client("www.example", clientPair(t, alice)).Get("https://www.example/private/x")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("with alice's certificate: %v %v", resp, err)
	}
	resp.Body.Close()
	h := <-seen
	want := map[string]string{"X-Ssl-Client-Has-Cert": "1", "X-Ssl-Client-Verify": "0", "X-Ssl-Client-Cn": `"alice"`,
		"X-Ssl-Client-Dn": `"/C=FR/O=Org/CN=alice"`, "X-Ssl-Issuer": `"/CN=client CA"`}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("%s: %q, want %q", k, h.Get(k), v)
		}
	}

	// A revoked certificate, and one of another CA, end the handshake.
	for name, c := range map[string]flows.L7Certificate{"revoked": mallory, "another CA's": stranger} {
		if _, err := client("www.example", clientPair(t, c)).Get("https://www.example/"); err == nil {
			t.Errorf("a %s certificate was accepted", name)
		}
	}

	// MANDATORY: no certificate, no handshake.
	cfg.TLS.ClientAuth = "MANDATORY"
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client("www.example").Get("https://www.example/"); err == nil {
		t.Error("MANDATORY let a client without a certificate in")
	}
	if resp, err := client("www.example", clientPair(t, alice)).Get("https://www.example/"); err != nil {
		t.Errorf("MANDATORY refused alice: %v", err)
	} else {
		resp.Body.Close()
		<-seen
	}
}

// TestCompileTLSRefuses: what cannot be served is named.
func TestCompileTLSRefuses(t *testing.T) {
	ca := newTestCA(t, "ca")
	a, b := ca.issue(t, pkix.Name{CommonName: "a"}, false, "a"), ca.issue(t, pkix.Name{CommonName: "b"}, false, "b")
	for _, tc := range []struct {
		name string
		tls  flows.L7TLS
		want string
	}{
		{"no certificate", flows.L7TLS{}, "without a certificate"},
		{"a key of another certificate", flows.L7TLS{Certificates: []flows.L7Certificate{{Chain: a.Chain, Key: b.Key}}}, "certificate 1"},
		{"SSLv3", flows.L7TLS{Certificates: []flows.L7Certificate{a}, Versions: []string{"SSLv3"}}, "SSLv3"},
		{"a gap", flows.L7TLS{Certificates: []flows.L7Certificate{a}, Versions: []string{"TLSv1.1", "TLSv1.3"}}, "gap"},
		{"client auth without CA", flows.L7TLS{Certificates: []flows.L7Certificate{a}, ClientAuth: "MANDATORY"}, "without a client CA"},
		{"a CA that is not one", flows.L7TLS{Certificates: []flows.L7Certificate{a}, ClientAuth: "OPTIONAL", ClientCA: []byte("x")}, "no certificate"},
	} {
		if _, err := compileTLS(tc.tls); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if tt, err := compileTLS(flows.L7TLS{Certificates: []flows.L7Certificate{a}, Versions: []string{"TLSv1.3", "TLSv1.2"}, HSTSMaxAge: -1}); err != nil ||
		tt.config.MinVersion != tls.VersionTLS12 || tt.config.MaxVersion != tls.VersionTLS13 || tt.hsts != "" {
		t.Errorf("TLS 1.2 and 1.3 without HSTS: %+v, %v", tt, err)
	}
}
