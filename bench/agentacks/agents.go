package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/shared/agentgrpc"
	"github.com/flowlb/flowlb/internal/shared/pki"
)

// The simulated agents run in a child process of their own, so that the
// servers' memory is measured alone. Each enrolls with the bootstrap
// token as a real agent does, subscribes with its issued node identity
// over mutual TLS, keeps the load balancers' services it is sent and
// acknowledges every update's revision at once (no kernel). It notes
// when it first acknowledged an update holding each marker member (one
// per change of the benchmark).
//
// The child prints "ready" once every agent has acknowledged its first
// update; on "dump" from its stdin it prints, as JSON (childDump), for
// each marker the number of agents that acknowledged it and the time the
// last did, and how many sessions ended.
//
// Agent i subscribes first to server i modulo their number, as long as
// that takes (the start is not measured, and 5,000 handshakes at once on
// the benchmark's 2 cores, the agents' and the servers', take longer
// than the agent's handshake wait: they would be given up and begun
// again until the queue drains); when its stream ends it moves to the others as the real agent does
// (internal/node/agent, round.go): a round over the servers in a
// shuffled order with the one just lost last, 500 ms to answer each
// (doubled after each handshake that got no answer in time, up to 20 s,
// until a useful session; FixedHandshake: always 500 ms, as the agent
// did before), and a jittered backoff from 50 ms to 5 s after a round in
// which none did.

// childConfig is what the parent passes to the child.
type childConfig struct {
	Servers []string
	CAFile  string
	Token   string
	N       int
	// FixedHandshake: 500 ms for every handshake, as the agent did
	// before its wait grew.
	FixedHandshake bool
	// NoResume: every handshake a full one, as before the replicas
	// resumed each other's TLS sessions.
	NoResume bool
}

// markerSeen is what the agents saw of one marker.
type markerSeen struct {
	Agents int   `json:"agents"`
	LastNS int64 `json:"last_ns"`
}

// childDump is the child's answer to "dump".
type childDump struct {
	Markers map[string]*markerSeen `json:"markers"`
	// Ended counts the useful sessions that ended, Failed the attempts
	// that were not useful (no stream in time, refused, or one that
	// ended at once).
	Ended  int64 `json:"ended"`
	Failed int64 `json:"failed"`
	// Resumed and Full count the sessions that got an update, by their
	// TLS handshake: a session resumed, or a full handshake.
	Resumed int64 `json:"resumed"`
	Full    int64 `json:"full"`
	// Why, by the error's first words.
	Why map[string]int64 `json:"why"`
}

// As the real agent's round (internal/node/agent/round.go).
const (
	minBackoff       = agent.MinBackoff
	maxBackoff       = agent.MaxBackoff
	handshakeTimeout = agent.HandshakeTimeout
	maxHandshake     = agent.MaxHandshake
	usefulAfter      = agent.UsefulAfter
)

// simAgent is one simulated node.
type simAgent struct {
	node string
	// server is the one it enrolls with and subscribes to first.
	server string
	cert   *tls.Certificate
	// sessions are its TLS sessions with the replicas (nil: none kept).
	sessions *pki.Sessions
	// services of every load balancer, as the last update sent them.
	services map[string][]*agentv1.Service
	seen     map[netip.Addr]bool
	// epoch and rev are what it acknowledged last, for its next hello.
	epoch   string
	rev     int64
	started bool
	// release frees its place among the first subscriptions.
	release func()
}

// recorder gathers the agents' first acknowledgements of each marker.
type recorder struct {
	mu    sync.Mutex
	seen  map[netip.Addr]*markerSeen
	acked atomic.Int64 // agents that acknowledged their first update
	// resumed and full: sessions that got an update, by handshake.
	resumed, full atomic.Int64
}

// countHandshake counts a session that got its first update by how its
// TLS handshake went.
func (r *recorder) countHandshake(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && info.State.DidResume {
		r.resumed.Add(1)
	} else {
		r.full.Add(1)
	}
}

func (r *recorder) note(m netip.Addr, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen[m]
	if s == nil {
		s = &markerSeen{}
		r.seen[m] = s
	}
	s.Agents++
	s.LastNS = max(s.LastNS, at.UnixNano())
}

func runChild(cfgJSON string) error {
	var cfg childConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return err
	}
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{seen: map[netip.Addr]*markerSeen{}}
	why := &reasons{n: map[string]int64{}}
	agents := make([]*simAgent, cfg.N)
	for i := range agents {
		agents[i] = &simAgent{node: fmt.Sprintf("sim-%05d", i), server: cfg.Servers[i%len(cfg.Servers)],
			services: map[string][]*agentv1.Service{}, seen: map[netip.Addr]bool{}}
		if !cfg.NoResume {
			agents[i].sessions = pki.NewSessions()
		}
	}
	// Enrollment: a few at a time, as nodes booting would.
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.N)
	for _, a := range agents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := a.enroll(ctx, roots, cfg.Token); err != nil {
				errs <- fmt.Errorf("%s: %w", a.node, err)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	var ended, failed atomic.Int64
	// The first subscriptions go a few at a time too, each until its
	// first update: 5,000 TLS handshakes at once on the benchmark's 2
	// cores take longer than gRPC's 20 s to connect.
	starting := make(chan struct{}, 64)
	go status(ctx, rec, &ended, &failed)
	for _, a := range agents {
		go a.loop(ctx, roots, rec, cfg, &ended, &failed, why, starting)
	}
	for rec.acked.Load() < int64(cfg.N) {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) != "dump" {
			continue
		}
		rec.mu.Lock()
		out := childDump{Markers: map[string]*markerSeen{}, Ended: ended.Load(), Failed: failed.Load(), Why: why.counts(),
			Resumed: rec.resumed.Load(), Full: rec.full.Load()}
		for m, s := range rec.seen {
			out.Markers[m.String()] = s
		}
		b, err := json.Marshal(out)
		rec.mu.Unlock()
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	return nil
}

// enroll gets the node's identity with the bootstrap token, on a
// connection that presents none.
func (a *simAgent) enroll(ctx context.Context, roots *x509.CertPool, token string) error {
	conn, err := grpc.NewClient("passthrough:///"+a.server,
		grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(roots, func() *tls.Certificate { return nil }, nil))))
	if err != nil {
		return err
	}
	defer conn.Close()
	key, csr, err := pki.NewNodeRequest(a.node)
	if err != nil {
		return err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	resp, err := agentv1.NewAgentClient(conn).Enroll(ctx, &agentv1.EnrollRequest{Node: a.node, CertificateRequest: csr})
	if err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	leaf, err := x509.ParseCertificate(resp.GetCertificate())
	if err != nil {
		return err
	}
	a.cert = &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	return nil
}

// loop subscribes until ctx ends: first to its own server, then, when a
// session ends, in rounds over all of them as the real agent does.
func (a *simAgent) loop(ctx context.Context, roots *x509.CertPool, rec *recorder, cfg childConfig, ended, failed *atomic.Int64, why *reasons, starting chan struct{}) {
	select {
	case starting <- struct{}{}:
	case <-ctx.Done():
		return
	}
	a.release = func() { <-starting }
	order := []string{a.server}
	backoff, wait := minBackoff, time.Duration(0)
	for ctx.Err() == nil {
		useful, lost := false, ""
		for _, addr := range order {
			var err error
			var answered bool
			useful, answered, err = a.run(ctx, addr, wait, roots, rec)
			if ctx.Err() != nil {
				return
			}
			switch {
			case wait == 0:
				wait = handshakeTimeout // after the first attempt
			case !answered && !cfg.FixedHandshake:
				wait = min(2*wait, maxHandshake)
			}
			if useful {
				wait = handshakeTimeout
				ended.Add(1)
				lost = addr
				break
			}
			failed.Add(1)
			why.note(err)
		}
		if !useful {
			select {
			case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
			case <-ctx.Done():
				return
			}
			backoff = min(backoff*2, maxBackoff)
		} else {
			backoff = minBackoff
		}
		order = roundOrder(cfg.Servers, lost)
	}
}

// status tells stderr, every 10 s, how many agents have had their first
// update and how many sessions ended or failed so far.
func status(ctx context.Context, rec *recorder, ended, failed *atomic.Int64) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fmt.Fprintf(os.Stderr, "agents: %d subscribed, %d sessions ended, %d attempts failed\n", rec.acked.Load(), ended.Load(), failed.Load())
	}
}

// reasons count the errors of the attempts that got no stream, by
// their first words.
type reasons struct {
	mu sync.Mutex
	n  map[string]int64
}

func (r *reasons) note(err error) {
	msg := fmt.Sprint(err)
	if f := strings.Fields(msg); len(f) > 8 {
		msg = strings.Join(f[:8], " ")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[msg]++
}

func (r *reasons) counts() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

// roundOrder shuffles the servers and puts the one just lost last.
func roundOrder(servers []string, lost string) []string {
	out := slices.Clone(servers)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if i := slices.Index(out, lost); i >= 0 {
		out = append(append(out[:i:i], out[i+1:]...), lost)
	}
	return out
}

// run is one session with the server at addr: it subscribes with the
// node's identity (the handshake within wait, if not 0, else not
// answered), keeps
// what it is sent and acknowledges every update until the stream ends;
// useful as the real agent's (it was sent something, or lasted a
// second).
func (a *simAgent) run(ctx context.Context, addr string, wait time.Duration, roots *x509.CertPool, rec *recorder) (useful, answered bool, err error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, append(agentgrpc.DialOptions(),
		grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(roots, func() *tls.Certificate { return a.cert }, a.sessions))))...)
	if err != nil {
		return false, true, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	limit := wait
	if limit == 0 {
		limit = time.Hour // the first subscription: as long as it takes
	}
	timer := time.AfterFunc(limit, cancel)
	stream, err := agentv1.NewAgentClient(conn).Subscribe(ctx)
	if err == nil {
		hello := &agentv1.Hello{Node: a.node, LastRevision: a.rev, Epoch: a.epoch}
		err = stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: hello}})
	}
	if !timer.Stop() {
		return false, false, fmt.Errorf("no answer within %s", wait)
	}
	if err != nil {
		return false, true, err
	}
	start := time.Now()
	received := false
	defer func() { useful = received || time.Since(start) >= usefulAfter }()
	for {
		u, err := stream.Recv()
		if err != nil {
			return false, true, err
		}
		if !received {
			rec.countHandshake(stream.Context())
		}
		received = true
		fresh := a.apply(u)
		if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Ack{Ack: &agentv1.Ack{Revision: u.GetRevision()}}}); err != nil {
			return false, true, err
		}
		now := time.Now()
		a.epoch, a.rev = u.GetEpoch(), u.GetRevision()
		for _, m := range fresh {
			rec.note(m, now)
		}
		if !a.started {
			a.started = true
			rec.acked.Add(1)
			a.release()
		}
	}
}

// apply keeps an update's services, as the real agent's table would, and
// returns the marker members it holds for the first time.
func (a *simAgent) apply(u *agentv1.Update) []netip.Addr {
	if u.GetSnapshot() {
		a.services = map[string][]*agentv1.Service{}
		for _, s := range u.GetUpserts() {
			a.services[s.GetLoadbalancerId()] = append(a.services[s.GetLoadbalancerId()], s)
		}
	}
	for _, lb := range u.GetLoadbalancers() {
		if len(lb.GetServices()) == 0 {
			delete(a.services, lb.GetLoadbalancerId())
			continue
		}
		a.services[lb.GetLoadbalancerId()] = lb.GetServices()
	}
	var fresh []netip.Addr
	for _, ss := range a.services {
		for _, s := range ss {
			for _, b := range s.GetBackends() {
				m, ok := netip.AddrFromSlice(b.GetAddress())
				if !ok || !isMarker(m.Unmap()) || a.seen[m.Unmap()] {
					continue
				}
				a.seen[m.Unmap()] = true
				fresh = append(fresh, m.Unmap())
			}
		}
	}
	return fresh
}
