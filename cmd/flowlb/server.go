package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/flowlb/flowlb/internal/apimetrics"
	"github.com/flowlb/flowlb/internal/fanout"
	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/neutron"
	"github.com/flowlb/flowlb/internal/octavia"
	"github.com/flowlb/flowlb/internal/provider/flow"
	"github.com/flowlb/flowlb/internal/replica"
	"github.com/flowlb/flowlb/internal/store"
)

type serverOptions struct {
	listen          string
	dataDir         string
	database        string
	auth            string
	defaultProject  string
	vipCIDR         string
	externalVIPCIDR string
	logLevel        string
	agentListen     string
	agentTokenFile  string
	ackTimeout      time.Duration
	replicaID       string
	network         string
	keystone        identity.KeystoneConfig
	passwordFile    string
	rbac            string
}

func init() {
	o := serverOptions{}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Octavia v2-compatible LBaaS API server",
		Long: `Run the LBaaS API server. With no flags it listens on 127.0.0.1:9876, keeps an
embedded SQLite database in the data directory and serves noauth requests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServer(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:9876", "address to serve the API on")
	f.StringVar(&o.dataDir, "data-dir", defaultDataDir(), "directory of the embedded SQLite database")
	f.StringVar(&o.database, "database", "", "database DSN: a SQLite path or postgres://... (default: <data-dir>/flowlb.db)")
	f.StringVar(&o.auth, "auth", "noauth", "authentication mode: noauth (every caller is admin) or keystone (X-Auth-Token validated by Keystone v3, Octavia's RBAC)")
	f.StringVar(&o.keystone.URL, "keystone-url", "", "Keystone v3 URL, e.g. http://127.0.0.1:5000 (--auth keystone)")
	f.StringVar(&o.keystone.User, "keystone-user", "octavia", "the service user that validates tokens")
	f.StringVar(&o.keystone.Password, "keystone-password", "", "its password (or --keystone-password-file, or $FLOWLB_KEYSTONE_PASSWORD)")
	f.StringVar(&o.passwordFile, "keystone-password-file", "", "file holding the service user's password")
	f.StringVar(&o.keystone.UserDomain, "keystone-user-domain", "Default", "the service user's domain name")
	f.StringVar(&o.keystone.Project, "keystone-project", "service", "the service user's project name")
	f.StringVar(&o.keystone.ProjectDomain, "keystone-project-domain", "Default", "the service project's domain name")
	f.DurationVar(&o.keystone.CacheTime, "token-cache-time", 5*time.Minute, "how long a validated token is trusted before Keystone is asked again (never past its expiry)")
	f.StringVar(&o.rbac, "rbac", "advanced", "RBAC persona set with --auth keystone: advanced (load-balancer_* roles) or keystone_default_roles (reader/member/admin)")
	f.StringVar(&o.defaultProject, "default-project", "default", "project of noauth requests without X-Project-Id")
	f.StringVar(&o.network, "network", "neutron", "VIP addresses: neutron (the built-in Neutron subset) or noop (any subnet accepted, nothing allocated, operating statuses not measured: API conformance runs only, never with agents)")
	f.StringVar(&o.vipCIDR, "vip-cidr", "198.19.0.0/17", "CIDR of the default VIP subnet created at start (empty: none)")
	f.StringVar(&o.externalVIPCIDR, "external-vip-cidr", "198.19.128.0/17", "CIDR of the default external VIP subnet created at start (empty: none)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&o.agentListen, "agent-listen", "127.0.0.1:9877", "address of the agent stream (gRPC)")
	f.StringVar(&o.agentTokenFile, "agent-token-file", "", "file holding the agents' bootstrap token, created if missing (default: <data-dir>/agent-token)")
	f.DurationVar(&o.ackTimeout, "ack-timeout", 10*time.Second, "how long a change waits for every live agent of the cluster before it turns ACTIVE anyway")
	f.StringVar(&o.replicaID, "replica-id", "", "this server's name among the replicas sharing the database (default: host name and a random suffix, new at every start)")
	rootCmd.AddCommand(cmd)
}

func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/flowlb"
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "share", "flowlb")
	}
	return "flowlb-data"
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func runServer(ctx context.Context, o serverOptions) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	authn, err := authMiddleware(o, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, dsn, err := openStore(ctx, o, log)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := ensureVIPSubnets(ctx, st, o, log); err != nil {
		return err
	}
	if o.replicaID == "" {
		o.replicaID = replica.NewID()
	}
	provider := flow.New(nil)
	svc, err := newService(st, provider, o, log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	hub, stopAgents, err := serveAgents(ctx, st, svc, provider, reg, o, log)
	if err != nil {
		return err
	}
	defer stopAgents()
	rep := replica.New(st, svc, hub.Revision, replica.Options{ID: o.replicaID, Address: o.listen, Log: log}, reg)
	if err := rep.Register(ctx); err != nil {
		return fmt.Errorf("register replica %s: %w", o.replicaID, err)
	}
	defer runBackground(hub, rep)()
	srv, ln, err := apiServer(st, svc, reg, authn, o, log)
	if err != nil {
		return err
	}
	log.Info("flowlb server listening", "address", ln.Addr().String(), "database", redact(dsn), "auth", o.auth, "replica", o.replicaID)
	err = serveUntilDone(ctx, srv, ln, svc, log)
	// Gone from the cluster at once: its agents and any change still
	// pending are the other replicas' now.
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rerr := rep.Retire(rctx); rerr != nil {
		log.Warn("leaving the cluster", "err", rerr)
	}
	return err
}

// runBackground runs the fan-out's and the replica's loops until the
// returned stop is called.
func runBackground(hub *fanout.Hub, rep *replica.Replica) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = hub.Run(ctx) }()
	go func() { defer wg.Done(); rep.Run(ctx) }()
	return func() { cancel(); wg.Wait() }
}

// openStore opens the database: --database, or SQLite in the data
// directory.
func openStore(ctx context.Context, o serverOptions, log *slog.Logger) (store.Store, string, error) {
	dsn := o.database
	if dsn == "" {
		if err := os.MkdirAll(o.dataDir, 0o750); err != nil {
			return nil, "", fmt.Errorf("create data directory: %w", err)
		}
		dsn = filepath.Join(o.dataDir, "flowlb.db")
	}
	st, err := store.Open(ctx, dsn, log)
	if err != nil {
		return nil, "", fmt.Errorf("open database: %w", err)
	}
	return st, dsn, nil
}

// ensureVIPSubnets creates the default VIP subnets that are missing.
func ensureVIPSubnets(ctx context.Context, st store.Store, o serverOptions, log *slog.Logger) error {
	for _, d := range []struct{ name, cidr string }{{"flowlb-vip", o.vipCIDR}, {"flowlb-external", o.externalVIPCIDR}} {
		if d.cidr == "" {
			continue
		}
		net, sub, err := neutron.EnsureDefault(ctx, st, d.name, d.cidr)
		if err != nil {
			return fmt.Errorf("default VIP subnet %s: %w", d.name, err)
		}
		log.Info("VIP subnet ready", "network", d.name, "network_id", net.ID, "subnet_id", sub.ID, "cidr", d.cidr)
	}
	return nil
}

// newService is the LBaaS domain with the flow provider and the --network
// VIP allocation.
func newService(st store.Store, provider *flow.Provider, o serverOptions, log *slog.Logger) (*lbaas.Service, error) {
	var vips lbaas.VIPAllocator = neutron.Allocator{}
	cfg := lbaas.Config{DefaultProvider: flow.Name, Replica: o.replicaID}
	switch o.network {
	case "neutron":
	case "noop":
		vips = neutron.NoopAllocator{}
		// No VIP is on any network, so nothing is measured either.
		cfg.Unmeasured = true
		log.Warn("--network noop: VIPs are not allocated and operating statuses stay OFFLINE; for API conformance runs only")
	default:
		return nil, fmt.Errorf("unknown --network %q: use neutron or noop", o.network)
	}
	return lbaas.New(st, vips, []lbaas.Provider{provider}, cfg, log)
}

// serveAgents starts the fan-out hub and the agent stream; the flow
// provider realizes changes through the hub. It returns the stream's stop.
func serveAgents(ctx context.Context, st store.Store, svc *lbaas.Service, provider *flow.Provider, reg *prometheus.Registry, o serverOptions, log *slog.Logger) (*fanout.Hub, func(), error) {
	token, err := agentToken(o)
	if err != nil {
		return nil, nil, err
	}
	hub, err := fanout.NewHub(ctx, st, fanout.ServiceSource{Svc: svc}, fanout.Options{Replica: o.replicaID, Token: token,
		AckTimeout: o.ackTimeout, Registerer: reg, Log: log})
	if err != nil {
		return nil, nil, err
	}
	provider.Realizer = hub
	// Agents' health verdicts become member operating statuses, and the
	// flows follow them.
	hub.SetHealthSink(svc.SetMemberHealth)
	agentLn, err := net.Listen("tcp", o.agentListen)
	if err != nil {
		return nil, nil, fmt.Errorf("agent listener: %w", err)
	}
	grpcSrv := grpc.NewServer()
	hub.Register(grpcSrv)
	go func() { _ = grpcSrv.Serve(agentLn) }()
	log.Info("agent stream listening", "address", agentLn.Addr().String())
	return hub, grpcSrv.Stop, nil
}

// apiServer builds the HTTP server of the API (with the Neutron subset)
// and /metrics, and its listener.
func apiServer(st store.Store, svc *lbaas.Service, reg *prometheus.Registry, authn func(http.Handler) http.Handler, o serverOptions, log *slog.Logger) (*http.Server, net.Listener, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := apimetrics.New(reg)
	apimetrics.RegisterObjects(reg, svc.CountByStatus)
	api := octavia.New(svc, neutron.NewHandler(st, log), log, octavia.Config{})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", authn(api))
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	return &http.Server{Handler: metrics.Wrap(mux), ReadHeaderTimeout: 10 * time.Second}, ln, nil
}

// serveUntilDone serves until ctx ends, then shuts down: requests in
// flight finish, and completions already handed to the provider land
// before the store closes.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, svc *lbaas.Service, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	svc.Drain(sctx)
	return nil
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
func agentToken(o serverOptions) (string, error) {
	path := o.agentTokenFile
	if path == "" {
		path = filepath.Join(o.dataDir, "agent-token")
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

// authMiddleware builds the --auth mode: every request gets a caller, or
// is refused before it reaches the API.
func authMiddleware(o serverOptions, log *slog.Logger) (func(http.Handler) http.Handler, error) {
	switch o.auth {
	case "noauth":
		return func(h http.Handler) http.Handler { return identity.NoAuth(o.defaultProject, h) }, nil
	case "keystone":
	default:
		return nil, fmt.Errorf("unknown --auth %q: use noauth or keystone", o.auth)
	}
	personas, err := identity.ParsePersonas(o.rbac)
	if err != nil {
		return nil, err
	}
	kc := o.keystone
	if kc.Password == "" && o.passwordFile != "" {
		b, err := os.ReadFile(o.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--keystone-password-file: %w", err)
		}
		kc.Password = strings.TrimSpace(string(b))
	}
	if kc.Password == "" {
		kc.Password = os.Getenv("FLOWLB_KEYSTONE_PASSWORD")
	}
	k, err := identity.NewKeystone(kc)
	if err != nil {
		return nil, err
	}
	// Version discovery and the health check answer without a token, as
	// Octavia's do.
	public := func(r *http.Request) bool {
		p := strings.Trim(r.URL.Path, "/")
		return r.Method == http.MethodGet && (p == "" || p == "v2" || p == "v2.0" || p == "healthcheck")
	}
	policy := identity.Policy{Personas: personas}
	return func(h http.Handler) http.Handler { return identity.KeystoneAuth(k, policy, public, log, h) }, nil
}
