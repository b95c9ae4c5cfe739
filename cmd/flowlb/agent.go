package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/flowlb/flowlb/internal/node"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/bgp"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/shared/config"
	"github.com/flowlb/flowlb/internal/shared/httpserve"
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
	// l2Interface: where the node answers ARP and neighbour discovery
	// for the L2 VIPs the server gives it.
	l2Interface string
	// bgpConfig: the BGP speaker's configuration file (empty: the
	// announcements go to announceTable).
	bgpConfig string
	// dataplane: nftables, or ebpf (socket programs on cgroup, pinned
	// in bpfPinDir, beside nftables for the rest).
	dataplane string
	cgroup    string
	bpfPinDir string
	// ovnNB: with --dataplane ovn, the northbound database.
	ovnNB string
	// ovnOpenFlow: with --dataplane ovn, the chassis' integration
	// bridges whose counters are read.
	ovnOpenFlow []string
	// l7Ports: the L7 proxy's steering ports, FIRST-LAST (empty: no
	// proxy); l7Addresses: the node's addresses steered to.
	l7Ports     string
	l7Addresses []string
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
	f.StringVar(&o.metrics, "metrics-listen", "127.0.0.1:9878", "address of the agent's /metrics, /readyz and /status (what `agent dump` shows of the kernel and the announcements; empty: none)")
	f.DurationVar(&o.minSync, "min-sync-interval", 0, "least time between two programming rounds; updates arriving meanwhile are merged")
	f.DurationVar(&o.verifyInterval, "verify-interval", agent.DefaultVerifyInterval, "how often the kernel is checked against the flows the agent programmed, and what another process removed or changed written again (nftables changes are also repaired at once from their notifications; 0: no periodic check, so eBPF changes are not repaired)")
	f.DurationVar(&o.statsInterval, "stats-interval", 5*time.Second, "how often the kernel's per-service and per-backend counters are read and reported to the server (0: never, and the table counts nothing)")
	f.StringSliceVar(&o.announce, "announce-cidrs", nil, "VIP ranges to announce: every VIP within them that this node can serve (a local-only one only with a backend on this node) gets a host route in --announce-table, for a routing daemon to export (default: none)")
	f.IntVar(&o.announceTable, "announce-table", 200, "routing table of the announcement routes (protocol 249)")
	f.StringVar(&o.l2Interface, "l2-interface", "", "interface on which this node answers ARP and IPv6 neighbour discovery for the external VIPs of the server's --l2-cidrs that the server gives it (one node per VIP, among those that can serve it), with a gratuitous ARP or unsolicited advertisement when it takes one (default: none)")
	f.StringVar(&o.bgpConfig, "bgp-config", "", "YAML file of the agent's own BGP speaker (ASN, peers, next hops, ranges' communities): the VIPs of --announce-cidrs this node can serve are advertised to the peers instead of written to --announce-table (default: none)")
	f.StringVar(&o.dataplane, "dataplane", "nftables", "data plane: nftables, or ebpf: connections that start on a local socket of --cgroup are balanced at connect() by cgroup eBPF programs (no NAT, no conntrack), and nftables stays for the rest (clients from outside, node ports, forwarded packets); or ovn: no kernel, the load balancers' VIPs are written to OVN's northbound database (--ovn-nb) as Load_Balancer rows on the VIP's logical switch and its routers, for every VM of an ML2/OVN cloud; such an agent runs anywhere that reaches the database, takes no health probes and answers for no VIP")
	f.StringVar(&o.l7Ports, "l7-ports", "", "FIRST-LAST, e.g. 20000-29999: run this node's L7 proxy for the server's HTTP listeners (server --l7, which needs it on every agent), on these ports, one per listener and VIP, opened on every address of the node while such a listener exists; the data planes steer a listener's connections to its port at the node's own address, so that the proxy of the client's node routes each request (default: no proxy)")
	f.StringSliceVar(&o.l7Addresses, "l7-addresses", nil, "the node's addresses, at most one per family, to which the data planes steer HTTP listeners' connections (default: the first --nodeport-addresses address of each family)")
	f.StringVar(&o.ovnNB, "ovn-nb", "", "with --dataplane ovn: the OVN northbound database, tcp:IP:PORT, ssl:IP:PORT or unix:PATH (comma-separated for a clustered one)")
	f.StringSliceVar(&o.ovnOpenFlow, "ovn-openflow", nil, "with --dataplane ovn: the chassis' integration bridges as ovs-ofctl reaches them (unix:/run/openvswitch/br-int.mgmt, tcp:IP:PORT; repeatable): every --stats-interval their load balancers' flows and groups are read with ovs-ofctl and the new connections of each listener and member reported (no bytes, no open connections); none: the OVN data plane reports no statistics")
	f.StringVar(&o.cgroup, "cgroup", "", "with --dataplane ebpf: the cgroup v2 directory whose processes (and those below it) are served (default: the cgroup v2 root, every process of the host)")
	f.StringVar(&o.bpfPinDir, "bpf-pin-dir", "/sys/fs/bpf/flowlb", "with --dataplane ebpf: where the maps and links are pinned, so that balancing outlives the agent and a restarted agent adopts them; a bpffs is mounted on its parent if none is there")
	config.HostDefault(f, "identity-dir", "/var/lib/flowlb/agent", "/var/lib/flowlb/agent as root, else ~/.local/share/flowlb/agent")
	config.HostDefault(f, "node", "node-1", "the host name")
	config.Check(f, "log-level", checkLogLevel)
	config.OneOf(f, "dataplane", "nftables", "ebpf", "ovn")
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
	var facts *nodeFacts
	if (o.zone == "" && o.nodeZone) || o.nodePods {
		if facts, err = readNode(ctx, o.node); err != nil {
			return err
		}
	}
	if o.zone == "" && o.nodeZone {
		o.zone = facts.zone
	}
	if o.nodePods && len(facts.podCIDRs) > 0 {
		o.podCIDRs = facts.podCIDRs
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := node.Config{Registry: reg, Servers: servers, Token: strings.TrimSpace(string(b)), Identity: id, Node: o.node, Zone: o.zone,
		HealthCheckNodePorts: true, Healthz: o.healthz, Metrics: o.metrics, HTTPLimits: metricsLimits,
		MinSync: o.minSync, StatsInterval: o.statsInterval, VerifyInterval: o.verifyInterval, AnnounceTable: o.announceTable,
		// Nothing reads the counters: leave out the rules that count.
		Uncounted: o.statsInterval <= 0}
	if cfg.PodNetworks, err = parsePrefixes("--pod-cidrs", o.podCIDRs, false); err != nil {
		return err
	}
	if cfg.NodePortCIDRs, err = parsePrefixes("--nodeport-addresses", o.nodePortCIDRs, true); err != nil {
		return err
	}
	if cfg.Announce, err = parsePrefixes("--announce-cidrs", o.announce, true); err != nil {
		return err
	}
	if o.bgpConfig != "" {
		if len(cfg.Announce) == 0 {
			return errors.New("--bgp-config: --announce-cidrs names no range to announce")
		}
		c, err := bgp.Load(o.bgpConfig)
		if err != nil {
			return fmt.Errorf("--bgp-config: %w", err)
		}
		cfg.BGP = &c
	}
	cfg.EBPF = ebpfConfig(o)
	if cfg.OVN, err = ovnConfig(o); err != nil {
		return err
	}
	if cfg.OVN != nil {
		cfg.HealthCheckNodePorts = false
		if len(cfg.OVN.OpenFlow) == 0 {
			cfg.StatsInterval = 0
		}
	}
	cfg.L2Interface = o.l2Interface
	if cfg.OVN == nil {
		if cfg.L7, err = l7Config(o.l7Ports, o.l7Addresses); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.removeOnDelete != "" {
		dsNS, dsName, err := splitRef(o.removeOnDelete)
		if err != nil {
			return err
		}
		kc, err := kubeClient()
		if err != nil {
			return fmt.Errorf("--remove-on-delete: kubeconfig: %w", err)
		}
		deletion := watchDeletion(ctx, kc, dsNS, dsName)
		cfg.RemoveOnStop = func() (bool, error) {
			if deletion.doomed() {
				return true, nil
			}
			return daemonSetGone(kc, dsNS, dsName)
		}
	}
	n, err := node.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	return n.Wait()
}

// ebpfConfig is --dataplane ebpf's configuration (nil: nftables alone).
func ebpfConfig(o agentOptions) *node.EBPF {
	if o.dataplane != "ebpf" {
		return nil
	}
	return &node.EBPF{Cgroup: o.cgroup, PinDir: o.bpfPinDir}
}

// ovnConfig is --dataplane ovn's configuration (nil: another data
// plane), refusing the flags that only a kernel data plane serves.
func ovnConfig(o agentOptions) (*node.OVN, error) {
	if o.dataplane != "ovn" {
		if o.ovnNB != "" || len(o.ovnOpenFlow) > 0 {
			return nil, errors.New("--ovn-nb and --ovn-openflow are for --dataplane ovn")
		}
		return nil, nil
	}
	if o.ovnNB == "" {
		return nil, errors.New("--dataplane ovn needs --ovn-nb")
	}
	for _, f := range []struct {
		flag string
		set  bool
	}{{"--announce-cidrs", len(o.announce) > 0}, {"--bgp-config", o.bgpConfig != ""}, {"--l2-interface", o.l2Interface != ""},
		{"--remove-on-delete", o.removeOnDelete != ""}, {"--healthz-bind-address", o.healthz != ""}} {
		if f.set {
			return nil, fmt.Errorf("%s is not for --dataplane ovn: that agent holds no VIP and programs no kernel", f.flag)
		}
	}
	return &node.OVN{NB: o.ovnNB, OpenFlow: o.ovnOpenFlow}, nil
}

// parsePrefixes parses a flag's CIDRs, masked if asked.
func parsePrefixes(flag string, cidrs []string, masked bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if masked {
			p = p.Masked()
		}
		out = append(out, p)
	}
	return out, nil
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

// l7Config parses --l7-ports and --l7-addresses (empty ports: no proxy).
func l7Config(ports string, addrs []string) (*node.L7, error) {
	if ports == "" {
		if len(addrs) > 0 {
			return nil, errors.New("--l7-addresses needs --l7-ports")
		}
		return nil, nil
	}
	first, last, ok := strings.Cut(ports, "-")
	f, ferr := strconv.ParseUint(first, 10, 16)
	l, lerr := strconv.ParseUint(last, 10, 16)
	if !ok || ferr != nil || lerr != nil || f == 0 || l < f {
		return nil, fmt.Errorf("--l7-ports %q: want FIRST-LAST, two ports in order", ports)
	}
	out := &node.L7{FirstPort: uint16(f), LastPort: uint16(l)}
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--l7-addresses: %w", err)
		}
		a = a.Unmap()
		target := &out.Addresses.V6
		if a.Is4() {
			target = &out.Addresses.V4
		}
		if target.IsValid() {
			return nil, fmt.Errorf("--l7-addresses: two addresses of one family (%s, %s)", *target, a)
		}
		*target = a
	}
	return out, nil
}
