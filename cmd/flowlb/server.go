package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/shared/config"
)

func init() { rootCmd.AddCommand(newServerCmd()) }

func newServerCmd() *cobra.Command {
	o := server.Options{}
	var logLevel, agentSecret string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Octavia v2-compatible LBaaS API server",
		Long: `Run the LBaaS API server. With no flags it listens on 127.0.0.1:9876, keeps an
embedded SQLite database in the data directory and serves noauth requests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if agentSecret != "" {
				if err := agentSecretFiles(cmd.Context(), &o, agentSecret); err != nil {
					return err
				}
			}
			return runServer(cmd.Context(), o, logLevel)
		},
	}
	serverFlags(cmd.Flags(), &o, &logLevel, &agentSecret)
	cmd.AddCommand(newServerNodeCmd())
	return withConfig(cmd)
}

// serverFlags are the server's flags, into o: the node subcommands take
// them too, so that they read the server's own configuration file and
// find its database.
func serverFlags(f *pflag.FlagSet, o *server.Options, logLevel, agentSecret *string) {
	f.StringVar(&o.Listen, "listen", "127.0.0.1:9876", "address to serve the API on")
	f.StringVar(&o.DataDir, "data-dir", defaultDataDir(), "directory of the embedded SQLite database")
	f.StringVar(&o.Database, "database", "", "database DSN: a SQLite path or postgres://... (default: <data-dir>/flowlb.db)")
	f.StringVar(&o.Auth, "auth", "noauth", "authentication mode: noauth (every caller is admin) or keystone (X-Auth-Token validated by Keystone v3, Octavia's RBAC)")
	f.StringVar(&o.Keystone.URL, "keystone-url", "", "Keystone v3 URL, e.g. http://127.0.0.1:5000 (--auth keystone)")
	f.StringVar(&o.Keystone.User, "keystone-user", "octavia", "the service user that validates tokens")
	f.StringVar(&o.Keystone.Password, "keystone-password", "", "its password (or --keystone-password-file, or $FLOWLB_KEYSTONE_PASSWORD)")
	f.StringVar(&o.PasswordFile, "keystone-password-file", "", "file holding the service user's password")
	f.StringVar(&o.Keystone.UserDomain, "keystone-user-domain", "Default", "the service user's domain name")
	f.StringVar(&o.Keystone.Project, "keystone-project", "service", "the service user's project name")
	f.StringVar(&o.Keystone.ProjectDomain, "keystone-project-domain", "Default", "the service project's domain name")
	f.DurationVar(&o.Keystone.CacheTime, "token-cache-time", 5*time.Minute, "how long a validated token is trusted before Keystone is asked again (never past its expiry)")
	f.StringVar(&o.RBAC, "rbac", "advanced", "RBAC persona set with --auth keystone: advanced (load-balancer_* roles) or keystone_default_roles (reader/member/admin)")
	f.StringVar(&o.DefaultProject, "default-project", "default", "project of noauth requests without X-Project-Id")
	f.StringVar(&o.Network, "network", "neutron", "VIP addresses: neutron (the built-in Neutron subset), neutron-api (ports of a real Neutron, found in Keystone's catalog with the --keystone-* service user) or noop (any subnet accepted, nothing allocated, operating statuses not measured: API conformance runs only, never with agents)")
	f.StringVar(&o.NeutronRegion, "neutron-region", "", "with --network neutron-api, the region of the network endpoint in Keystone's catalog (default: any)")
	f.StringVar(&o.NeutronEndpoint, "neutron-endpoint", "", "with --network neutron-api, the Neutron URL to use instead of the catalog's (e.g. http://10.0.0.5:9696)")
	f.StringVar(&o.NeutronDeploymentID, "neutron-deployment-id", "", "with --network neutron-api, this deployment's name in the tag flowlb-deployment=<id> on the VIP ports it makes, which it alone deletes, reuses and sweeps (default: a random id made once and kept in the database; set it when two deployments' databases were copied from one another)")
	f.BoolVar(&o.L7, "l7", false, "serve HTTP listeners, their L7 policies and HTTP pools (ROUND_ROBIN, LEAST_CONNECTIONS per node, SOURCE_IP; cookie persistence; X-Forwarded headers) with the proxy of every node's agent, to which the data planes steer the listeners' connections; every agent must run with --l7-ports (off: such listeners get Octavia's 501, as do TLS listeners either way)")
	f.StringVar(&o.TLSCertificates, "tls-certificates", "none", "barbican: serve TERMINATED_HTTPS listeners and the certificates of pools' TLS to members (with --l7 and --auth keystone), reading them from Barbican as Octavia does: with the caller's token when a listener or pool names them (granting the service user read access), as the service user when the data plane needs them; keys are held in memory and reach the nodes only over the agents' mutual-TLS stream (none: such listeners and pools get Octavia's 501; tls_enabled alone needs no certificate)")
	f.DurationVar(&o.TLSRefresh, "tls-refresh-interval", server.DefaultTLSRefresh, "with --tls-certificates barbican: how often the certificates in use are read again; one renewed in Barbican reaches the nodes then")
	f.StringVar(&o.NeutronVIPPorts, "neutron-vip-ports", "flowlb", "with --network neutron-api, how VIP ports are made: flowlb (named flowlb-lb-<id>, device_owner flowlb:vip) or ovn (named ovn-lb-vip-<id> with no device_owner, as ovn-octavia-provider makes them, so that Neutron's ML2/OVN leaves them without switch-port addresses and OVN's routers answer for the VIPs: for load balancers an agent --dataplane ovn serves)")
	f.DurationVar(&o.NeutronSweepEvery, "neutron-orphan-sweep", 10*time.Minute, "with --network neutron-api, how often one replica deletes this deployment's VIP ports whose load balancer does not exist (left by a crash during a create); 0: never")
	f.DurationVar(&o.NeutronOrphanGrace, "neutron-orphan-grace", time.Hour, "with --network neutron-api, the age (Neutron's created_at) below which a VIP port is never swept: longer than any create takes (at least 10m)")
	f.StringVar(&o.VIPCIDR, "vip-cidr", "198.19.0.0/17", "CIDR of the default VIP subnet created at start (empty: none)")
	f.StringVar(&o.ExternalVIPCIDR, "external-vip-cidr", "198.19.128.0/17", "CIDR of the default external VIP subnet created at start (empty: none)")
	f.StringVar(&o.VIPCIDR6, "vip-cidr6", "", "IPv6 CIDR of a second default VIP subnet, on the network of --vip-cidr, created at start (empty: none; e.g. 2001:2:0:8000::/65)")
	f.StringVar(&o.ExternalVIPCIDR6, "external-vip-cidr6", "", "IPv6 CIDR of a second default external VIP subnet, on the network of --external-vip-cidr, created at start (empty: none; e.g. 2001:2:0:8000:8000::/65)")
	f.StringVar(logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&o.AgentListen, "agent-listen", "127.0.0.1:9877", "address of the agent stream (gRPC)")
	f.StringVar(&o.AgentTokenFile, "agent-token-file", "", "file holding the agents' bootstrap token, created if missing (default: <data-dir>/agent-token); a node presents it once, to get its identity")
	f.StringVar(&o.AgentCACert, "agent-ca-cert", "", "CA certificate of the agents' and replicas' identities, created with its key if both are missing (default: <data-dir>/agent-ca.crt); replicas share it, agents trust it (--ca-file)")
	f.StringVar(&o.AgentCAKey, "agent-ca-key", "", "the CA's private key (default: <data-dir>/agent-ca.key)")
	f.StringVar(agentSecret, "agent-secret", "", "NAMESPACE/NAME: keep the agents' CA and token in Kubernetes Secrets NAME-ca (replicas) and NAME (ca.crt and token, for agents), made by the first replica to start (in-cluster config or $KUBECONFIG); overrides --agent-ca-cert, --agent-ca-key and --agent-token-file")
	f.DurationVar(&o.IdentityTTL, "agent-identity-ttl", 24*time.Hour, "lifetime of a node's identity; agents renew it past two thirds")
	f.DurationVar(&o.HTTP.Read, "http-read-timeout", 60*time.Second, "longest time to read a request, body included (its headers: 10 s)")
	f.DurationVar(&o.HTTP.Write, "http-write-timeout", 60*time.Second, "longest time to write a response")
	f.DurationVar(&o.HTTP.Idle, "http-idle-timeout", 60*time.Second, "how long a keep-alive connection may wait for its next request")
	f.IntVar(&o.HTTP.MaxConns, "max-connections", 0, "cap on open API connections; at the cap a new one replaces the one idle the longest (default: the descriptor limit less 256)")
	f.StringVar(&o.TLSCert, "tls-cert", "", "serve the API over TLS with this certificate (PEM, the chain after the leaf); read again when it changes")
	f.StringVar(&o.TLSKey, "tls-key", "", "the API certificate's private key (PEM)")
	f.StringSliceVar(&o.TLSHosts, "tls-hosts", nil, "instead of --tls-cert: serve the API over TLS with a certificate for these DNS names and IP addresses (comma-separated or repeated) issued from the agents' CA, kept in memory (valid a week, renewed past two thirds); clients trust that CA (ca.crt of --agent-secret's Secret, or --agent-ca-cert)")
	f.StringSliceVar(&o.L2CIDRs, "l2-cidrs", nil, "external VIP ranges of flat networks without routers: each VIP within them is given to one node that can serve it (a local-only one to a node with a backend; spread over the nodes; moved when that node's agent is gone), whose agent answers ARP and neighbour discovery for it on its --l2-interface; agents are then pinged every second to find dead nodes (default: none)")
	f.DurationVar(&o.AckTimeout, "ack-timeout", 10*time.Second, "how long a change waits for every live agent of the cluster before it turns ACTIVE anyway")
	f.StringVar(&o.StatsMetrics, "stats-metrics", "listener", "statistics series on /metrics: one per listener and one per member (member), one per listener, one per loadbalancer (fewer, for very large clouds) or none")
	f.StringSliceVar(&o.ProviderAliases, "provider-alias", nil, "provider names clients may ask for and the provider that serves them, e.g. amphora=flow,ovn=flow (repeatable); such load balancers show the name they were created with")
	f.StringVar(&o.TLSCipherProhibitList, "tls-cipher-prohibit-list", "", "OpenSSL cipher names, colon-separated, that no listener's or pool's tls_ciphers may name (Octavia's [api_settings] tls_cipher_prohibit_list; 400 naming them)")
	f.StringVar(&o.ReplicaID, "replica-id", "", "this server's name among the replicas sharing the database (default: host name and a random suffix, new at every start)")
	config.HostDefault(f, "data-dir", "/var/lib/flowlb", "/var/lib/flowlb as root, else ~/.local/share/flowlb")
	config.SecretDSN(f, "database", "FLOWLB_DATABASE")
	config.Secret(f, "keystone-password", "FLOWLB_KEYSTONE_PASSWORD")
	config.OneOf(f, "auth", "noauth", "keystone")
	config.OneOf(f, "rbac", string(identity.Advanced), string(identity.KeystoneDefaultRoles))
	config.OneOf(f, "network", "neutron", "neutron-api", "noop")
	config.OneOf(f, "neutron-vip-ports", "flowlb", "ovn")
	config.OneOf(f, "tls-certificates", "none", "barbican")
	config.OneOf(f, "stats-metrics", "member", "listener", "loadbalancer", "none")
	config.Check(f, "log-level", checkLogLevel)
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

func checkLogLevel(s string) error {
	var l slog.Level
	return l.UnmarshalText([]byte(s))
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// runServer serves until SIGINT or SIGTERM, then shuts down cleanly.
func runServer(ctx context.Context, o server.Options, logLevel string) error {
	log, err := newLogger(logLevel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := server.Start(ctx, o, log)
	if err != nil {
		return err
	}
	select {
	case err := <-s.Wait():
		s.Crash()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}
