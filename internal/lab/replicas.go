package lab

// flowlb server replicas on the server hosts: one `flowlb server` in each
// host sK, all on the lab's database, sharing one agent token, and the
// list of their agent streams that every node's agent is given
// (docs/lab.md, "Server replicas").

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/shared/pki"
)

// Where a replica listens on its server host, and its process's name.
const (
	ReplicaAPIPort   = 9876 // the Octavia API (--listen)
	ReplicaAgentPort = 9877 // the agents' stream (--agent-listen)
	ProcServer       = "server"
	// replicaReadyTimeout bounds the wait for a replica's API.
	replicaReadyTimeout = 30 * time.Second
)

// ReplicaAPI is where the replica on server host k serves the API.
func ReplicaAPI(k int) netip.AddrPort { return netip.AddrPortFrom(ServerAddr(k), ReplicaAPIPort) }

// ReplicaAgent is where the replica on server host k serves the agents.
func ReplicaAgent(k int) netip.AddrPort { return netip.AddrPortFrom(ServerAddr(k), ReplicaAgentPort) }

// AgentServers is the agents' --server for replicas on server hosts ks:
// every replica's agent stream, comma-separated.
func AgentServers(ks []int) string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = ReplicaAgent(k).String()
	}
	return strings.Join(out, ",")
}

// ReplicaSecrets are the files the lab's replicas share: the agents'
// bootstrap token, the CA of the agent stream's identities, which the
// agents trust (--ca-file), and the API's certificate.
type ReplicaSecrets struct {
	Token, CACert, CAKey string
	API                  APITLS
}

// ReplicaArgv is the command line of the replica on server host k: bin
// (the flowlb binary's argv prefix) with the server role on k's address,
// the lab's database, the shared secrets, a data directory of its own and
// a replica id naming the host, then extra.
func ReplicaArgv(bin []string, k int, s ReplicaSecrets, dataDir string, extra ...string) []string {
	argv := append([]string{}, bin...)
	argv = append(argv, "server", "--listen", ReplicaAPI(k).String(), "--agent-listen", ReplicaAgent(k).String(),
		"--database", PostgresDSN, "--data-dir", dataDir, "--agent-token-file", s.Token,
		"--agent-ca-cert", s.CACert, "--agent-ca-key", s.CAKey, "--tls-cert", s.API.Cert, "--tls-key", s.API.Key,
		"--replica-id", ServerName(k))
	return append(argv, extra...)
}

// ServerHosts lists the indexes of the lab's server hosts.
func (l *Lab) ServerHosts() []int { return append([]int(nil), l.snapshot().Servers...) }

// ReplicaSecrets are the token and CA shared by the lab's replicas, in
// the lab's directory; the first call makes them. They exist before any
// replica starts, since replicas that found none would each make their
// own.
func (l *Lab) ReplicaSecrets() (ReplicaSecrets, error) {
	s := ReplicaSecrets{Token: filepath.Join(l.dir, "agent-token"),
		CACert: filepath.Join(l.dir, "agent-ca.crt"), CAKey: filepath.Join(l.dir, "agent-ca.key")}
	if _, err := os.Stat(s.Token); err != nil {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return s, err
		}
		if err := os.WriteFile(s.Token, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return s, fmt.Errorf("agent token: %w", err)
		}
	}
	if _, err := pki.LoadOrCreateCA(s.CACert, s.CAKey); err != nil {
		return s, fmt.Errorf("agents' CA: %w", err)
	}
	var err error
	s.API, err = l.APITLS()
	return s, err
}

// IdentityDir is where node n's agent keeps its identity, in the lab's
// directory (the lab's nodes share the machine's file system).
func (l *Lab) IdentityDir(node string) string { return filepath.Join(l.dir, "identity", node) }

// StartReplicas starts a flowlb server replica (ReplicaArgv, process
// ProcServer) in every server host and returns once each serves its API.
// The first starts alone: a replica starting on an empty database creates
// the default VIP subnets, and replicas doing that side by side could
// each create them. The lab needs the database (Options.Postgres).
func (l *Lab) StartReplicas(ctx context.Context, bin []string, extra ...string) error {
	ks := l.ServerHosts()
	if len(ks) == 0 {
		return errors.New("the lab has no server hosts (lab up --servers N)")
	}
	if l.Postgres() == nil {
		return ErrNoPostgres
	}
	secrets, err := l.ReplicaSecrets()
	if err != nil {
		return err
	}
	start := func(k int) error {
		dataDir := filepath.Join(l.dir, "data-"+ServerName(k))
		if _, err := l.Server(k).Start(ProcServer, ReplicaArgv(bin, k, secrets, dataDir, extra...)); err != nil {
			return err
		}
		return l.WaitReplica(ctx, k, replicaReadyTimeout)
	}
	if err := start(ks[0]); err != nil {
		return err
	}
	errs := make([]error, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks[1:] {
		wg.Go(func() { errs[i] = start(k) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitReplica waits until the replica on server host k answers its
// API's health check, from the fabric.
func (l *Lab) WaitReplica(ctx context.Context, k int, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	hc, err := l.APIClient(l.Fabric().Dial, time.Second)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	url := APIURL(ReplicaAPI(k)) + "/healthcheck"
	var last error
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("health check: %s", resp.Status)
		}
		last = err
		if !l.Server(k).Running(ProcServer) {
			return fmt.Errorf("replica on %s exited (log %s): %v", ServerName(k), l.LogPath(ServerName(k), ProcServer), last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica on %s not ready (log %s): %v", ServerName(k), l.LogPath(ServerName(k), ProcServer), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
