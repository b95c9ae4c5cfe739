package l7proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

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
	// client offers h2 and HTTP/1.1 by ALPN, or HTTP/1.1 alone: the lean
	// engine serves HTTP/1.1 after the handshake, the net/http engine
	// h2.
	client := func(name string, h2 bool, certs ...tls.Certificate) *http.Client {
		conf := &tls.Config{RootCAs: roots, ServerName: name, Certificates: certs}
		if !h2 {
			conf.NextProtos = []string{"http/1.1"}
		}
		tr := &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: h2,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", at)
			}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 5 * time.Second}
	}
	// The connections of h2 clients that got through the handshake.
	h2Conns := 0

	for _, h2 := range []bool{true, false} {
		wantMajor := 1
		if h2 {
			wantMajor = 2
		}
		// SNI: each name gets its certificate, others the default; h2 is
		// negotiated when offered; the member sees HTTPS and no client
		// certificate, whatever the client claims.
		for _, tc := range []struct{ name, cn string }{{"www.example", "www.example"}, {"x.api.example", "api"}, {"unknown.example", "www.example"}} {
			c := client(tc.name, h2)
			if tc.name == "unknown.example" {
				c.Transport.(*http.Transport).TLSClientConfig.InsecureSkipVerify = true
			}
			req, _ := http.NewRequest(http.MethodGet, "https://"+tc.name+"/", nil)
			req.Header.Set("X-SSL-Client-CN", `"alice"`)
			req.Header.Set("X-Forwarded-Proto", "http")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s (h2 %v): %v", tc.name, h2, err)
			}
			if h2 {
				h2Conns++
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != tc.cn {
				t.Errorf("%s: certificate %s, want %s", tc.name, got, tc.cn)
			}
			if resp.ProtoMajor != wantMajor {
				t.Errorf("%s: %s, want HTTP/%d", tc.name, resp.Proto, wantMajor)
			}
			if got := resp.Header.Values("Strict-Transport-Security"); len(got) != 1 || got[0] != "max-age=31536000; includeSubDomains" {
				t.Errorf("%s: Strict-Transport-Security %q", tc.name, got)
			}
			h := <-seen
			if h.Get("X-Forwarded-Proto") != "https" || h.Get("X-Ssl-Client-Has-Cert") != "0" || h.Get("X-Ssl-Client-Verify") != "0" || h.Values("X-Ssl-Client-Cn") != nil {
				t.Errorf("%s (h2 %v): the member saw %v", tc.name, h2, h)
			}
		}

		// Without a certificate /private is rejected; with alice's it
		// passes, and the member learns who she is.
		if resp, err := client("www.example", h2).Get("https://www.example/private/x"); err != nil || resp.StatusCode != http.StatusForbidden ||
			resp.ProtoMajor != wantMajor || resp.Header.Get("Strict-Transport-Security") != "max-age=31536000; includeSubDomains" {
			t.Errorf("without a certificate (h2 %v): %v %v", h2, resp, err)
		}
		resp, err := client("www.example", h2, clientPair(t, alice)).Get("https://www.example/private/x")
		if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != wantMajor {
			t.Fatalf("with alice's certificate (h2 %v): %v %v", h2, resp, err)
		}
		if h2 {
			h2Conns += 2
		}
		resp.Body.Close()
		h := <-seen
		want := map[string]string{"X-Ssl-Client-Has-Cert": "1", "X-Ssl-Client-Verify": "0", "X-Ssl-Client-Cn": `"alice"`,
			"X-Ssl-Client-Dn": `"/C=FR/O=Org/CN=alice"`, "X-Ssl-Issuer": `"/CN=client CA"`}
		for k, v := range want {
			if h.Get(k) != v {
				t.Errorf("h2 %v: %s: %q, want %q", h2, k, h.Get(k), v)
			}
		}
	}
	// The lean engine handed the h2 connections over after their
	// handshake, and kept the HTTP/1.1 ones.
	if engineOf(t) == EngineLean {
		if h := promtest.ToFloat64(p.m.handoffs); h != float64(h2Conns) {
			t.Errorf("%v connections went to the net/http engine, want the %d of h2", h, h2Conns)
		}
	}

	// A revoked certificate, and one of another CA, end the handshake.
	for name, c := range map[string]flows.L7Certificate{"revoked": mallory, "another CA's": stranger} {
		if _, err := client("www.example", false, clientPair(t, c)).Get("https://www.example/"); err == nil {
			t.Errorf("a %s certificate was accepted", name)
		}
	}

	// MANDATORY: no certificate, no handshake.
	cfg.TLS.ClientAuth = "MANDATORY"
	if err := p.Set(map[uint16]Listener{1: {VIP: vip, Config: cfg}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client("www.example", false).Get("https://www.example/"); err == nil {
		t.Error("MANDATORY let a client without a certificate in")
	}
	if resp, err := client("www.example", false, clientPair(t, alice)).Get("https://www.example/"); err != nil {
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

// TestTLSRequests: on a TERMINATED_HTTPS listener, kept-alive HTTP/1.1
// requests are decided by the rules that read the connection's TLS
// (SSL_CONN_HAS_CERT, SSL_DN_FIELD, SSL_VERIFY_RESULT), carry the X-SSL
// headers and X-Forwarded-Proto to the member in place of the client's
// own, and get the listener's Strict-Transport-Security on every answer,
// the member's and the proxy's own, alike with both engines; the lean
// engine serves them all itself, hands a request it does not take to
// the net/http engine with the connection's TLS state, and an h2
// connection after its handshake.
func TestTLSRequests(t *testing.T) { forEngines(t, testTLSRequests) }

func testTLSRequests(t *testing.T) {
	serverCA, clientCA := newTestCA(t, "server CA"), newTestCA(t, "client CA")
	def := serverCA.issue(t, pkix.Name{CommonName: "www.example"}, false, "www.example")
	alice := clientCA.issue(t, pkix.Name{Country: []string{"FR"}, Organization: []string{"Org"}, CommonName: "alice"}, true)
	alicePair := clientPair(t, alice)
	leaf, err := x509.ParseCertificate(alicePair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(leaf.Raw)
	echoed := []string{"X-Forwarded-Proto", "X-Ssl-Client-Verify", "X-Ssl-Client-Has-Cert", "X-Ssl-Client-Cn", "X-Ssl-Client-Dn",
		"X-Ssl-Issuer", "X-Ssl-Client-Sha1", "X-Ssl-Client-Not-Before", "X-Ssl-Client-Not-After"}
	m := startCountingMember(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", "max-age=1")
		fmt.Fprintf(w, "path=%s\n", r.URL.Path)
		for _, k := range echoed {
			fmt.Fprintf(w, "%s=%s\n", k, strings.Join(r.Header.Values(k), ","))
		}
	})
	p, at := serveOne(t, m.backend(), flows.L7{
		InsertHeaders: []string{"X-Forwarded-Proto", "X-SSL-Client-Verify", "X-SSL-Client-Has-Cert", "X-SSL-Client-CN", "X-SSL-Client-DN",
			"X-SSL-Issuer", "X-SSL-Client-SHA1", "X-SSL-Client-Not-Before", "X-SSL-Client-Not-After"},
		Policies: []flows.L7Policy{
			{ID: "certless", Action: flows.L7Reject, Rules: []flows.L7Rule{
				{Type: flows.RuleSSLConnCert, Compare: flows.CompareEqualTo, Value: "true", Invert: true},
				{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/private"}}},
			{ID: "org", Action: flows.L7RedirectToURL, URL: "https://org.example/", Rules: []flows.L7Rule{
				{Type: flows.RuleSSLDNField, Key: "O", Compare: flows.CompareEqualTo, Value: "Org"},
				{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/who"}}},
			{ID: "verified", Action: flows.L7RedirectPrefix, URL: "https://verified.example", Code: http.StatusMovedPermanently, Rules: []flows.L7Rule{
				{Type: flows.RuleSSLVerify, Compare: flows.CompareEqualTo, Value: "0"},
				{Type: flows.RulePath, Compare: flows.CompareStartsWith, Value: "/verify"}}},
		},
		TLS: &flows.L7TLS{Certificates: []flows.L7Certificate{def}, ClientAuth: "OPTIONAL", ClientCA: clientCA.pem,
			ALPN: []string{"h2", "http/1.1"}, HSTSMaxAge: 600, HSTSPreload: true},
	})
	const hsts = "max-age=600; preload"
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	dial := func(certs ...tls.Certificate) (*tls.Conn, *bufio.Reader) {
		t.Helper()
		c, err := tls.Dial("tcp", at, &tls.Config{RootCAs: roots, ServerName: "www.example", Certificates: certs, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	fields := func(body string) map[string]string {
		out := map[string]string{}
		for line := range strings.SplitSeq(body, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				out[k] = v
			}
		}
		return out
	}
	aliceHeaders := map[string]string{"X-Forwarded-Proto": "https", "X-Ssl-Client-Verify": "0", "X-Ssl-Client-Has-Cert": "1",
		"X-Ssl-Client-Cn": `"alice"`, "X-Ssl-Client-Dn": `"/C=FR/O=Org/CN=alice"`, "X-Ssl-Issuer": `"/CN=client CA"`,
		"X-Ssl-Client-Sha1":       `"` + strings.ToUpper(hex.EncodeToString(sum[:])) + `"`,
		"X-Ssl-Client-Not-Before": `"` + leaf.NotBefore.UTC().Format("060102150405") + `Z"`,
		"X-Ssl-Client-Not-After":  `"` + leaf.NotAfter.UTC().Format("060102150405") + `Z"`}
	anonHeaders := map[string]string{"X-Forwarded-Proto": "https", "X-Ssl-Client-Verify": "0", "X-Ssl-Client-Has-Cert": "0",
		"X-Ssl-Client-Cn": "", "X-Ssl-Client-Dn": "", "X-Ssl-Issuer": "", "X-Ssl-Client-Sha1": "", "X-Ssl-Client-Not-Before": "",
		"X-Ssl-Client-Not-After": ""}
	type exchange struct {
		req      string
		status   int
		location string
		// member: the headers the member saw (nil: the proxy answered).
		member map[string]string
	}
	// What a client claims of itself in headers reaches no member.
	const spoof = "X-SSL-Client-CN: \"mallory\"\r\nX-SSL-Client-Has-Cert: 1\r\nX-Forwarded-Proto: http\r\n"
	run := func(name string, c *tls.Conn, br *bufio.Reader, exchanges []exchange) {
		t.Helper()
		for _, x := range exchanges {
			io.WriteString(c, x.req)
			resp, body := readAnswer(t, br, "GET")
			if resp.StatusCode != x.status || resp.Header.Get("Location") != x.location {
				t.Errorf("%s: %q: %d to %q, want %d to %q", name, x.req, resp.StatusCode, resp.Header.Get("Location"), x.status, x.location)
			}
			if got := resp.Header.Values("Strict-Transport-Security"); len(got) != 1 || got[0] != hsts {
				t.Errorf("%s: %q: Strict-Transport-Security %q, want %q", name, x.req, got, hsts)
			}
			got := fields(body)
			for k, v := range x.member {
				if got[k] != v {
					t.Errorf("%s: %q: the member saw %s %q, want %q", name, x.req, k, got[k], v)
				}
			}
		}
	}
	handoffs := func(want float64) {
		t.Helper()
		if engineOf(t) != EngineLean {
			return
		}
		if h := promtest.ToFloat64(p.m.handoffs); h != want {
			t.Fatalf("%v connections went to the net/http engine, want %v", h, want)
		}
	}

	anon, anonBR := dial()
	run("without a certificate", anon, anonBR, []exchange{
		{"GET /private/x HTTP/1.1\r\nHost: www.example\r\n\r\n", http.StatusForbidden, "", nil},
		{"GET /who HTTP/1.1\r\nHost: www.example\r\n" + spoof + "\r\n", 200, "", anonHeaders},
		{"GET /verify/a?b=1 HTTP/1.1\r\nHost: www.example\r\n\r\n", http.StatusMovedPermanently, "https://verified.example/verify/a?b=1", nil},
		{"GET /x HTTP/1.1\r\nHost: www.example\r\n" + spoof + "\r\n", 200, "", anonHeaders},
	})
	ac, acBR := dial(alicePair)
	run("alice", ac, acBR, []exchange{
		{"GET /private/x HTTP/1.1\r\nHost: www.example\r\n" + spoof + "\r\n", 200, "", aliceHeaders},
		{"GET /who HTTP/1.1\r\nHost: www.example\r\n\r\n", http.StatusFound, "https://org.example/", nil},
		{"GET /verify/a?b=1 HTTP/1.1\r\nHost: www.example\r\n\r\n", http.StatusMovedPermanently, "https://verified.example/verify/a?b=1", nil},
	})
	handoffs(0)
	// A target in absolute form is the net/http engine's to answer, on
	// the same connection: the rules, headers and HSTS as before.
	run("alice, handed over", ac, acBR, []exchange{
		{"GET https://www.example/private/y HTTP/1.1\r\nHost: www.example\r\n" + spoof + "\r\n", 200, "", aliceHeaders},
		{"GET /who HTTP/1.1\r\nHost: www.example\r\n\r\n", http.StatusFound, "https://org.example/", nil},
		{"GET /private/z HTTP/1.1\r\nHost: www.example\r\n\r\n", 200, "", aliceHeaders},
	})
	handoffs(1)
	if n := m.conns.Load(); engineOf(t) == EngineLean && n > 3 {
		t.Errorf("%d member connections for requests one after another", n)
	}

	// h2 is the net/http engine's.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "www.example", Certificates: []tls.Certificate{alicePair}},
		ForceAttemptHTTP2: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", at)
		}}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://www.example/private/h2")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || resp.Header.Get("Strict-Transport-Security") != hsts || fields(string(body))["X-Ssl-Client-Cn"] != `"alice"` {
		t.Errorf("h2: %s %d %v %q", resp.Proto, resp.StatusCode, resp.Header, body)
	}
	handoffs(2)

	// Plain HTTP on the TLS port is answered as net/http's server does.
	c, br := dialRaw(t, at)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: www.example\r\n\r\n")
	if resp, body := readAnswer(t, br, "GET"); resp.StatusCode != http.StatusBadRequest || body != "Client sent an HTTP request to an HTTPS server.\n" {
		t.Errorf("plain HTTP on the TLS port: %d %q", resp.StatusCode, body)
	}
}
