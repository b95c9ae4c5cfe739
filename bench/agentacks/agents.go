package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
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
// update; on "dump" from its stdin it prints, as JSON, for each marker
// the number of agents that acknowledged it and the time the last did.

// childConfig is what the parent passes to the child.
type childConfig struct {
	Servers []string
	CAFile  string
	Token   string
	N       int
}

// markerSeen is what the agents saw of one marker.
type markerSeen struct {
	Agents int   `json:"agents"`
	LastNS int64 `json:"last_ns"`
}

// simAgent is one simulated node.
type simAgent struct {
	node   string
	server string
	cert   *tls.Certificate
	// services of every load balancer, as the last update sent them.
	services map[string][]*agentv1.Service
	seen     map[netip.Addr]bool
	// epoch and rev are what it acknowledged last, for its next hello.
	epoch   string
	rev     int64
	started bool
}

// recorder gathers the agents' first acknowledgements of each marker.
type recorder struct {
	mu    sync.Mutex
	seen  map[netip.Addr]*markerSeen
	acked atomic.Int64 // agents that acknowledged their first update
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
	agents := make([]*simAgent, cfg.N)
	for i := range agents {
		agents[i] = &simAgent{node: fmt.Sprintf("sim-%05d", i), server: cfg.Servers[i%len(cfg.Servers)],
			services: map[string][]*agentv1.Service{}, seen: map[netip.Addr]bool{}}
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
	var reconnects atomic.Int64
	for _, a := range agents {
		go func() {
			// As a real agent: reconnect after a pause, from the revision
			// it acknowledged.
			for ctx.Err() == nil {
				if err := a.run(ctx, roots, rec); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "agent %s: %v; reconnecting (%d so far)\n", a.node, err, reconnects.Add(1))
					time.Sleep(500 * time.Millisecond)
				}
			}
		}()
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
		out := map[string]*markerSeen{}
		for m, s := range rec.seen {
			out[m.String()] = s
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
		grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(roots, func() *tls.Certificate { return nil }))))
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

// run subscribes with the node's identity, keeps what it is sent and
// acknowledges every update.
func (a *simAgent) run(ctx context.Context, roots *x509.CertPool, rec *recorder) error {
	conn, err := grpc.NewClient("passthrough:///"+a.server,
		grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(roots, func() *tls.Certificate { return a.cert }))))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := agentv1.NewAgentClient(conn).Subscribe(ctx)
	if err != nil {
		return err
	}
	hello := &agentv1.Hello{Node: a.node, LastRevision: a.rev, Epoch: a.epoch}
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		return err
	}
	for {
		u, err := stream.Recv()
		if err != nil {
			return err
		}
		fresh := a.apply(u)
		if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Ack{Ack: &agentv1.Ack{Revision: u.GetRevision()}}}); err != nil {
			return err
		}
		now := time.Now()
		a.epoch, a.rev = u.GetEpoch(), u.GetRevision()
		for _, m := range fresh {
			rec.note(m, now)
		}
		if !a.started {
			a.started = true
			rec.acked.Add(1)
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
