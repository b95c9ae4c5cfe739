package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/pki"
)

// enroller answers Enroll from a CA, failing the first fail calls as if
// their answers were lost, and records each request's key and whether
// it came with the token.
type enroller struct {
	agentv1.UnimplementedAgentServer
	ca *pki.CA

	mu        sync.Mutex
	fail      int
	keys      []string
	withToken []bool
}

func (e *enroller) Enroll(ctx context.Context, req *agentv1.EnrollRequest) (*agentv1.EnrollResponse, error) {
	csr, err := x509.ParseCertificateRequest(req.GetCertificateRequest())
	if err != nil {
		return nil, err
	}
	key, _ := pki.KeyID(csr.PublicKey)
	md, _ := metadata.FromIncomingContext(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keys = append(e.keys, key)
	e.withToken = append(e.withToken, len(md.Get("authorization")) > 0)
	if e.fail > 0 {
		e.fail--
		return nil, status.Error(codes.DeadlineExceeded, "answer lost")
	}
	der, err := e.ca.SignNode(req.GetCertificateRequest(), req.GetNode(), time.Hour)
	return &agentv1.EnrollResponse{Certificate: der}, err
}

func startEnroller(t *testing.T, e *enroller) *grpc.ClientConn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServer(srv, e)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestEnrollKeepsItsKey: an enrollment with the token whose answer is
// lost is asked for again with the same key, also after a restart of the
// agent (the server binds the name to the identity it issued, and knows
// the node by that key); a renewal asks for a new key.
func TestEnrollKeepsItsKey(t *testing.T) {
	ca, _, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	e := &enroller{ca: ca, fail: 2}
	conn := startEnroller(t, e)
	dir := t.TempDir()
	ctx := context.Background()
	id, _, err := LoadIdentity(dir, ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.enroll(ctx, conn, "n1", "token"); err == nil {
		t.Fatal("the lost answer was taken")
	}
	// The agent restarts.
	if id, _, err = LoadIdentity(dir, ca.PEM); err != nil {
		t.Fatal(err)
	}
	if err := id.enroll(ctx, conn, "n1", "token"); err == nil {
		t.Fatal("the lost answer was taken")
	}
	if err := id.enroll(ctx, conn, "n1", "token"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, enrollKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pending key outlived the enrollment: %v", err)
	}
	if err := id.enroll(ctx, conn, "n1", "token"); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.keys) != 4 || e.keys[1] != e.keys[0] || e.keys[2] != e.keys[0] || e.keys[3] == e.keys[0] {
		t.Errorf("keys asked for: %v, want the same three times, then another", e.keys)
	}
	if want := []bool{true, true, true, false}; !slices.Equal(e.withToken, want) {
		t.Errorf("with the token: %v, want %v", e.withToken, want)
	}
	have, _ := pki.KeyID(id.current().Leaf.PublicKey)
	if have != e.keys[3] {
		t.Errorf("the identity kept is of key %s, not the renewal's %s", have, e.keys[3])
	}
}

// TestStoreStoppedBetweenRenames: a renewal's store stopped after the key
// went in and before the certificate did leaves a pair that loads once
// the certificate's temporary file is renamed, which LoadIdentity does.
func TestStoreStoppedBetweenRenames(t *testing.T) {
	ca, _, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	id, _, err := LoadIdentity(dir, ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	pair := func() (keyPEM, certPEM []byte, key string) {
		k, csr, err := pki.NewNodeRequest("n1")
		if err != nil {
			t.Fatal(err)
		}
		der, err := ca.SignNode(csr, "n1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, _ = pki.KeyPEM(k)
		key, _ = pki.KeyID(k.Public())
		return keyPEM, pki.CertPEM(der), key
	}
	oldKey, oldCert, _ := pair()
	if err := id.store(oldKey, oldCert); err != nil {
		t.Fatal(err)
	}
	newKey, newCert, want := pair()
	// What store does up to its second rename.
	for name, data := range map[string][]byte{identityKeyFile: newKey, identityCertFile + ".tmp": newCert} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	again, unusable, err := LoadIdentity(dir, ca.PEM)
	if err != nil || unusable != nil {
		t.Fatalf("load: %v, %v", err, unusable)
	}
	if got, _ := pki.KeyID(again.current().Leaf.PublicKey); got != want {
		t.Errorf("loaded the identity of key %s, want the new one %s", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, identityCertFile+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary certificate is still there: %v", err)
	}
	// A pair that does not load and no certificate to finish it with
	// stays unusable.
	if err := os.WriteFile(filepath.Join(dir, identityKeyFile), oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, unusable, err := LoadIdentity(dir, ca.PEM); err != nil || unusable == nil {
		t.Errorf("a mismatched pair: %v, %v, want it unusable", err, unusable)
	}
}
