package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"context"

	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/shared/pki"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// apiCert writes a certificate for 127.0.0.1 named cn, signed by a new CA,
// and returns the CA's pool.
func apiCert(t *testing.T, certFile, keyFile, cn string) *x509.CertPool {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn + " CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.KeyPEM(key)
	// The key first, as an operator's tooling would replace a pair.
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pki.CertPEM(der), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool
}

// servedName is the common name of the certificate the API serves, over
// a new connection trusting roots.
func servedName(s *server.Server, roots *x509.CertPool) (string, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
	resp, err := c.Get("https://" + s.APIAddr.String() + "/healthcheck")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.TLS.PeerCertificates[0].Subject.CommonName, nil
}

// The API serves TLS from files, and a renewed certificate is served
// without a restart while connections made before go on.
func TestAPIOverTLSRotates(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	first := apiCert(t, certFile, keyFile, "first")
	s, err := server.Start(context.Background(), server.Options{Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", DataDir: dir,
		DefaultProject: "p1", VIPCIDR: "198.19.0.0/24", TLSCert: certFile, TLSKey: keyFile}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Crash()
	if name, err := servedName(s, first); name != "first" || err != nil {
		t.Fatalf("served %q, %v", name, err)
	}
	// Plain HTTP is not answered as if it were.
	if resp, err := http.Get("http://" + s.APIAddr.String() + "/healthcheck"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was served")
		}
	}
	// A connection opened before the rotation.
	kept := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: first}}}
	get := func() error {
		resp, err := kept.Get("https://" + s.APIAddr.String() + "/healthcheck")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}

	second := apiCert(t, certFile, keyFile, "second")
	testutil.Eventually(t, 5*time.Second, "the renewed certificate served", func() (bool, string) {
		name, err := servedName(s, second)
		if err != nil {
			return false, err.Error()
		}
		return name == "second", name
	})
	if err := get(); err != nil {
		t.Fatalf("a connection from before the rotation: %v", err)
	}

	// Half a pair is refused at start.
	if _, err := server.Start(context.Background(), server.Options{Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", DataDir: t.TempDir(),
		TLSCert: certFile}, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("--tls-cert without --tls-key was accepted")
	}
}

// With --tls-hosts the API serves a certificate it issues from the
// agents' CA: clients trusting that CA verify it for the hosts asked
// for, and plain HTTP is not served.
func TestAPIOverTLSFromAgentCA(t *testing.T) {
	dir := t.TempDir()
	s, err := server.Start(context.Background(), server.Options{Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", DataDir: dir,
		DefaultProject: "p1", VIPCIDR: "198.19.0.0/24", TLSHosts: []string{"127.0.0.1", "flowlb-server.flowlb-system.svc"}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Crash()
	caPEM, err := os.ReadFile(filepath.Join(dir, "agent-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate")
	}
	if name, err := servedName(s, roots); name != "flowlb API" || err != nil {
		t.Fatalf("served %q, %v", name, err)
	}
	// The name the manifests' clients dial, at the same address.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "flowlb-server.flowlb-system.svc"}}}
	resp, err := c.Get("https://" + s.APIAddr.String() + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := servedName(s, x509.NewCertPool()); err == nil {
		t.Fatal("verified without the agents' CA")
	}
	if resp, err := http.Get("http://" + s.APIAddr.String() + "/healthcheck"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was served")
		}
	}

	if _, err := server.Start(context.Background(), server.Options{Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", DataDir: t.TempDir(),
		TLSCert: "a.crt", TLSKey: "a.key", TLSHosts: []string{"127.0.0.1"}}, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("--tls-cert with --tls-hosts was accepted")
	}
}
