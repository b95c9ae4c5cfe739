package agent

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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
	"github.com/flowlb/flowlb/internal/shared/pki"
)

// Identity is the node's TLS identity towards the server replicas: a key
// and certificate kept in a directory, asked for once with the bootstrap
// token and renewed with the certificate itself before it expires. The
// replicas are trusted when they hold a server identity from the CA.
type Identity struct {
	dir   string
	roots *x509.CertPool
	// sessions are its TLS sessions with the replicas, resumed on any
	// replica after a reconnect.
	sessions *pki.Sessions

	mu  sync.Mutex
	cur *tls.Certificate
	// pending is the key of an enrollment with the token not yet
	// answered: asked for again, the server recognises the node (the
	// name is bound to the identity last issued, whose answer may have
	// been lost).
	pending crypto.Signer
}

const (
	identityKeyFile  = "node.key"
	identityCertFile = "node.crt"
	// enrollKeyFile keeps the pending key over a restart.
	enrollKeyFile = "enroll.key"
)

// LoadIdentity reads the CA the replicas' identities come from and the
// node's identity from dir, if there is one; the directory is created. An
// identity that does not load is reported in unusable and replaced by
// enrolling again with the token, which the servers refuse while the
// identity they last issued to the node is valid.
func LoadIdentity(dir string, caPEM []byte) (id *Identity, unusable error, err error) {
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	id = &Identity{dir: dir, roots: x509.NewCertPool(), sessions: pki.NewSessions()}
	id.roots.AddCert(ca)
	certFile, keyFile := filepath.Join(dir, identityCertFile), filepath.Join(dir, identityKeyFile)
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		// A store stopped between its two renames left the new key
		// beside the old certificate, and the new certificate whole
		// in its temporary file: finish it.
		if fixed, ferr := tls.LoadX509KeyPair(certFile+".tmp", keyFile); ferr == nil {
			if ferr = os.Rename(certFile+".tmp", certFile); ferr == nil {
				c, err = fixed, nil
			}
		}
	}
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
	return credentials.NewTLS(pki.ClientTLS(id.roots, id.presentable, id.sessions))
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
	withToken := !id.usable(node, time.Now())
	var key crypto.Signer
	var err error
	if withToken {
		key, err = id.pendingKey()
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return err
	}
	csr, err := pki.NodeRequest(key, node)
	if err != nil {
		return err
	}
	if withToken {
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
	if withToken {
		id.pending = nil
	}
	id.mu.Unlock()
	if withToken {
		if err := os.Remove(filepath.Join(id.dir, enrollKeyFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// pendingKey is the key to enroll with the token: the one an earlier
// attempt asked for (in memory, or kept in enroll.key over a restart),
// else a new one, kept before it is sent.
func (id *Identity) pendingKey() (crypto.Signer, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.pending != nil {
		return id.pending, nil
	}
	path := filepath.Join(id.dir, enrollKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		if key, err := pki.ParseKeyPEM(b); err == nil {
			id.pending = key
			return key, nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	if err := writeSynced(path, keyPEM); err != nil {
		return nil, err
	}
	id.pending = key
	return key, nil
}

// store writes the key and certificate: both whole in temporary files
// first, then each renamed over the old, the key first. A stop between
// the renames leaves the new key beside the old certificate and the new
// certificate in its temporary file, which LoadIdentity then renames.
func (id *Identity) store(keyPEM, certPEM []byte) error {
	files := []struct {
		name string
		data []byte
	}{{identityKeyFile, keyPEM}, {identityCertFile, certPEM}}
	for _, f := range files {
		if err := writeSynced(filepath.Join(id.dir, f.name+".tmp"), f.data); err != nil {
			return err
		}
	}
	for _, f := range files {
		path := filepath.Join(id.dir, f.name)
		if err := os.Rename(path+".tmp", path); err != nil {
			return err
		}
	}
	return syncDir(id.dir)
}

// writeSynced writes a file readable by its owner only and flushes it to
// the disk: the server binds the node's name to what it issues, so that
// a node that loses its identity cannot enroll again at once.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir flushes a directory's entries (the renames into it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
