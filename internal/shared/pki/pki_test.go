package pki

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadOrCreateCA(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	a, err := LoadOrCreateCA(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(key)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st.Mode(), err)
	}
	b, err := LoadOrCreateCA(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Cert.Equal(b.Cert) {
		t.Fatal("a second load made another CA")
	}
	// Half a pair is refused, not replaced.
	os.Remove(key)
	if _, err := LoadOrCreateCA(cert, key); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("half a pair: %v", err)
	}
	// A key of another CA is refused.
	_, otherKey, _ := NewCA("other")
	os.WriteFile(key, otherKey, 0o600)
	if _, err := LoadOrCreateCA(cert, key); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Fatalf("mismatched pair: %v", err)
	}
}

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, _, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestSignNode(t *testing.T) {
	ca := newCA(t)
	_, csr, err := NewNodeRequest("n1")
	if err != nil {
		t.Fatal(err)
	}
	der, err := ca.SignNode(csr, "n1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	role, name, err := Identity(cert)
	if role != RoleNode || name != "n1" || err != nil {
		t.Fatalf("identity %s %s %v", role, name, err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("a node's certificate must verify for client auth: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("a node's certificate must not serve as a server's")
	}

	for _, tc := range []struct {
		name, reqNode, node string
		corrupt             bool
		want                string
	}{
		{"another node's request", "n2", "n1", false, "names"},
		{"a bad name", "n 1", "n 1", false, "not allowed"},
		{"a corrupt request", "n1", "n1", true, "certificate request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := csr
			if tc.reqNode != "n1" {
				_, req, _ = NewNodeRequest(strings.ReplaceAll(tc.reqNode, " ", "-"))
			}
			if tc.corrupt {
				req = append([]byte(nil), req...)
				req[len(req)-3] ^= 0xff
			}
			if _, err := ca.SignNode(req, tc.node, time.Hour); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestNeedsRenewal(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Issued at start for 3 h, backdated as issue does.
	c := &x509.Certificate{NotBefore: start.Add(-clockSkew), NotAfter: start.Add(3 * time.Hour)}
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{-clockSkew - time.Minute, true}, {-time.Minute, false}, {0, false}, {119 * time.Minute, false}, {121 * time.Minute, true}, {4 * time.Hour, true}} {
		if got := NeedsRenewal(c, start.Add(tc.at)); got != tc.want {
			t.Errorf("at %v: %v, want %v", tc.at, got, tc.want)
		}
	}
}

// handshake runs a TLS handshake between the two configs over loopback
// and returns the server's view of it and each side's error.
func handshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type result struct {
		cs  tls.ConnectionState
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		srv := tls.Server(c, server)
		err = srv.HandshakeContext(ctx)
		done <- result{srv.ConnectionState(), err}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cli := tls.Client(raw, client)
	cerr := cli.HandshakeContext(ctx)
	if cerr == nil {
		// TLS 1.3: the server checks the client's certificate after the
		// client is done; a read brings its verdict.
		raw.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = cli.Read(make([]byte, 1))
	}
	r := <-done
	return r.cs, r.err, cerr
}

func nodeCert(t *testing.T, ca *CA, node string) *tls.Certificate {
	t.Helper()
	key, csr, err := NewNodeRequest(node)
	if err != nil {
		t.Fatal(err)
	}
	der, err := ca.SignNode(csr, node, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestHandshakes(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	srv, err := ServerTLS(ca, "replica-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	n1 := nodeCert(t, ca, "n1")

	// A node with its identity: the server reads the name.
	cs, serr, cerr := handshake(t, srv, ClientTLS(ca.Pool(), func() *tls.Certificate { return n1 }, nil))
	if serr != nil || cerr != nil {
		t.Fatalf("handshake: %v / %v", serr, cerr)
	}
	if name, err := VerifyPeer(cs, ca.Pool(), RoleNode); name != "n1" || err != nil {
		t.Fatalf("peer %q %v", name, err)
	}

	// Enrollment: no identity yet; the handshake holds, the peer has none.
	cs, serr, cerr = handshake(t, srv, ClientTLS(ca.Pool(), func() *tls.Certificate { return nil }, nil))
	if serr != nil || cerr != nil {
		t.Fatalf("handshake without identity: %v / %v", serr, cerr)
	}
	if _, err := VerifyPeer(cs, ca.Pool(), RoleNode); err == nil {
		t.Fatal("no certificate must not pass as a node")
	}

	// A node of another CA is refused by the server.
	stranger := nodeCert(t, other, "n1")
	if _, serr, _ = handshake(t, srv, ClientTLS(ca.Pool(), func() *tls.Certificate { return stranger }, nil)); serr == nil {
		t.Fatal("a certificate of another CA was accepted")
	}

	// A server of another CA is refused by the node.
	fake, _ := ServerTLS(other, "replica-x", time.Hour)
	if _, _, cerr = handshake(t, fake, ClientTLS(ca.Pool(), func() *tls.Certificate { return n1 }, nil)); cerr == nil {
		t.Fatal("a server of another CA was trusted")
	}

	// A node's identity cannot serve as a server's: a replica that
	// presents a node certificate is refused.
	impostor := &tls.Config{Certificates: []tls.Certificate{*n1}, MinVersion: tls.VersionTLS13}
	if _, _, cerr = handshake(t, impostor, ClientTLS(ca.Pool(), func() *tls.Certificate { return n1 }, nil)); cerr == nil {
		t.Fatal("a node certificate was trusted as a server")
	}
}

func TestServingCertRenewed(t *testing.T) {
	ca := newCA(t)
	s := &servingCert{issue: func(pub crypto.PublicKey) ([]byte, error) { return ca.issue(pub, RoleServer, "a", time.Hour) }}
	now := time.Now()
	first, err := s.get(now)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.get(now.Add(39 * time.Minute)); again != first {
		t.Fatal("renewed before two thirds of its life")
	}
	if later, _ := s.get(now.Add(41 * time.Minute)); later == first {
		t.Fatal("not renewed after two thirds of its life")
	}
}

func TestFileCertificateReloads(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(name string) {
		ca, keyPEM, err := NewCA(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFiles(map[string][]byte{certFile: ca.PEM, keyFile: keyPEM}); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	f, err := LoadFileCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var loadErr error
	f.OnError = func(err error) { loadErr = err }
	name := func(at time.Time) string {
		c := f.current(at)
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		return leaf.Subject.CommonName
	}
	now := time.Now()
	if got := name(now); got != "first" {
		t.Fatal(got)
	}
	write("second")
	later := now.Add(2 * reloadCheck)
	if got := name(later); got != "second" {
		t.Fatalf("after rotation: %s", got)
	}
	// A broken pair keeps the previous one in service.
	os.WriteFile(keyFile, []byte("garbage"), 0o600)
	if got := name(later.Add(2 * reloadCheck)); got != "second" || loadErr == nil {
		t.Fatalf("with a broken key: %s, error %v", got, loadErr)
	}
}

func TestIssueServerCert(t *testing.T) {
	ca := newCA(t)
	certPEM, keyPEM, err := ca.IssueServerCert("api", []net.IP{net.IPv4(198, 18, 0, 250)}, []string{"api.lab"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, host := range []string{"198.18.0.250", "api.lab"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "198.18.0.251"}); err == nil {
		t.Error("an address not in the certificate verified")
	}
}

// The API's own certificate: the names and addresses asked for, from the
// CA, for the server side only, and a new one past two thirds of its life.
func TestAPITLS(t *testing.T) {
	ca := newCA(t)
	if _, err := APITLS(ca, nil, time.Hour); err == nil {
		t.Fatal("no host names accepted")
	}
	cfg, err := APITLS(ca, []string{"flowlb-server.flowlb-system.svc", "198.18.0.1", "2001:2::1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := cfg.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	for _, host := range []string{"flowlb-server.flowlb-system.svc", "198.18.0.1", "2001:2::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	for _, host := range []string{"flowlb-server", "198.18.0.2"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host}); err == nil {
			t.Errorf("%s, not asked for, verified", host)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: newCA(t).Pool(), DNSName: "198.18.0.1"}); err == nil {
		t.Error("verified against another CA")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("usable as a client identity")
	}
	if got := Lifetime(leaf); got != time.Hour {
		t.Errorf("lifetime %v, want 1h", got)
	}

	s := &servingCert{issue: func(pub crypto.PublicKey) ([]byte, error) {
		return ca.issueHost(pub, "api", nil, []string{"api"}, time.Hour)
	}}
	now := time.Now()
	first, err := s.get(now)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.get(now.Add(39 * time.Minute)); again != first {
		t.Fatal("renewed before two thirds of its life")
	}
	later, _ := s.get(now.Add(41 * time.Minute))
	if later == first || later.Leaf.DNSNames[0] != "api" || later.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("not renewed after two thirds of its life")
	}
}
