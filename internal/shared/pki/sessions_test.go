package pki

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"
)

func TestTicketKeysRotateWithOverlap(t *testing.T) {
	now := time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)
	a, err := ticketKeys([]byte("secret"), now)
	if err != nil {
		t.Fatal(err)
	}
	same, _ := ticketKeys([]byte("secret"), now.Add(time.Minute))
	next, _ := ticketKeys([]byte("secret"), now.Add(ticketEpoch))
	other, _ := ticketKeys([]byte("other"), now)
	if len(a) != 3 || a[0] != same[0] {
		t.Fatalf("the same epoch's keys differ: %x / %x", a[0], same[0])
	}
	if a[0] == a[1] || a[0] == a[2] || a[1] == a[2] {
		t.Fatal("the three epochs share a key")
	}
	// The next epoch encrypts with what this one held as next, and still
	// decrypts this one's tickets.
	if next[0] != a[2] || next[1] != a[0] {
		t.Fatalf("no overlap between epochs: %x %x / %x %x", next[0], next[1], a[2], a[0])
	}
	for i := range a {
		if other[i] == a[i] {
			t.Fatal("another secret derived the same key")
		}
	}
}

// A node's session with one replica resumes on another of the same CA,
// and the replica reads the node's identity from it; never a session made
// without an identity or with another one.
func TestSessionsResumeAcrossReplicas(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	replica := func(ca *CA, name string) *tls.Config {
		c, err := ServerTLS(ca, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, c := replica(ca, "replica-a"), replica(ca, "replica-b"), replica(ca, "replica-c")
	n1, n1renewed := nodeCert(t, ca, "n1"), nodeCert(t, ca, "n1")
	var id *tls.Certificate
	sessions := NewSessions()
	client := ClientTLS(ca.Pool(), func() *tls.Certificate { return id }, sessions)

	step := func(name string, srv *tls.Config, wantResumed bool, wantPeer []byte) {
		t.Helper()
		cs, serr, cerr := handshake(t, srv, client)
		if serr != nil || cerr != nil {
			t.Fatalf("%s: handshake %v / %v", name, serr, cerr)
		}
		if cs.DidResume != wantResumed {
			t.Fatalf("%s: resumed %v, want %v", name, cs.DidResume, wantResumed)
		}
		switch {
		case wantPeer == nil && len(cs.PeerCertificates) != 0:
			t.Fatalf("%s: the replica read a certificate, want none", name)
		case wantPeer != nil && (len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, wantPeer)):
			t.Fatalf("%s: the replica did not read the identity presented now", name)
		}
		if wantPeer != nil {
			if node, err := VerifyPeer(cs, ca.Pool(), RoleNode); node != "n1" || err != nil {
				t.Fatalf("%s: peer %q %v", name, node, err)
			}
		}
	}
	step("enrollment with a", a, false, nil)
	id = n1
	step("first with the identity, at b", b, false, n1.Certificate[0])
	step("again, at a", a, true, n1.Certificate[0])
	step("at c", c, true, n1.Certificate[0])
	id = n1renewed
	step("renewed, at b", b, false, n1renewed.Certificate[0])
	step("renewed, again at c", c, true, n1renewed.Certificate[0])

	// A replica of another CA cannot read the tickets (and is not trusted).
	if _, _, cerr := handshake(t, replica(other, "x"), client); cerr == nil {
		t.Fatal("a replica of another CA was trusted")
	}
	// Without a session cache, every handshake is a full one.
	plain := ClientTLS(ca.Pool(), func() *tls.Certificate { return n1 }, nil)
	for range 2 {
		if cs, serr, cerr := handshake(t, a, plain); serr != nil || cerr != nil || cs.DidResume {
			t.Fatalf("without sessions: resumed %v, %v / %v", cs.DidResume, serr, cerr)
		}
	}
}

// A session outlives a few handshakes that fail (a replica too slow to
// answer), and is dropped after keptFailures of them in a row.
func TestSessionKeptThroughFailedHandshakes(t *testing.T) {
	ca := newCA(t)
	a, err := ServerTLS(ca, "replica-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id := nodeCert(t, ca, "n1")
	client := ClientTLS(ca.Pool(), func() *tls.Certificate { return id }, NewSessions())
	fail := func() {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close() // no answer to the hello
			}
		}()
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if err := tls.Client(raw, client).Handshake(); err == nil {
			t.Fatal("a handshake with a closed connection passed")
		}
	}
	resumes := func() bool {
		t.Helper()
		cs, serr, cerr := handshake(t, a, client)
		if serr != nil || cerr != nil {
			t.Fatalf("handshake %v / %v", serr, cerr)
		}
		return cs.DidResume
	}
	if resumes() {
		t.Fatal("the first handshake resumed")
	}
	for range keptFailures - 1 {
		fail()
	}
	if !resumes() {
		t.Fatalf("the session was dropped after %d failed handshakes", keptFailures-1)
	}
	for range keptFailures {
		fail()
	}
	if resumes() {
		t.Fatalf("the session was kept after %d failed handshakes in a row", keptFailures)
	}
}

// BenchmarkHandshake is a node's handshake with a replica, both sides in
// this process over loopback TCP: full, as every reconnect was, and resumed
// from a session made with another replica.
func BenchmarkHandshake(b *testing.B) {
	ca, _, err := NewCA("bench")
	if err != nil {
		b.Fatal(err)
	}
	a, _ := ServerTLS(ca, "replica-a", time.Hour)
	other, _ := ServerTLS(ca, "replica-b", time.Hour)
	key, csr, _ := NewNodeRequest("n1")
	der, _ := ca.SignNode(csr, "n1", time.Hour)
	id := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	// Loopback TCP, not a pipe: a resumed handshake has both sides
	// writing at once, which an unbuffered pipe deadlocks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	shake := func(srv, cli *tls.Config) tls.ConnectionState {
		done := make(chan error, 1)
		go func() {
			s, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer s.Close()
			ss := tls.Server(s, srv)
			if err = ss.Handshake(); err == nil {
				// A byte after the session tickets: the client's read
				// of it takes them.
				_, err = ss.Write([]byte{1})
			}
			done <- err
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cc := tls.Client(c, cli)
		if _, err := cc.Read(make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return cc.ConnectionState()
	}
	for _, resume := range []bool{false, true} {
		name := "full"
		var sessions *Sessions
		if resume {
			name, sessions = "resumed", NewSessions()
		}
		cli := ClientTLS(ca.Pool(), func() *tls.Certificate { return id }, sessions)
		b.Run(name, func(b *testing.B) {
			shake(other, cli)
			for b.Loop() {
				if cs := shake(a, cli); cs.DidResume != resume {
					b.Fatalf("resumed %v, want %v", cs.DidResume, resume)
				}
			}
		})
	}
}
