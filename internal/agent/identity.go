package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/pki"
)

// Identity is the node's TLS identity towards the server replicas: a key
// and certificate kept in a directory, asked for once with the bootstrap
// token and renewed with the certificate itself before it expires. The
// replicas are trusted when they hold a server identity from the CA.
type Identity struct {
	dir   string
	roots *x509.CertPool

	mu  sync.Mutex
	cur *tls.Certificate
}

const (
	identityKeyFile  = "node.key"
	identityCertFile = "node.crt"
)

// LoadIdentity reads the CA the replicas' identities come from and the
// node's identity from dir, if there is one; the directory is created. An
// identity that does not load (a crash while it was renewed) is reported
// in unusable and replaced by enrolling again.
func LoadIdentity(dir string, caPEM []byte) (id *Identity, unusable error, err error) {
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	id = &Identity{dir: dir, roots: x509.NewCertPool()}
	id.roots.AddCert(ca)
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, identityCertFile), filepath.Join(dir, identityKeyFile))
	switch {
	case err == nil:
		id.cur = &c
	case errors.Is(err, os.ErrNotExist):
	default:
		unusable = fmt.Errorf("node identity in %s: %w", dir, err)
	}
	return id, unusable, nil
}

// current is the node's certificate, nil before enrollment.
func (id *Identity) current() *tls.Certificate {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.cur
}

// credentials are the TLS of a connection to a replica.
func (id *Identity) credentials() credentials.TransportCredentials {
	return credentials.NewTLS(pki.ClientTLS(id.roots, id.presentable))
}

// presentable is the certificate to show a replica: none once expired (or
// not yet valid), since a replica refuses the handshake of an expired one
// and the node must be able to enroll again with its token.
func (id *Identity) presentable() *tls.Certificate {
	c := id.current()
	now := time.Now()
	if c == nil || c.Leaf == nil || now.After(c.Leaf.NotAfter) || now.Before(c.Leaf.NotBefore) {
		return nil
	}
	return c
}

// usable reports whether the identity can authenticate node now.
func (id *Identity) usable(node string, now time.Time) bool {
	c := id.current()
	if c == nil || c.Leaf == nil || now.After(c.Leaf.NotAfter) {
		return false
	}
	role, name, err := pki.Identity(c.Leaf)
	return err == nil && role == pki.RoleNode && name == node
}

// due reports whether the identity should be renewed now.
func (id *Identity) due(now time.Time) bool {
	c := id.current()
	return c == nil || c.Leaf == nil || pki.NeedsRenewal(c.Leaf, now)
}

// enroll asks the replica on conn for a new identity, with the bootstrap
// token if the node has no usable one, and keeps it.
func (id *Identity) enroll(ctx context.Context, conn *grpc.ClientConn, node, token string) error {
	key, csr, err := pki.NewNodeRequest(node)
	if err != nil {
		return err
	}
	if !id.usable(node, time.Now()) {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	resp, err := agentv1.NewAgentClient(conn).Enroll(ctx, &agentv1.EnrollRequest{Node: node, CertificateRequest: csr})
	if err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	leaf, err := x509.ParseCertificate(resp.GetCertificate())
	if err != nil {
		return fmt.Errorf("enroll: the issued certificate: %w", err)
	}
	if role, name, err := pki.Identity(leaf); err != nil || role != pki.RoleNode || name != node {
		return fmt.Errorf("enroll: issued an identity for %s %q (%v), not node %q", role, name, err, node)
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return err
	}
	if err := id.store(keyPEM, pki.CertPEM(leaf.Raw)); err != nil {
		return err
	}
	id.mu.Lock()
	id.cur = &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	id.mu.Unlock()
	return nil
}

// store writes the key and certificate, each through a rename, the key
// first: a crash between leaves a pair that does not load, and the node
// enrolls again with its token.
func (id *Identity) store(keyPEM, certPEM []byte) error {
	for _, f := range []struct {
		name string
		data []byte
	}{{identityKeyFile, keyPEM}, {identityCertFile, certPEM}} {
		path := filepath.Join(id.dir, f.name)
		if err := os.WriteFile(path+".tmp", f.data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return err
		}
	}
	return nil
}
