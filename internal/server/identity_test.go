package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/pki"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// rawClient connects to a replica's agent stream over TLS, presenting
// cert (nil: none).
func rawClient(t *testing.T, c *cluster, s *server.Server, cert *tls.Certificate) agentv1.AgentClient {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(c.dir, "agent-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	conn, err := grpc.NewClient("passthrough:///"+s.AgentAddr.String(),
		grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(roots, func() *tls.Certificate { return cert }, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentClient(conn)
}

// enroll gets an identity for node with the bootstrap token.
func enroll(t *testing.T, client agentv1.AgentClient, token, node string) (*tls.Certificate, error) {
	t.Helper()
	key, csr, err := pki.NewNodeRequest(node)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	resp, err := client.Enroll(ctx, &agentv1.EnrollRequest{Node: node, CertificateRequest: csr})
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{resp.GetCertificate()}, PrivateKey: key}, nil
}

// subscribe says hello as node and returns the first answer's error.
func subscribe(t *testing.T, client agentv1.AgentClient, node string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := client.Subscribe(ctx)
	if err != nil {
		return err
	}
	// A refused stream may end before the hello is sent: its status
	// comes with the receive.
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{Node: node}}}); err != nil && err != io.EOF {
		return err
	}
	_, err = stream.Recv()
	return err
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if status.Code(err) != want {
		t.Errorf("%s: %v, want %s", what, err, want)
	}
}

// A node acts only as itself: the stream needs an identity from the
// replicas' CA, issued once against the bootstrap token, and the identity
// names the only node it may subscribe as.
func TestAgentIdentities(t *testing.T) {
	c := newCluster(t)
	s := c.start("a", 5*time.Second)
	anonymous := rawClient(t, c, s, nil)

	wantCode(t, "subscribe without an identity", subscribe(t, anonymous, "n1"), codes.Unauthenticated)
	_, err := enroll(t, anonymous, "wrong-token", "n1")
	wantCode(t, "enroll with a bad token", err, codes.Unauthenticated)
	_, err = enroll(t, anonymous, "", "n1")
	wantCode(t, "enroll without a token", err, codes.Unauthenticated)

	n1, err := enroll(t, anonymous, c.token, "n1")
	if err != nil {
		t.Fatal(err)
	}
	asN1 := rawClient(t, c, s, n1)
	wantCode(t, "n1 subscribing as n2", subscribe(t, asN1, "n2"), codes.PermissionDenied)
	_, err = enroll(t, asN1, "", "n2")
	wantCode(t, "n1 renewing n2's identity", err, codes.PermissionDenied)
	if _, err := enroll(t, asN1, "", "n1"); err != nil {
		t.Errorf("n1 renewing its own identity: %v", err)
	}

	// n1 subscribes as itself: the stream opens and a snapshot comes.
	if err := subscribe(t, asN1, "n1"); err != nil {
		t.Errorf("n1 subscribing as itself: %v", err)
	}

	// An identity from another CA is refused at the handshake.
	other, otherKey, _ := pki.NewCA("other")
	_ = otherKey
	key, csr, _ := pki.NewNodeRequest("n1")
	der, _ := other.SignNode(csr, "n1", time.Hour)
	stranger := rawClient(t, c, s, &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	if err := subscribe(t, stranger, "n1"); err == nil {
		t.Error("an identity of another CA was accepted")
	}
}

// renew asks for a new identity of node with the identity cert.
func renew(t *testing.T, c *cluster, s *server.Server, cert *tls.Certificate, node string) (*tls.Certificate, error) {
	t.Helper()
	return enroll(t, rawClient(t, c, s, cert), "", node)
}

// metricOf reads a sample of a replica's /metrics, 0 if absent.
func metricOf(t *testing.T, s *server.Server, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.APIAddr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// A node name is bound to the identity last issued for it, on every
// replica: the token does not enroll it again while that identity is
// valid, except for the same key (an enrollment whose answer was lost);
// renewals go from identity to identity; forgetting the name frees it
// for the token and stops the old identity from renewing.
func TestNodeNameBound(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", 5*time.Second)
	b := c.start("b", 5*time.Second)
	anonymousA, anonymousB := rawClient(t, c, a, nil), rawClient(t, c, b, nil)

	key, csr, err := pki.NewNodeRequest("n1")
	if err != nil {
		t.Fatal(err)
	}
	ask := func(client agentv1.AgentClient) (*tls.Certificate, error) {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+c.token), 5*time.Second)
		defer cancel()
		resp, err := client.Enroll(ctx, &agentv1.EnrollRequest{Node: "n1", CertificateRequest: csr})
		if err != nil {
			return nil, err
		}
		return &tls.Certificate{Certificate: [][]byte{resp.GetCertificate()}, PrivateKey: key}, nil
	}
	first, err := ask(anonymousA)
	if err != nil {
		t.Fatal(err)
	}
	// The same request again, at the other replica: its answer was lost.
	if _, err := ask(anonymousB); err != nil {
		t.Errorf("the same key enrolling again: %v", err)
	}
	before := metricOf(t, b, `flowlb_fanout_identity_refusals_total{kind="enrollment"}`)
	_, err = enroll(t, anonymousB, c.token, "n1")
	wantCode(t, "another key enrolling n1 with the token", err, codes.PermissionDenied)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `node "n1" is enrolled already, with an identity valid until`) ||
		!strings.Contains(msg, "flowlb server node forget n1") {
		t.Errorf("the refusal says %q", msg)
	}
	if got := metricOf(t, b, `flowlb_fanout_identity_refusals_total{kind="enrollment"}`); got != before+1 {
		t.Errorf("refused enrollments counted %v, want %v", got, before+1)
	}
	if _, err := enroll(t, anonymousB, c.token, "n2"); err != nil {
		t.Errorf("enrolling another name: %v", err)
	}

	second, err := renew(t, c, b, first, "n1")
	if err != nil {
		t.Fatalf("n1 renewing at the other replica: %v", err)
	}
	// The answer to that renewal lost: n1 renews with the first again.
	third, err := renew(t, c, a, first, "n1")
	if err != nil {
		t.Fatalf("n1 renewing with the identity before its last: %v", err)
	}
	_, err = renew(t, c, a, second, "n1")
	wantCode(t, "n1 renewing with an identity two renewals back", err, codes.PermissionDenied)
	if got := metricOf(t, a, `flowlb_fanout_identity_refusals_total{kind="renewal"}`); got != 1 {
		t.Errorf("refused renewals counted %v, want 1", got)
	}

	st, err := store.Open(context.Background(), c.dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, bound, err := st.ForgetNode(context.Background(), "n1"); err != nil || !bound {
		t.Fatalf("forget n1: %v %v", bound, err)
	}
	_, err = renew(t, c, b, third, "n1")
	wantCode(t, "the forgotten identity renewing", err, codes.PermissionDenied)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "no longer the one the name is bound to") {
		t.Errorf("the refusal says %q", msg)
	}
	fresh, err := enroll(t, anonymousA, c.token, "n1")
	if err != nil {
		t.Fatalf("the token enrolling a forgotten name: %v", err)
	}
	if err := subscribe(t, rawClient(t, c, b, fresh), "n1"); err != nil {
		t.Errorf("the new identity subscribing: %v", err)
	}
}

// Identities are renewed under a live stream, which goes on: the agent
// stays on its replica and keeps programming changes.
func TestIdentityRenewedUnderTraffic(t *testing.T) {
	c := newCluster(t)
	c.identityTTL = 3 * time.Second
	s := c.start("a", 5*time.Second)
	k := newKernel()
	ag := c.startAgentWith(agent.Config{Servers: []string{s.AgentAddr.String()}, Node: "n1", NoHealth: true, RenewCheck: 100 * time.Millisecond}, k)
	testutil.Eventually(t, 5*time.Second, "agent connected", func() (bool, string) { return len(s.Hub.Agents()) == 1, "" })
	first := ag.IdentityExpiry()
	t.Logf("first identity expires in %v", time.Until(first))

	// Renewed past two thirds of 3 s, twice (the expiry moves by 2 s
	// each time), on the same stream, whose connection's certificate
	// has expired meanwhile.
	testutil.Eventually(t, 10*time.Second, "identity renewed twice", func() (bool, string) {
		moved := ag.IdentityExpiry().Sub(first)
		return moved >= 3500*time.Millisecond, moved.String()
	})
	if ag.Server() != s.AgentAddr.String() || ag.Sessions() != 1 {
		t.Fatalf("the stream did not survive the renewals: on %q, %d streams opened", ag.Server(), ag.Sessions())
	}
	lb := createLB(t, s, "web", "198.18.1.1")
	waitStatus(t, s, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	if got := k.backends(lb.LoadBalancer.VIPAddress); len(got) != 1 {
		t.Fatalf("kernel holds %v", got)
	}
}

// A node whose identity expired while its agent was away enrolls again
// with the token: it does not present the expired certificate, which a
// replica would refuse at the handshake.
func TestExpiredIdentityEnrollsAgain(t *testing.T) {
	c := newCluster(t)
	c.identityTTL = time.Second
	c.identityDirs = map[string]string{"n1": t.TempDir()}
	s := c.start("a", 5*time.Second)
	first := c.startAgentWith(agent.Config{Servers: []string{s.AgentAddr.String()}, Node: "n1", NoHealth: true}, newKernel())
	testutil.Eventually(t, 5*time.Second, "agent connected", func() (bool, string) { return len(s.Hub.Agents()) == 1, "" })
	expiry := first.IdentityExpiry()
	c.stopAgents()
	testutil.Eventually(t, 5*time.Second, "the identity expired", func() (bool, string) { return time.Now().After(expiry), "" })

	again := c.startAgentWith(agent.Config{Servers: []string{s.AgentAddr.String()}, Node: "n1", NoHealth: true}, newKernel())
	testutil.Eventually(t, 5*time.Second, "the agent back with a new identity", func() (bool, string) {
		return len(s.Hub.Agents()) == 1 && again.IdentityExpiry().After(expiry), fmt.Sprint(again.IdentityExpiry())
	})
}
