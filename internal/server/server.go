// Package server assembles one flowlb server process: the store, the
// LBaaS domain, the API with its Neutron subset, the agents' stream and
// the replica's background work. cmd/flowlb turns flags into Options; tests
// start several servers on one database in-process.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/flowlb/flowlb/internal/server/apimetrics"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/neutronapi"
	"github.com/flowlb/flowlb/internal/server/octavia"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/replica"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/tlscerts"
	"github.com/flowlb/flowlb/internal/shared/agentgrpc"
	"github.com/flowlb/flowlb/internal/shared/httpserve"
	"github.com/flowlb/flowlb/internal/shared/pki"
	"github.com/flowlb/flowlb/internal/shared/tlsciphers"
)

// Options configure a server; cmd/flowlb's flags document each.
type Options struct {
	Listen          string
	DataDir         string
	Database        string
	Auth            string
	DefaultProject  string
	VIPCIDR         string
	ExternalVIPCIDR string
	// VIPCIDR6 and ExternalVIPCIDR6 add an IPv6 subnet to the same two
	// networks, so that a load balancer has VIPs of both families
	// (additional_vips must share the VIP's network). Empty: none.
	VIPCIDR6         string
	ExternalVIPCIDR6 string
	AgentListen      string
	AgentTokenFile   string
	AckTimeout       time.Duration
	// StatsMetrics is the level of the statistics series on /metrics:
	// member, listener (default), loadbalancer or none.
	StatsMetrics string
	ReplicaID    string
	Network      string
	// L2CIDRs are the external VIP ranges answered on flat networks by
	// one node each (fanout.Options.L2Ranges).
	L2CIDRs []string
	// NeutronRegion and NeutronEndpoint locate the real Neutron of
	// --network neutron-api: the network endpoint of the region in
	// Keystone's catalog, or the endpoint given.
	NeutronRegion, NeutronEndpoint string
	// NeutronDeploymentID names this deployment in the mark on its VIP
	// ports (empty: the id the database holds, made once).
	NeutronDeploymentID string
	// L7 serves HTTP listeners, their L7 policies and HTTP pools with
	// every node's proxy (flow.Provider.L7).
	L7 bool
	// TLSCertificates is where TERMINATED_HTTPS listeners' certificates
	// are read: "barbican" (with L7 and Keystone auth), or "none" or ""
	// (such listeners are refused).
	TLSCertificates string
	// TLSRefresh is how often the certificates in use are read again
	// (0: DefaultTLSRefresh); a renewed one reaches the nodes then.
	TLSRefresh time.Duration
	// NeutronVIPPorts is how the VIP ports are made in Neutron
	// (neutronapi.PortStyle; empty: flowlb's own).
	NeutronVIPPorts string
	// NeutronSweepEvery is the time between sweeps of orphan VIP ports
	// (0: none); NeutronOrphanGrace the age below which a port is never
	// an orphan (at least MinOrphanGrace).
	NeutronSweepEvery, NeutronOrphanGrace time.Duration
	Keystone                              identity.KeystoneConfig
	PasswordFile                          string
	RBAC                                  string
	// TLSCert and TLSKey, if set, serve the API over TLS; the files are
	// read again when they change.
	TLSCert, TLSKey string
	// TLSHosts, if set instead, serve the API over TLS with a certificate
	// for these DNS names and IP addresses that the server issues itself
	// from the agents' CA, kept in memory and renewed; clients trust that
	// CA (ca.crt of the agents' Secret).
	TLSHosts []string
	// AgentCACert and AgentCAKey are the CA of the agents' identities,
	// shared by the replicas (default <data-dir>/agent-ca.crt and .key,
	// created if both are missing).
	AgentCACert, AgentCAKey string
	// IdentityTTL is the lifetime of a node identity (default 24 h).
	IdentityTTL time.Duration
	// HTTP bounds the API's clients (httpserve's defaults where zero).
	HTTP httpserve.Limits
	// LeaseTTL is the replica's lease (default 3 s): how soon the others
	// take over its pending changes if it dies.
	LeaseTTL time.Duration
	// ProviderAliases are "name=provider" pairs: load balancers created
	// with provider name are realized by provider (lbaas.Config).
	ProviderAliases []string
	// TLSCipherProhibitList are the cipher names, colon-separated, no
	// tls_ciphers may name (lbaas.Config.TLSCipherProhibitList).
	TLSCipherProhibitList string
}

// Server is a running server.
type Server struct {
	// APIAddr and AgentAddr are where it listens (useful with port 0).
	APIAddr, AgentAddr net.Addr
	// Replica names it among the replicas of the database.
	Replica string
	// Hub is its fan-out, for tests that look at what it sends.
	Hub *fanout.Hub

	log        *slog.Logger
	st         store.Store
	svc        *lbaas.Service
	certs      *tlscerts.Store // nil: no TLS listener is served
	link       hubLink
	rep        *replica.Replica
	http       *http.Server
	grpc       *grpc.Server
	stopLoops  func()
	served     chan error
	shutdownMu sync.Mutex
	down       bool
}

// Start opens the database, joins the cluster of replicas sharing it and
// serves the API and the agents' stream.
func Start(ctx context.Context, o Options, log *slog.Logger) (_ *Server, err error) {
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if o.TLSCert != "" && len(o.TLSHosts) > 0 {
		return nil, errors.New("give --tls-cert or --tls-hosts, not both")
	}
	authn, keystone, err := authMiddleware(o, log)
	if err != nil {
		return nil, err
	}
	certs, err := tlsCertificates(o, keystone)
	if err != nil {
		return nil, err
	}
	st, dsn, err := openStore(ctx, o, log)
	if err != nil {
		return nil, err
	}
	s := &Server{log: log, st: st, certs: certs, served: make(chan error, 1), stopLoops: func() {}}
	// What is started by then is stopped if the rest fails.
	defer func() {
		if err != nil {
			s.abort()
		}
	}()
	if o.Network == "neutron" || o.Network == "" {
		// The default VIP subnets are the embedded subset's; a real
		// Neutron has its own.
		if err := ensureVIPSubnets(ctx, st, o, log); err != nil {
			return nil, err
		}
	}
	if o.ReplicaID == "" {
		o.ReplicaID = replica.NewID()
	}
	s.Replica = o.ReplicaID
	provider := flow.New(nil)
	provider.OVN = o.NeutronVIPPorts == string(neutronapi.PortsOVN)
	provider.L7 = o.L7
	provider.TLS = s.certs != nil
	vips, err := vipAllocator(ctx, st, o, log)
	if err != nil {
		return nil, err
	}
	if s.svc, err = newService(st, vips, provider, s.certs, &s.link, o, log); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	ca, err := agentCA(o)
	if err != nil {
		return nil, err
	}
	security, _ := vips.(lbaas.PortSecurity)
	if err := s.serveAgents(ctx, provider, fanout.StoreSource{Store: st, Security: security}, ca, reg, o); err != nil {
		return nil, err
	}
	s.rep = replica.New(st, s.svc, s.Hub.Revision, replica.Options{ID: o.ReplicaID, Address: o.Listen, LeaseTTL: o.LeaseTTL, Log: log}, reg)
	if err := s.rep.Register(ctx); err != nil {
		return nil, fmt.Errorf("register replica %s: %w", o.ReplicaID, err)
	}
	loops := []func(context.Context){func(ctx context.Context) { s.activateOverdue(ctx, o.AckTimeout) }}
	if a, ok := vips.(*neutronapi.Allocator); ok {
		sw := neutronapi.NewSweeper(a, st, neutronapi.SweepOptions{Every: o.NeutronSweepEvery, Grace: o.NeutronOrphanGrace,
			Leads: s.rep.Leads, Log: log}, reg)
		loops = append(loops, sw.Run)
	}
	if s.certs != nil {
		every := o.TLSRefresh
		if every <= 0 {
			every = DefaultTLSRefresh
		}
		loops = append(loops, func(ctx context.Context) { s.refreshCertificates(ctx, every) })
	}
	s.stopLoops = runBackground(s.Hub, s.rep, loops...)
	ln, err := s.apiServer(reg, authn, keystone, o)
	if err != nil {
		return nil, err
	}
	s.APIAddr = ln.Addr()
	ln = httpserve.Serve(s.http, ln, o.HTTP, log)
	if o.TLSCert != "" || len(o.TLSHosts) > 0 {
		if err := s.serveTLS(o, ca); err != nil {
			ln.Close()
			return nil, err
		}
		ln = tls.NewListener(ln, s.http.TLSConfig)
	}
	go func() { s.served <- s.http.Serve(ln) }()
	log.Info("flowlb server listening", "address", s.APIAddr.String(), "database", redact(dsn), "auth", o.Auth, "replica", o.ReplicaID)
	return s, nil
}

// Wait returns when the API server fails.
func (s *Server) Wait() <-chan error { return s.served }

// Shutdown stops cleanly: requests in flight finish, completions already
// handed to the provider land, and the replica leaves the cluster at once,
// so that its agents and any change still pending are the others' now.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownMu.Lock()
	defer s.shutdownMu.Unlock()
	if s.down {
		return nil
	}
	s.down = true
	s.log.Info("shutting down")
	err := s.http.Shutdown(ctx)
	s.svc.Drain(ctx)
	s.grpc.Stop()
	s.stopLoops()
	if rerr := s.rep.Retire(ctx); rerr != nil {
		s.log.Warn("leaving the cluster", "err", rerr)
	}
	s.st.Close()
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// Crash stops at once, as a killed process would: connections are cut,
// nothing is drained or retired, and what it left pending waits for its
// lease to run out.
func (s *Server) Crash() {
	s.shutdownMu.Lock()
	defer s.shutdownMu.Unlock()
	if s.down {
		return
	}
	s.down = true
	s.abort()
}

func (s *Server) abort() {
	if s.http != nil {
		s.http.Close()
	}
	if s.grpc != nil {
		s.grpc.Stop()
	}
	s.stopLoops()
	s.st.Close()
}

// serveTLS sets the API server up for TLS: from the certificate files,
// or with a certificate issued from the agents' CA.
func (s *Server) serveTLS(o Options, ca *pki.CA) error {
	if o.TLSCert == "" {
		cfg, err := pki.APITLS(ca, o.TLSHosts, servingCertTTL)
		if err != nil {
			return fmt.Errorf("the API's certificate: %w", err)
		}
		s.http.TLSConfig = cfg
		return nil
	}
	cert, err := pki.LoadFileCertificate(o.TLSCert, o.TLSKey)
	if err != nil {
		return err
	}
	cert.OnError = func(err error) { s.log.Error("reloading the API certificate; serving the previous one", "err", err) }
	s.http.TLSConfig = cert.ServeTLS()
	return nil
}

// runBackground runs the fan-out's and the replica's loops, and more,
// until the returned stop is called.
func runBackground(hub *fanout.Hub, rep *replica.Replica, more ...func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = hub.Run(ctx) })
	wg.Go(func() { rep.Run(ctx) })
	for _, fn := range more {
		wg.Go(func() { fn(ctx) })
	}
	return func() { cancel(); wg.Wait() }
}

// DefaultTLSRefresh is how often the certificates in use are read again
// from Barbican.
const DefaultTLSRefresh = 5 * time.Minute

// refreshCertificates reads the certificates in use again every
// interval, and logs a change of each load balancer a renewed one
// serves (a listener's or a pool's), so that the fan-out compiles it with the new one and the
// nodes' proxies take it for their next connections.
func (s *Server) refreshCertificates(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	// pending are renewed references whose load balancers were not yet
	// logged: the store holds the new content already.
	var pending []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		renewed, err := s.certs.Refresh(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("reading the certificates in use again", "err", err)
		}
		changed := slices.Compact(slices.Sorted(slices.Values(append(pending, renewed...))))
		if len(changed) == 0 {
			continue
		}
		touched := 0
		_, err = s.st.Update(ctx, func(tx store.Tx) error {
			trees, err := lbaas.ReadFlowTrees(tx, nil, nil)
			if err != nil {
				return err
			}
			touched = 0
			for id, t := range trees {
				if slices.ContainsFunc(t.Listeners, func(l *lbaas.Listener) bool { return namesAny(l, changed) }) ||
					slices.ContainsFunc(t.Pools, func(p *lbaas.Pool) bool { return poolNamesAny(p, changed) }) {
					tx.Touch(id)
					touched++
				}
			}
			return nil
		})
		if err != nil {
			pending = changed
			s.log.Warn("renewed certificates not sent to the nodes; tried again at the next read", "err", err)
			continue
		}
		pending = nil
		s.log.Info("renewed certificates go to the nodes", "references", len(changed), "load_balancers", touched)
	}
}

// namesAny reports whether a listener names one of refs.
func namesAny(l *lbaas.Listener, refs []string) bool {
	in := func(p *string) bool { return p != nil && slices.Contains(refs, *p) }
	return in(l.DefaultTLSContainerRef) || in(l.ClientCATLSContainerRef) || in(l.ClientCRLContainerRef) ||
		slices.ContainsFunc(l.SNIContainerRefs, func(r string) bool { return slices.Contains(refs, r) })
}

// poolNamesAny reports whether a pool names one of refs.
func poolNamesAny(p *lbaas.Pool, refs []string) bool {
	in := func(r *string) bool { return r != nil && slices.Contains(refs, *r) }
	return in(p.TLSContainerRef) || in(p.CATLSContainerRef) || in(p.CRLContainerRef)
}

// activateOverdue makes ACTIVE, every ack timeout, the floating IPs whose
// wait for the agents was lost with a replica (neutron.ActivateOverdue).
func (s *Server) activateOverdue(ctx context.Context, ackTimeout time.Duration) {
	every := max(ackTimeout, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := neutron.ActivateOverdue(ctx, s.st, time.Now().Add(-every))
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("floating IPs whose wait for the agents was lost", "err", err)
		case n > 0:
			s.log.Info("floating IPs made ACTIVE after their wait for the agents was lost", "count", n)
		}
	}
}

// openStore opens the database: Database, or SQLite in the data
// directory.
func openStore(ctx context.Context, o Options, log *slog.Logger) (store.Store, string, error) {
	dsn := o.Database
	if dsn == "" {
		if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
			return nil, "", fmt.Errorf("create data directory: %w", err)
		}
		dsn = filepath.Join(o.DataDir, "flowlb.db")
	}
	st, err := store.Open(ctx, dsn, log)
	if err != nil {
		return nil, "", fmt.Errorf("open database: %w", err)
	}
	return st, dsn, nil
}

// ensureVIPSubnets creates the default VIP subnets that are missing.
func ensureVIPSubnets(ctx context.Context, st store.Store, o Options, log *slog.Logger) error {
	// The external network is router:external: floating IPs come from it.
	for _, d := range []struct {
		name, flag, cidr string
		v6               bool
		ensure           func(context.Context, store.Store, string, string) (neutron.Network, neutron.Subnet, error)
	}{
		{"flowlb-vip", "vip-cidr", o.VIPCIDR, false, neutron.EnsureDefault},
		{"flowlb-external", "external-vip-cidr", o.ExternalVIPCIDR, false, neutron.EnsureExternal},
		{"flowlb-vip", "vip-cidr6", o.VIPCIDR6, true, neutron.EnsureDefault},
		{"flowlb-external", "external-vip-cidr6", o.ExternalVIPCIDR6, true, neutron.EnsureExternal},
	} {
		if d.cidr == "" {
			continue
		}
		if p, err := netip.ParsePrefix(d.cidr); err == nil && d.v6 != p.Addr().Is6() {
			return fmt.Errorf("--%s %s: not an IPv%s prefix", d.flag, d.cidr, map[bool]string{false: "4", true: "6"}[d.v6])
		}
		net, sub, err := d.ensure(ctx, st, d.name, d.cidr)
		if err != nil {
			return fmt.Errorf("default VIP subnet %s: %w", d.name, err)
		}
		log.Info("VIP subnet ready", "network", d.name, "network_id", net.ID, "subnet", sub.Name, "subnet_id", sub.ID, "cidr", d.cidr)
	}
	return nil
}

// hubLink hands the domain's changes to the fan-out hub, which is made
// after the domain: each change's tree as its write produced it, for the
// hub to compile instead of reading it back, and a completion's question
// whether it changes what the agents get (the hub compares digests).
// Before the hub is set, nothing is handed over and every completion is
// logged.
type hubLink struct{ hub atomic.Pointer[fanout.Hub] }

func (l *hubLink) written(w lbaas.Written) {
	if h := l.hub.Load(); h != nil {
		h.Written(w)
	}
}

func (l *hubLink) flowsUnchanged(lbID string, change int64, t *lbaas.Tree) bool {
	h := l.hub.Load()
	return h != nil && h.FlowsUnchanged(lbID, change, t)
}

// MinOrphanGrace bounds --neutron-orphan-grace from below: a create
// makes at most four calls to Neutron of 30 s each (neutronapi), and its
// transaction may be retried.
const MinOrphanGrace = 10 * time.Minute

// vipAllocator is the Network's VIP allocation: the Neutron subset's, a
// real Neutron's (neutron-api), or none (noop).
func vipAllocator(ctx context.Context, st store.Store, o Options, log *slog.Logger) (lbaas.VIPAllocator, error) {
	switch o.Network {
	case "neutron", "":
		return neutron.NewAllocator(), nil
	case "noop":
		log.Warn("--network noop: VIPs are not allocated and operating statuses stay OFFLINE; for API conformance runs only")
		return neutron.NoopAllocator{}, nil
	case "neutron-api":
		kc, err := keystoneConfig(o)
		if err != nil {
			return nil, err
		}
		if kc.URL == "" && o.NeutronEndpoint == "" {
			return nil, errors.New("--network neutron-api needs --keystone-url and the service user's credentials (--keystone-user, --keystone-password...)")
		}
		authURL := strings.TrimRight(kc.URL, "/")
		if authURL != "" && !strings.HasSuffix(authURL, "/v3") {
			authURL += "/v3"
		}
		if o.NeutronSweepEvery > 0 && o.NeutronOrphanGrace < MinOrphanGrace {
			return nil, fmt.Errorf("--neutron-orphan-grace %s: at least %s, longer than any create of a load balancer takes", o.NeutronOrphanGrace, MinOrphanGrace)
		}
		id := o.NeutronDeploymentID
		if id == "" {
			if id, err = neutronapi.DeploymentID(ctx, st); err != nil {
				return nil, err
			}
		}
		a, err := neutronapi.New(ctx, neutronapi.Options{AuthURL: authURL, User: kc.User, Password: kc.Password,
			UserDomain: kc.UserDomain, Project: kc.Project, ProjectDomain: kc.ProjectDomain,
			Region: o.NeutronRegion, Endpoint: o.NeutronEndpoint, DeploymentID: id, Ports: neutronapi.PortStyle(o.NeutronVIPPorts), Log: log})
		if err != nil {
			return nil, err
		}
		log.Info("VIPs from Neutron", "keystone", authURL, "user", kc.User, "region", o.NeutronRegion, "vip_ports", a.Style(),
			"mark", a.Mark(), "orphan_sweep_every", o.NeutronSweepEvery, "orphan_grace", o.NeutronOrphanGrace)
		return a, nil
	}
	return nil, fmt.Errorf("unknown --network %q: use neutron, neutron-api or noop", o.Network)
}

// newService is the LBaaS domain with the flow provider and the VIP
// allocation.
func newService(st store.Store, vips lbaas.VIPAllocator, provider *flow.Provider, certs *tlscerts.Store, link *hubLink, o Options, log *slog.Logger) (*lbaas.Service, error) {
	aliases, err := parseAliases(o.ProviderAliases)
	if err != nil {
		return nil, err
	}
	cfg := lbaas.Config{DefaultProvider: flow.Name, Replica: o.ReplicaID, ProviderAliases: aliases,
		Written: link.written, FlowsUnchanged: link.flowsUnchanged, TLSCipherProhibitList: tlsciphers.Names(o.TLSCipherProhibitList)}
	if certs != nil {
		cfg.Certificates = certs
	}
	if _, noop := vips.(neutron.NoopAllocator); noop {
		// No VIP is on any network, so nothing is measured either.
		cfg.Unmeasured = true
	}
	return lbaas.New(st, vips, []lbaas.Provider{provider}, cfg, log)
}

// parseAliases reads --provider-alias pairs.
func parseAliases(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		alias, target, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || alias == "" || target == "" {
			return nil, fmt.Errorf("--provider-alias %q: want name=provider, e.g. amphora=%s", p, flow.Name)
		}
		if prev, dup := out[alias]; dup && prev != target {
			return nil, fmt.Errorf("--provider-alias: %s given as %s and %s", alias, prev, target)
		}
		out[alias] = target
	}
	return out, nil
}

const (
	// servingCertTTL is the lifetime of a replica's own serving identity
	// and of the API certificate it issues itself (TLSHosts), issued in
	// memory from the CA and replaced past two thirds of it.
	servingCertTTL = 7 * 24 * time.Hour
	// agentMaxMessage bounds what an agent may send in one message.
	agentMaxMessage = 1 << 20
	// agentMaxStreams bounds the calls one agent connection may have open
	// (a subscription and an enrollment).
	agentMaxStreams = 4
)

// agentKeepalive is how the server finds agents whose node died without
// closing its streams: a ping after 30 s of silence, given 10 s; with L2
// ranges, whose VIPs move only once the server lets the dead node's
// stream go, a ping after 1 s, given 500 ms.
func agentKeepalive(l2 bool) keepalive.ServerParameters {
	if l2 {
		return keepalive.ServerParameters{Time: time.Second, Timeout: 500 * time.Millisecond}
	}
	return keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}
}

// Agents ping at most this often to notice a replica that vanished
// without closing their streams; the server allows it.
const agentPingMin = 10 * time.Second

// serveAgents starts the fan-out hub and the agent stream; the flow
// provider realizes changes through the hub.
func (s *Server) serveAgents(ctx context.Context, provider *flow.Provider, src fanout.TreeSource, ca *pki.CA, reg *prometheus.Registry, o Options) error {
	token, err := agentToken(o)
	if err != nil {
		return err
	}
	var l2 []netip.Prefix
	for _, c := range o.L2CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--l2-cidrs: %w", err)
		}
		l2 = append(l2, p.Masked())
	}
	serverTLS, err := pki.ServerTLS(ca, o.ReplicaID, servingCertTTL)
	if err != nil {
		return fmt.Errorf("agent stream TLS: %w", err)
	}
	hubOpts := fanout.Options{Replica: o.ReplicaID, Token: token,
		Identities: ca, IdentityTTL: o.IdentityTTL, AckTimeout: o.AckTimeout, L2Ranges: l2, Registerer: reg, Log: s.log}
	if s.certs != nil {
		hubOpts.Certificates = s.certs
	}
	// SQLite's one writer is this server: no other replica serves agents.
	if sw, ok := s.st.(interface{ SingleWriter() bool }); ok && sw.SingleWriter() {
		hubOpts.Alone = true
	}
	hub, err := fanout.NewHub(ctx, s.st, src, hubOpts)
	if err != nil {
		return err
	}
	s.Hub = hub
	s.link.hub.Store(hub)
	provider.Realizer = hub
	// Agents' health verdicts become member operating statuses, and the
	// flows follow them.
	hub.SetHealthSink(s.svc.SetMemberHealth)
	hub.SetStatsSink(s.st.AddStats)
	ln, err := net.Listen("tcp", o.AgentListen)
	if err != nil {
		return fmt.Errorf("agent listener: %w", err)
	}
	s.AgentAddr = ln.Addr()
	s.grpc = grpc.NewServer(append(agentgrpc.ServerOptions(), grpc.Creds(credentials.NewTLS(serverTLS)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: agentPingMin, PermitWithoutStream: true}),
		// An agent that vanished without closing its connection is let go.
		grpc.KeepaliveParams(agentKeepalive(len(l2) > 0)),
		// Agents send acks, health reports and certificate requests: small.
		grpc.MaxRecvMsgSize(agentMaxMessage), grpc.MaxConcurrentStreams(agentMaxStreams))...)
	hub.Register(s.grpc)
	go func() { _ = s.grpc.Serve(ln) }()
	s.log.Info("agent stream listening", "address", s.AgentAddr.String())
	return nil
}

// apiServer builds the HTTP server of the API (with the Neutron subset),
// the dashboard and /metrics, and its listener.
func (s *Server) apiServer(reg *prometheus.Registry, authn func(http.Handler) http.Handler, k *identity.Keystone, o Options) (net.Listener, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := apimetrics.New(reg)
	apimetrics.RegisterObjects(reg, s.svc.CountByStatus)
	level := o.StatsMetrics
	if level == "" {
		level = apimetrics.StatsListener
	}
	if err := apimetrics.RegisterStats(reg, level, s.st.AllStats, s.st.AllMemberStats); err != nil {
		return nil, err
	}
	// Floating IPs on VIP ports turn ACTIVE as load balancers do: once
	// every agent has programmed them.
	api := octavia.New(s.svc, neutron.NewHandler(s.st, s.log, neutron.WithRealizer(s.Hub)), s.log,
		octavia.Config{Announced: func(id string) octavia.Announced { return octavia.Announced(s.Hub.Announced(id)) }})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", authn(api))
	dash := s.dashboard(api, authn, k, o)
	mux.Handle("/dashboard", dash)
	mux.Handle("/dashboard/", dash)
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s.http = &http.Server{Handler: metrics.Wrap(mux)}
	return ln, nil
}

// agentCA loads the agents' CA, creating it on first start.
func agentCA(o Options) (*pki.CA, error) {
	cert, key := o.AgentCACert, o.AgentCAKey
	if cert == "" {
		cert = filepath.Join(o.DataDir, "agent-ca.crt")
	}
	if key == "" {
		key = filepath.Join(o.DataDir, "agent-ca.key")
	}
	ca, err := pki.LoadOrCreateCA(cert, key)
	if err != nil {
		return nil, fmt.Errorf("agents' CA: %w", err)
	}
	return ca, nil
}

// redact hides a DSN's password for logging.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// agentToken reads the agents' bootstrap token, creating a random one
// (readable by root only) on first start.
func agentToken(o Options) (string, error) {
	path := o.AgentTokenFile
	if path == "" {
		path = filepath.Join(o.DataDir, "agent-token")
	}
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	t := hex.EncodeToString(buf)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write agent token: %w", err)
	}
	return t, nil
}

// keystoneConfig is the service user's Keystone configuration, its
// password read from --keystone-password-file if not given.
func keystoneConfig(o Options) (identity.KeystoneConfig, error) {
	kc := o.Keystone
	if kc.Password == "" && o.PasswordFile != "" {
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return kc, fmt.Errorf("--keystone-password-file: %w", err)
		}
		kc.Password = strings.TrimSpace(string(b))
	}
	return kc, nil
}

// authMiddleware builds the Auth mode: every request gets a caller, or
// is refused before it reaches the API.
func authMiddleware(o Options, log *slog.Logger) (func(http.Handler) http.Handler, *identity.Keystone, error) {
	switch o.Auth {
	case "noauth", "":
		return func(h http.Handler) http.Handler { return identity.NoAuth(o.DefaultProject, h) }, nil, nil
	case "keystone":
	default:
		return nil, nil, fmt.Errorf("unknown --auth %q: use noauth or keystone", o.Auth)
	}
	personas, err := identity.ParsePersonas(o.RBAC)
	if err != nil {
		return nil, nil, err
	}
	kc, err := keystoneConfig(o)
	if err != nil {
		return nil, nil, err
	}
	k, err := identity.NewKeystone(kc)
	if err != nil {
		return nil, nil, err
	}
	// Version discovery and the health check answer without a token, as
	// Octavia's do.
	public := func(r *http.Request) bool {
		p := strings.Trim(r.URL.Path, "/")
		return r.Method == http.MethodGet && (p == "" || p == "v2" || p == "v2.0" || p == "healthcheck")
	}
	policy := identity.Policy{Personas: personas}
	return func(h http.Handler) http.Handler { return identity.KeystoneAuth(k, policy, public, log, h) }, k, nil
}

// tlsCertificates is where TERMINATED_HTTPS listeners' certificates are
// read (--tls-certificates): Barbican, with each caller's token and the
// service user's, or nowhere.
func tlsCertificates(o Options, k *identity.Keystone) (*tlscerts.Store, error) {
	switch o.TLSCertificates {
	case "", "none":
		return nil, nil
	case "barbican":
	default:
		return nil, fmt.Errorf("--tls-certificates %q: use barbican", o.TLSCertificates)
	}
	if k == nil {
		return nil, errors.New("--tls-certificates barbican needs --auth keystone: certificates are read with the caller's token")
	}
	if !o.L7 {
		return nil, errors.New("--tls-certificates needs --l7: the nodes' proxies terminate TLS")
	}
	b := &tlscerts.Barbican{HTTP: &http.Client{Timeout: 30 * time.Second}, ServiceUser: k.ServiceUserID}
	return tlscerts.NewStore(b, k.ServiceToken), nil
}
