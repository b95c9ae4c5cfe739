package lab

// The API's TLS in the lab: a CA of the lab's own and one certificate for
// every address a flowlb server of the lab serves its API on (the fabric's
// control address, every server host, loopback), so that the lab's servers
// and replicas run with --tls-cert and --tls-key and its clients trust
// the CA (docs/lab.md, "TLS").

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/flowlb/flowlb/internal/shared/pki"
)

// APITLS are the files of the API's TLS in the lab's directory.
type APITLS struct {
	// CACert is what clients trust (the openstack CLI's --os-cacert, the
	// kube-controller's --octavia-ca-file).
	CACert string
	// Cert and Key are the servers' --tls-cert and --tls-key.
	Cert, Key string
}

// apiCertLifetime outlives any lab.
const apiCertLifetime = 30 * 24 * time.Hour

// APIAddrs are the addresses a lab's servers serve the API on.
func APIAddrs() []net.IP {
	ips := []net.IP{net.IP(ControlAddr.AsSlice()), net.IPv4(127, 0, 0, 1)}
	for k := 1; k <= MaxServers; k++ {
		ips = append(ips, net.IP(ServerAddr(k).AsSlice()))
	}
	return ips
}

// APITLS makes the API's CA and certificate once, in the lab's directory.
func (l *Lab) APITLS() (APITLS, error) {
	f := APITLS{CACert: filepath.Join(l.dir, "api-ca.crt"), Cert: filepath.Join(l.dir, "api.crt"), Key: filepath.Join(l.dir, "api.key")}
	if _, err := os.Stat(f.Cert); err == nil {
		return f, nil
	}
	ca, err := pki.LoadOrCreateCA(f.CACert, filepath.Join(l.dir, "api-ca.key"))
	if err != nil {
		return f, fmt.Errorf("the API's CA: %w", err)
	}
	certPEM, keyPEM, err := ca.IssueServerCert("flowlb API", APIAddrs(), []string{"localhost"}, apiCertLifetime)
	if err != nil {
		return f, fmt.Errorf("the API's certificate: %w", err)
	}
	// The key first: a server never finds a certificate without it.
	if err := pki.WriteFiles(map[string][]byte{f.Key: keyPEM}); err != nil {
		return f, err
	}
	return f, pki.WriteFiles(map[string][]byte{f.Cert: certPEM})
}

// APIRoots is a pool with the API's CA, for the lab's clients.
func (l *Lab) APIRoots() (*x509.CertPool, error) {
	f, err := l.APITLS()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(f.CACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", f.CACert)
	}
	return pool, nil
}

// APIClient is an HTTP client of the lab's API: it trusts the API's CA
// and dials through dial (a host's namespace).
func (l *Lab) APIClient(dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) (*http.Client, error) {
	roots, err := l.APIRoots()
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: roots}}}, nil
}

// APIURL is the base URL of an API served at addr in the lab.
func APIURL(addr netip.AddrPort) string { return "https://" + addr.String() }
