package pki

import (
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// A node's TLS session with one replica can be resumed on any other: the
// replicas encrypt their session tickets with keys derived from the CA's
// private key, which every replica holds already (it issues the
// identities), so they agree on the keys without talking to each other.
// A resumed handshake skips the certificates' signatures and chain checks
// (TLS 1.3 still runs a fresh key exchange), which is what the agents of
// a replica that died spend the live replicas' CPU on, all at once.

// ticketEpoch is how long one ticket key encrypts. The keys of the epochs
// before and after it still decrypt, so a ticket lives one to two epochs
// and replicas whose clocks are apart by less than an epoch read each
// other's.
const ticketEpoch = 6 * time.Hour

// ticketKeyInfo names the derivation, so that the CA key's other uses
// never meet these bytes.
const ticketKeyInfo = "flowlb agent stream session ticket key v1"

// ticketKeys are the session ticket keys at now, the epoch's own first
// (it encrypts), then the previous and the next epoch's.
func ticketKeys(secret []byte, now time.Time) ([][32]byte, error) {
	epoch := now.Unix() / int64(ticketEpoch/time.Second)
	keys := make([][32]byte, 0, 3)
	for _, e := range []int64{epoch, epoch - 1, epoch + 1} {
		var salt [8]byte
		binary.BigEndian.PutUint64(salt[:], uint64(e))
		k, err := hkdf.Key(sha256.New, secret, salt[:], ticketKeyInfo, 32)
		if err != nil {
			return nil, err
		}
		keys = append(keys, [32]byte(k))
	}
	return keys, nil
}

// tickets encrypts and decrypts a replica's session tickets with the
// current epoch's keys. It holds its own Config for the keys: gRPC clones
// the Config it serves with, and a clone would not see a rotation.
type tickets struct {
	secret []byte
	mu     sync.Mutex
	epoch  int64
	keys   *tls.Config
}

func newTickets(ca *CA) (*tickets, error) {
	secret, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("session ticket keys: %w", err)
	}
	t := &tickets{secret: secret, epoch: -1, keys: &tls.Config{}}
	if _, err := t.config(time.Now()); err != nil {
		return nil, err
	}
	return t, nil
}

// config is the Config holding the keys at now, rotated at an epoch's
// start.
func (t *tickets) config(now time.Time) (*tls.Config, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := now.Unix() / int64(ticketEpoch/time.Second); e != t.epoch {
		keys, err := ticketKeys(t.secret, now)
		if err != nil {
			return nil, err
		}
		t.keys.SetSessionTicketKeys(keys)
		t.epoch = e
	}
	return t.keys, nil
}

// install makes cfg's tickets ours.
func (t *tickets) install(cfg *tls.Config) {
	cfg.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		c, err := t.config(time.Now())
		if err != nil {
			return nil, err
		}
		return c.EncryptTicket(cs, ss)
	}
	cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		c, err := t.config(time.Now())
		if err != nil {
			return nil, nil // a full handshake, not a failed one
		}
		return c.DecryptTicket(identity, cs)
	}
}

// replicasServerName is the server name a node sends every replica. It is
// not checked (a replica is known by its certificate's identity, not by
// an address), but it keys the node's session cache: one name for all
// replicas lets a session made with one be offered to the next.
const replicasServerName = "replicas.flowlb.invalid"

// Sessions are a node's resumable TLS sessions with the replicas. A
// session carries the identity it was made with: a resumed handshake
// presents no certificate, the replica reads the session's. So sessions
// are kept per identity, and none is kept or offered while the node has
// no identity (enrollment): the next handshake after an enrollment or a
// renewal is a full one, with the new certificate.
type Sessions struct {
	lru tls.ClientSessionCache

	mu sync.Mutex
	// failed counts, per cache key, the handshakes that failed in a row
	// while the key had a session: crypto/tls drops a session after any
	// failed handshake that offered it, and a handshake given up on
	// because the replica was slow to answer (every agent of a replica
	// that died, at once) is not the session's fault.
	failed map[string]int
}

// keptFailures is how many handshakes in a row may fail with a session
// before it is dropped: one that a replica refuses is not offered for
// ever.
const keptFailures = 3

// NewSessions is an empty session cache for one node.
func NewSessions() *Sessions {
	return &Sessions{lru: tls.NewLRUClientSessionCache(4), failed: map[string]int{}}
}

// sessionsOf is the cache of s that a Config presenting identity uses.
type sessionsOf struct {
	s        *Sessions
	identity func() *tls.Certificate
}

// key is the cache key for the identity presented now, "" for none.
func (c sessionsOf) key(k string) string {
	cert := c.identity()
	if cert == nil || len(cert.Certificate) == 0 {
		return ""
	}
	sum := sha256.Sum256(cert.Certificate[0])
	return string(sum[:]) + k
}

func (c sessionsOf) Get(k string) (*tls.ClientSessionState, bool) {
	if k = c.key(k); k == "" {
		return nil, false
	}
	return c.s.lru.Get(k)
}

// Put keeps cs, or with nil (the handshake that offered the key's
// session failed, or did not resume) drops the session once that
// happened keptFailures times in a row.
func (c sessionsOf) Put(k string, cs *tls.ClientSessionState) {
	if k = c.key(k); k == "" {
		return
	}
	c.s.mu.Lock()
	if cs == nil {
		if c.s.failed[k]++; c.s.failed[k] < keptFailures {
			c.s.mu.Unlock()
			return
		}
	}
	delete(c.s.failed, k)
	c.s.mu.Unlock()
	c.s.lru.Put(k, cs)
}
