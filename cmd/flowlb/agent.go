package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlb/flowlb/internal/agent"
	"github.com/flowlb/flowlb/internal/announce"
	"github.com/flowlb/flowlb/internal/config"
	"github.com/flowlb/flowlb/internal/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/flows"
	"github.com/flowlb/flowlb/internal/httpserve"
	"github.com/flowlb/flowlb/internal/kubehealth"
)

type agentOptions struct {
	servers   []string
	tokenFile string
	caFile    string
	idDir     string
	node      string
	zone      string
	nodeZone  bool
	// nodePods: the pod networks are this node's own (its Node's
	// spec.podCIDRs).
	nodePods bool
	// removeOnDelete: NAMESPACE/NAME of the agent's DaemonSet.
	removeOnDelete string
	logLevel       string
	podCIDRs       []string
	// nodePortCIDRs: the node's addresses within them serve node ports
	// (none: every address but loopback).
	nodePortCIDRs []string
	// healthz: address of kube-proxy's node health endpoint (empty: none).
	healthz       string
	metrics       string
	minSync       time.Duration
	statsInterval time.Duration
	// verifyInterval: how often the kernel is checked (0: only when
	// nftables notifies another process's change).
	verifyInterval time.Duration
	// announce: VIP ranges to announce, in routing table announceTable.
	announce      []string
	announceTable int
	// dataplane: nftables, or ebpf (socket programs on cgroup, pinned
	// in bpfPinDir, beside nftables for the rest).
	dataplane string
	cgroup    string
	bpfPinDir string
}

func init() { rootCmd.AddCommand(newAgentCmd()) }

func newAgentCmd() *cobra.Command {
	o := agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: program the server's flows into this node's nftables",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runAgent(cmd.Context(), o) },
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringSliceVar(&o.servers, "server", []string{"127.0.0.1:9877"}, "the server replicas' agent stream addresses, host:port, comma-separated or the flag repeated; a name may resolve to several (looked up at every connection round)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the bootstrap token (the server's <data-dir>/agent-token), sent once to get this node's identity")
	f.StringVar(&o.caFile, "ca-file", "", "the CA of the server replicas' and nodes' identities (the server's <data-dir>/agent-ca.crt)")
	f.StringVar(&o.idDir, "identity-dir", defaultIdentityDir(), "directory of this node's identity (key and certificate, mode 0600), made at the first connection and renewed before it expires")
	f.StringVar(&o.node, "node", host, "this node's name")
	f.StringVar(&o.zone, "zone", "", "this node's topology zone (Kubernetes: its topology.kubernetes.io/zone label); PreferClose services send its traffic to the backends for this zone while there are any (PreferSameNode: for this node first)")
	f.BoolVar(&o.nodeZone, "zone-from-node", false, "when --zone is empty, read the zone from this node's topology.kubernetes.io/zone label (Kubernetes API, in-cluster config or $KUBECONFIG; needs get on nodes)")
	f.StringVar(&o.removeOnDelete, "remove-on-delete", "", "NAMESPACE/NAME of this agent's DaemonSet: stopped by a signal while that DaemonSet is gone or being deleted, remove flowlb's nftables table instead of keeping the flows (an update or restart keeps them)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.BoolVar(&o.nodePods, "pod-cidrs-from-node", false, "on Kubernetes, the pod networks are this node's own, its Node's spec.podCIDRs (read once at start, in-cluster config or $KUBECONFIG; needs get on nodes): a pod of another node is then a client from outside, to which a node port of externalTrafficPolicy Local answers only with this node's endpoints, as kube-proxy with --detect-local-mode NodeCIDR does; --pod-cidrs is kept for a Node without podCIDRs")
	f.StringSliceVar(&o.podCIDRs, "pod-cidrs", nil, "pod networks of either family, whose clients keep their address; connections from elsewhere are masqueraded to the node (default: none, every client keeps its address; given some, a family without one has every client masqueraded)")
	f.StringSliceVar(&o.nodePortCIDRs, "nodeport-addresses", nil, "CIDRs: the node's addresses within them serve node ports, as kube-proxy's flag of that name (default: every address of the node but loopback; looked up every 10 s)")
	f.StringVar(&o.healthz, "healthz-bind-address", "", "address of kube-proxy's node health endpoint, /healthz and /livez, 200 while the agent's table is in sync; 0.0.0.0:10256 where flowlb replaces kube-proxy (empty, the default: none, leaving kube-proxy its port); Services' health-check node ports are served on the --nodeport-addresses")
	f.StringVar(&o.metrics, "metrics-listen", "127.0.0.1:9878", "address of the agent's /metrics, /readyz and /status (what `agent dump` shows of the kernel; empty: none)")
	f.DurationVar(&o.minSync, "min-sync-interval", 0, "least time between two programming rounds; updates arriving meanwhile are merged")
	f.DurationVar(&o.verifyInterval, "verify-interval", agent.DefaultVerifyInterval, "how often the kernel is checked against the flows the agent programmed, and what another process removed or changed written again (nftables changes are also repaired at once from their notifications; 0: no periodic check, so eBPF changes are not repaired)")
	f.DurationVar(&o.statsInterval, "stats-interval", 5*time.Second, "how often the kernel's per-service and per-backend counters are read and reported to the server (0: never, and the table counts nothing)")
	f.StringSliceVar(&o.announce, "announce-cidrs", nil, "VIP ranges to announce: every VIP within them that this node can serve (a local-only one only with a backend on this node) gets a host route in --announce-table, for a routing daemon to export (default: none)")
	f.IntVar(&o.announceTable, "announce-table", 200, "routing table of the announcement routes (protocol 249)")
	f.StringVar(&o.dataplane, "dataplane", "nftables", "data plane: nftables, or ebpf: connections that start on a local socket of --cgroup are balanced at connect() by cgroup eBPF programs (no NAT, no conntrack), and nftables stays for the rest (clients from outside, node ports, forwarded packets)")
	f.StringVar(&o.cgroup, "cgroup", "", "with --dataplane ebpf: the cgroup v2 directory whose processes (and those below it) are served (default: the cgroup v2 root, every process of the host)")
	f.StringVar(&o.bpfPinDir, "bpf-pin-dir", "/sys/fs/bpf/flowlb", "with --dataplane ebpf: where the maps and links are pinned, so that balancing outlives the agent and a restarted agent adopts them; a bpffs is mounted on its parent if none is there")
	config.HostDefault(f, "identity-dir", "/var/lib/flowlb/agent", "/var/lib/flowlb/agent as root, else ~/.local/share/flowlb/agent")
	config.HostDefault(f, "node", "node-1", "the host name")
	config.Check(f, "log-level", checkLogLevel)
	config.OneOf(f, "dataplane", "nftables", "ebpf")
	cmd.AddCommand(agentDumpCmd(), agentTraceCmd(), agentCleanupEBPFCmd())
	return withConfig(cmd)
}

// metricsLimits bound the clients of a daemon's /metrics: scrapers, a
// handful at a time.
var metricsLimits = httpserve.Limits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 2 * time.Minute, MaxConns: 64}

func defaultIdentityDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/flowlb/agent"
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "share", "flowlb", "agent")
	}
	return "flowlb-agent"
}

func runAgent(ctx context.Context, o agentOptions) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	servers, err := agent.ParseServers(o.servers)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	if o.tokenFile == "" {
		return fmt.Errorf("--token-file is required")
	}
	b, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	if o.caFile == "" {
		return fmt.Errorf("--ca-file is required: the agent stream is TLS, and the replicas prove who they are with identities from that CA")
	}
	caPEM, err := os.ReadFile(o.caFile)
	if err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	id, unusable, err := agent.LoadIdentity(o.idDir, caPEM)
	if err != nil {
		return err
	}
	if unusable != nil {
		log.Warn("the node's identity does not load; enrolling again with the bootstrap token, which the servers refuse while the identity they issued last is valid (`flowlb server node forget NODE` releases the name)", "err", unusable)
	}
	var node *nodeFacts
	if (o.zone == "" && o.nodeZone) || o.nodePods {
		if node, err = readNode(ctx, o.node); err != nil {
			return err
		}
	}
	if o.zone == "" && o.nodeZone {
		o.zone = node.zone
	}
	if o.nodePods && len(node.podCIDRs) > 0 {
		o.podCIDRs = node.podCIDRs
	}
	var nets []netip.Prefix
	for _, c := range o.podCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--pod-cidrs: %w", err)
		}
		nets = append(nets, p)
	}
	var nodePortCIDRs []netip.Prefix
	for _, c := range o.nodePortCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--nodeport-addresses: %w", err)
		}
		nodePortCIDRs = append(nodePortCIDRs, p.Masked())
	}
	dpOpts := []nftables.Option{nftables.WithZone(o.zone)}
	if o.statsInterval <= 0 {
		// Nothing reads the counters: leave out the rules that count.
		dpOpts = append(dpOpts, nftables.WithoutCounters())
	}
	dp, err := nftables.New(-1, o.node, dpOpts...)
	if err != nil {
		return err
	}
	removed := false
	defer func() {
		if !removed {
			_ = dp.Close()
		}
	}()
	if len(nets) > 0 {
		if err := dp.SetPodNetworks(nets); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// kube-proxy serves health-check node ports on every address unless
	// --nodeport-addresses narrows them, and then on those.
	var ready func() error // the agent's, once it exists
	hc := kubehealth.NewServer(nil, func() error { return ready() }, log)
	defer hc.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := dp.Watching(); err != nil {
		log.Warn("nftables changes by other processes will be found by the periodic check only (--verify-interval), reading every element", "err", err)
	}
	var prog agent.Programmer = dp
	verifiers := []agent.Verifier{dp}
	var sockets *ebpf.Dataplane
	if o.dataplane == "ebpf" {
		if sockets, err = openSocketLB(o, log); err != nil {
			return err
		}
		// Not removed on exit: the pins keep balancing while the agent is
		// down (fail-static); cleanup-ebpf or --remove-on-delete remove them.
		defer sockets.Close()
		prog = agent.Chain(dp, sockets)
		verifiers = append(verifiers, sockets)
	}
	if len(o.announce) > 0 {
		var ranges []netip.Prefix
		for _, c := range o.announce {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return fmt.Errorf("--announce-cidrs: %w", err)
			}
			ranges = append(ranges, p.Masked())
		}
		rt, err := announce.OpenTable(o.announceTable)
		if err != nil {
			return err
		}
		defer rt.Close()
		if prog, err = announce.New(prog, o.node, ranges, rt, reg, log); err != nil {
			return err
		}
	}
	var stats agent.StatsReader = dp
	if sockets != nil {
		stats = agent.SumStats(dp, sockets)
	}
	verifyEvery := o.verifyInterval
	if verifyEvery <= 0 {
		verifyEvery = -1 // the agent's "never"
	}
	a := agent.New(agent.Config{Servers: servers, Token: strings.TrimSpace(string(b)), Identity: id, Node: o.node, Zone: o.zone, MinInterval: o.minSync, Metrics: reg,
		Stats: stats, StatsInterval: o.statsInterval, Verifiers: verifiers, VerifyInterval: verifyEvery,
		OnProgrammed: func(s map[flows.Key]flows.Service) { hc.SetChecks(kubehealth.Checks(s, o.node)) }}, prog, log)
	ready = a.Ready
	// The agent learns the addresses too: a VIP's member that is one of
	// this node's own node ports is replaced by its endpoints.
	setNodeAddrs := func(addrs []netip.Addr) error {
		if len(nodePortCIDRs) > 0 {
			hc.SetAddresses(append([]netip.Addr{}, addrs...))
		}
		if err := dp.SetNodeAddresses(addrs); err != nil {
			return err
		}
		return a.SetNodeAddresses(ctx, addrs)
	}
	if err := agent.WatchNodePortAddresses(ctx, 10*time.Second, nodePortCIDRs, setNodeAddrs, log); err != nil {
		return err
	}
	if o.healthz != "" {
		// Not fatal: where kube-proxy still runs it holds the port, and
		// the flows matter more than this endpoint.
		if ln, err := net.Listen("tcp", o.healthz); err != nil {
			log.Warn("node health endpoint not served", "flag", "--healthz-bind-address", "err", err)
		} else {
			srv := &http.Server{Handler: kubehealth.NodeHandler(a.Ready, hc.LastUpdated)}
			ln = httpserve.Serve(srv, ln, metricsLimits, log)
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
		}
	}
	if o.metrics != "" {
		ln, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("/readyz", readyz(a.Ready))
		mux.Handle("/status", statusz(a.KernelStatus))
		srv := &http.Server{Handler: mux}
		ln = httpserve.Serve(srv, ln, metricsLimits, log)
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	var deletion *deletionWatch
	var kc kubernetes.Interface
	var dsNS, dsName string
	if o.removeOnDelete != "" {
		if dsNS, dsName, err = splitRef(o.removeOnDelete); err != nil {
			return err
		}
		if kc, err = kubeClient(); err != nil {
			return fmt.Errorf("--remove-on-delete: kubeconfig: %w", err)
		}
		deletion = watchDeletion(ctx, kc, dsNS, dsName)
	}
	log.Info("flowlb agent starting", "node", o.node, "zone", o.zone, "servers", servers, "metrics", o.metrics, "announce", o.announce, "dataplane", o.dataplane)
	if err := a.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	if deletion != nil {
		gone := deletion.doomed()
		var err error
		if !gone {
			gone, err = daemonSetGone(kc, dsNS, dsName)
		}
		switch {
		case err != nil:
			log.Warn("cannot tell whether the agent is being deleted; flows kept", "err", err)
		case gone:
			removed = true
			if err := dp.Remove(); err != nil {
				return fmt.Errorf("remove the nftables table: %w", err)
			}
			log.Info("DaemonSet deleted: flowlb's nftables table removed", "daemonset", o.removeOnDelete)
			if sockets != nil {
				if err := sockets.Remove(); err != nil {
					return fmt.Errorf("remove the eBPF data plane: %w", err)
				}
				log.Info("DaemonSet deleted: flowlb's eBPF programs, maps and pins removed", "pins", o.bpfPinDir)
			}
		}
	}
	return nil
}

// openSocketLB mounts a bpffs for the pins if needed and loads the eBPF
// socket programs onto the agent's cgroup, adopting pinned ones.
func openSocketLB(o agentOptions, log *slog.Logger) (*ebpf.Dataplane, error) {
	cg := o.cgroup
	if cg == "" {
		root, err := ebpf.CgroupV2Root()
		if err != nil {
			return nil, fmt.Errorf("--cgroup: %w", err)
		}
		cg = root
	}
	if err := ebpf.MountBPFFS(filepath.Dir(o.bpfPinDir)); err != nil {
		return nil, fmt.Errorf("--bpf-pin-dir: %w", err)
	}
	d, err := ebpf.New(ebpf.Config{Node: o.node, Zone: o.zone, Cgroup: cg, PinDir: o.bpfPinDir, Log: log})
	if err != nil {
		return nil, err
	}
	log.Info("eBPF socket load balancing attached", "cgroup", cg, "pins", o.bpfPinDir)
	return d, nil
}

func agentCleanupEBPFCmd() *cobra.Command {
	pins := "/sys/fs/bpf/flowlb"
	cmd := &cobra.Command{
		Use:   "cleanup-ebpf",
		Short: "Remove the eBPF data plane's pins: its programs detach and its maps are freed once no agent holds them (stop the agent first)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return ebpf.Cleanup(pins) },
	}
	cmd.Flags().StringVar(&pins, "bpf-pin-dir", pins, "the agent's --bpf-pin-dir")
	return cmd
}
