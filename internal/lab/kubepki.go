package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// keyPair is a certificate (or, for the service-account key, a public
// key) and its private key, in memory and as PEM files.
type keyPair struct {
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	certPEM  []byte
	keyPEM   []byte
	certFile string
	keyFile  string
}

// kubePKI is everything the lab's control plane authenticates with: one
// CA for serving and client certificates, and the key that signs
// service-account tokens. It lives as long as the lab (a tmpfs state
// directory), so it is made fresh by every `lab up`.
type kubePKI struct {
	ca         keyPair
	serving    keyPair // kube-apiserver
	admin      keyPair // system:masters: kubectl, tests
	controller keyPair // system:kube-controller-manager
	kubelet    keyPair // the lab kubelet (system:masters: it is every node and the scheduler)
	sa         keyPair // service-account token signing key; certFile holds the public key
	// With real nodes: the API server's client certificate towards the
	// kubelets, the scheduler's, and each node's (system:node:nI, for
	// the Node authorizer), by node name.
	apiKubelet keyPair
	scheduler  keyPair
	nodes      map[string]keyPair
}

// KubeAdminUser is the admin's user name; its group is system:masters.
const KubeAdminUser = "flowlb-lab-admin"

// kubeAPISANs are the names and addresses the API server's certificate is
// valid for: its loopback (forwarded or not), the control address, the
// kubernetes service's cluster IP and the service's DNS names.
func kubeAPISANs() (dns []string, ips []net.IP) {
	first := KubeServiceCIDR.Addr().Next()
	return []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), ControlAddr.AsSlice(), first.AsSlice()}
}

// newKubePKI makes the lab's certificates in dir; nodes, if any, are the
// names of real nodes, which get an identity each.
func newKubePKI(dir string, nodes ...string) (*kubePKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &kubePKI{}
	var err error
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "flowlb-lab-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if p.ca, err = issue(dir, "ca", caTmpl, nil); err != nil {
		return nil, err
	}
	dns, ips := kubeAPISANs()
	leaf := func(cn string, orgs []string, usage x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn, Organization: orgs},
			NotBefore:   now,
			NotAfter:    now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
	}
	serving := leaf("kube-apiserver", nil, x509.ExtKeyUsageServerAuth)
	serving.DNSNames, serving.IPAddresses = dns, ips
	if p.serving, err = issue(dir, "apiserver", serving, &p.ca); err != nil {
		return nil, err
	}
	type client struct {
		dst      *keyPair
		file, cn string
		orgs     []string
	}
	clients := []client{
		{&p.admin, "admin", KubeAdminUser, []string{"system:masters"}},
		{&p.controller, "controller-manager", "system:kube-controller-manager", nil},
		{&p.kubelet, "kubelet", "flowlb-lab-kubelet", []string{"system:masters"}},
	}
	if len(nodes) > 0 {
		p.nodes = map[string]keyPair{}
		clients = append(clients,
			client{&p.apiKubelet, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", nil},
			client{&p.scheduler, "scheduler", "system:kube-scheduler", nil})
	}
	for _, c := range clients {
		if *c.dst, err = issue(dir, c.file, leaf(c.cn, c.orgs, x509.ExtKeyUsageClientAuth), &p.ca); err != nil {
			return nil, err
		}
	}
	for _, n := range nodes {
		kp, err := issue(dir, "node-"+n, leaf("system:node:"+n, []string{"system:nodes"}, x509.ExtKeyUsageClientAuth), &p.ca)
		if err != nil {
			return nil, err
		}
		p.nodes[n] = kp
	}
	if p.sa, err = saKey(dir); err != nil {
		return nil, err
	}
	return p, nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// issue makes a key and a certificate from tmpl signed by parent (self-
// signed if nil) and writes NAME.crt and NAME.key into dir.
func issue(dir, name string, tmpl *x509.Certificate, parent *keyPair) (keyPair, error) {
	k, keyPEM, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return keyPair{}, err
	}
	tmpl.SerialNumber = serial
	signer, signerKey := tmpl, k
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &k.PublicKey, signerKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("certificate %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	kp := keyPair{cert: cert, key: k, keyPEM: keyPEM,
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		certFile: filepath.Join(dir, name+".crt"), keyFile: filepath.Join(dir, name+".key")}
	return kp, kp.write()
}

// saKey makes the service-account signing key: sa.key and its public key
// sa.pub.
func saKey(dir string) (keyPair, error) {
	k, keyPEM, err := newKey()
	if err != nil {
		return keyPair{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return keyPair{}, err
	}
	kp := keyPair{key: k, keyPEM: keyPEM, certPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		certFile: filepath.Join(dir, "sa.pub"), keyFile: filepath.Join(dir, "sa.key")}
	return kp, kp.write()
}

func (kp keyPair) write() error {
	if err := os.WriteFile(kp.certFile, kp.certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(kp.keyFile, kp.keyPEM, 0o600)
}

// clientTLS is a TLS configuration that trusts the lab CA and presents
// cred.
func (p *kubePKI) clientTLS(cred keyPair) (*tls.Config, error) {
	c, err := tls.X509KeyPair(cred.certPEM, cred.keyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.cert)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}, nil
}

// writeKubeconfig writes a self-contained kubeconfig (certificates
// inline) for server with client credentials cred.
func writeKubeconfig(path, cluster, server string, ca *x509.Certificate, cred keyPair) error {
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	user := cred.cert.Subject.CommonName
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
users:
- name: %[4]s
  user:
    client-certificate-data: %[5]s
    client-key-data: %[6]s
contexts:
- name: %[1]s
  context:
    cluster: %[1]s
    user: %[4]s
current-context: %[1]s
`, cluster, server, b64(caPEM), user, b64(cred.certPEM), b64(cred.keyPEM))
	return os.WriteFile(path, []byte(b.String()), 0o600)
}
