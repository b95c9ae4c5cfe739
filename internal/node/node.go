// Package node assembles one flowlb agent process: the node's data
// planes (nftables, and the eBPF socket programs beside it), the agent
// that streams the servers' flows into them, the announcement of VIPs,
// the node's node-port addresses, kube-proxy's health checks and the
// agent's HTTP endpoints. cmd/flowlb turns flags into a Config; the
// scenarios start nodes in-process on fake kernels, as internal/server
// does for replicas.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/announce"
	"github.com/flowlb/flowlb/internal/node/bgp"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/node/kubehealth"
	"github.com/flowlb/flowlb/internal/node/l2"
	"github.com/flowlb/flowlb/internal/node/l7proxy"
	"github.com/flowlb/flowlb/internal/node/l7steer"
	"github.com/flowlb/flowlb/internal/node/ovn"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/httpserve"
)

// Config of a node; cmd/flowlb's agent flags document each.
type Config struct {
	// Servers are the replicas' agent stream addresses (host:port).
	Servers []string
	// Token is the bootstrap token; Identity, if set, the node's TLS
	// identity (agent.Config).
	Token    string
	Identity *agent.Identity
	Node     string
	Zone     string
	// PodNetworks are the networks whose clients keep their address.
	PodNetworks []netip.Prefix
	// NodePortCIDRs narrow the node's addresses that serve node ports
	// (none: every address but loopback), looked up every
	// addressInterval; they also narrow where the health-check node
	// ports are served.
	NodePortCIDRs []netip.Prefix
	// NodeAddresses, if set, are the node's node-port addresses, given
	// once: nothing is looked up (a node on a fake kernel).
	NodeAddresses []netip.Addr
	// HealthCheckNodePorts serves the Services' health-check node ports,
	// as kube-proxy does.
	HealthCheckNodePorts bool
	// Healthz, if set, is the address of kube-proxy's node health
	// endpoint; Metrics, if set, that of /metrics, /readyz and /status.
	// Both are served with HTTPLimits.
	Healthz    string
	Metrics    string
	HTTPLimits httpserve.Limits
	// Registry takes the node's metrics, and /metrics serves it (nil: a
	// registry of the node's own; the process's runtime collectors are
	// the caller's to add, as they pull in database/sql).
	Registry *prometheus.Registry
	// MinSync, StatsInterval (0: counters are never read) and
	// VerifyInterval (0: only when nftables hears of another's change)
	// are the agent's.
	MinSync        time.Duration
	StatsInterval  time.Duration
	VerifyInterval time.Duration
	// Uncounted leaves out the rules that count (nothing reads them).
	Uncounted bool
	// NoHealth: this node probes no member.
	NoHealth bool
	// Announce are the VIP ranges announced in routing table
	// AnnounceTable (none: nothing announced).
	Announce      []netip.Prefix
	AnnounceTable int
	// L2Interface, if set, is the interface on which the node answers ARP
	// and neighbour discovery for the external VIPs the server gives it
	// (the server's L2 ranges; internal/node/l2).
	L2Interface string
	// BGP, if set, advertises the announced VIPs with the agent's own
	// BGP speaker instead of writing them to AnnounceTable.
	BGP *bgp.Config
	// EBPF, if set, balances the connections of local sockets with the
	// eBPF socket programs, beside nftables.
	EBPF *EBPF
	// L7, if set, serves HTTP listeners with the node's proxy, to which
	// the data planes steer their connections.
	L7 *L7
	// OVN, if set, replaces the node's data planes: the services are
	// written to OVN's northbound database as Load_Balancer rows, and the
	// agent takes no probes, announces nothing and answers for no VIP.
	OVN *OVN
	// Kernel, if set, is the nftables kernel to program (nftfake in the
	// scenarios); nil: this host's, through netlink. Observe, if set, is
	// told every nftables plan and the kernel's answer.
	Kernel  nftables.Conn
	Observe func(nftables.Plan, error)
	// RemoveOnStop, if set, is asked when the agent stops: true removes
	// the node's flows from its kernel instead of keeping them (the
	// agent's DaemonSet is being deleted).
	RemoveOnStop func() (bool, error)
}

// addressInterval is how often the node's addresses are looked up: an
// address added to the node serves node ports within that time.
const addressInterval = 10 * time.Second

// proxyDrain bounds how long a stopping agent waits for the L7 proxy's
// requests in flight (systemd waits 90 s for a unit to stop).
const proxyDrain = 15 * time.Second

// EBPF configures the eBPF socket programs.
type EBPF struct {
	// Cgroup is the cgroup v2 directory whose processes are served
	// (empty: the cgroup v2 root).
	Cgroup string
	// PinDir is where the maps and links are pinned; a bpffs is mounted
	// on its parent if none is there.
	PinDir string
}

// L7 configures the node's L7 proxy.
type L7 struct {
	// FirstPort and LastPort bound the steering ports: one per L7
	// listener and VIP, opened on every address of the node.
	FirstPort, LastPort uint16
	// Addresses are the node's addresses the data planes steer to, one
	// per family; an invalid one is the first node-port address of its
	// family at start.
	Addresses l7steer.Addresses
}

// OVN configures the OVN data plane.
type OVN struct {
	// NB is the northbound database: tcp:IP:PORT, ssl:IP:PORT or
	// unix:PATH, comma-separated for a cluster.
	NB string
	// OpenFlow are the chassis' integration bridges (ovs-ofctl targets)
	// whose load-balancing counters are read every StatsInterval; none:
	// no statistics.
	OpenFlow []string
}

// Node is a running agent process.
type Node struct {
	cfg     Config
	log     *slog.Logger
	agent   *agent.Agent
	dp      *nftables.Dataplane
	sockets *ebpf.Dataplane // nil: nftables only
	ovn     *ovn.Dataplane  // set: OVN's northbound database, and no nftables
	removed bool            // the nftables table was removed (and closed)
	done    chan struct{}
	err     error
	// undo closes what Start opened, last first.
	undo []func()
	once sync.Once
	// announced is what the node announces now, for /status; told, the
	// same as the server is told it (nil: the node announces nothing).
	announced func() announce.Status
	told      func() *agentv1.AnnounceStatus
	// l2 is what the node answers ARP and neighbour discovery for, for
	// /status.
	l2 func() l2.Status
}

// Start opens the node's data planes and endpoints and runs its agent
// until ctx ends; Wait returns when it has stopped. On an error nothing
// it opened stays open.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Node, err error) {
	n := &Node{cfg: cfg, log: log, done: make(chan struct{})}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if cfg.OVN != nil {
		return n.startOVN(ctx, reg)
	}
	if err := n.openDataplanes(); err != nil {
		return nil, err
	}
	var prog agent.Programmer
	verifiers := []agent.Verifier{n.dp}
	var stats agent.StatsReader = n.dp
	if n.sockets != nil {
		verifiers = append(verifiers, n.sockets)
		stats = agent.SumStats(n.dp, n.sockets)
	}
	if cfg.L7 != nil {
		if prog, stats, err = n.l7(*cfg.L7, reg); err != nil {
			return nil, err
		}
	} else {
		// No proxy: an HTTP listener is refused here, never balanced as
		// TCP past its policies.
		warn := func(k flows.Key) {
			log.Warn("the server sends HTTP listeners but this agent runs no L7 proxy (--l7-ports): their connections are refused on this node", "first", k)
		}
		prog = l7steer.NewRefusing(n.dp, warn)
		if n.sockets != nil {
			prog = agent.Chain(prog, l7steer.NewRefusing(n.sockets, warn))
		}
	}
	if prog, err = n.announcer(prog, reg); err != nil {
		return nil, err
	}
	// kube-proxy serves health-check node ports on every address unless
	// --nodeport-addresses narrows them, and then on those.
	var hc *kubehealth.Server
	var onProgrammed func(map[flows.Key]flows.Service)
	if cfg.HealthCheckNodePorts {
		hc = kubehealth.NewServer(nil, func() error { return n.agent.Ready() }, log)
		n.undo = append(n.undo, hc.Close)
		onProgrammed = func(s map[flows.Key]flows.Service) { hc.SetChecks(kubehealth.Checks(s, cfg.Node)) }
	}
	verifyEvery := cfg.VerifyInterval
	if verifyEvery <= 0 {
		verifyEvery = -1 // the agent's "never"
	}
	var onL2 func([]netip.Addr)
	n.l2 = l2.NoneStatus
	if cfg.L2Interface != "" {
		r, err := l2.New(cfg.L2Interface, log)
		if err != nil {
			return nil, err
		}
		n.undo = append(n.undo, func() { _ = r.Close() })
		if err := reg.Register(r.Collector()); err != nil {
			return nil, fmt.Errorf("L2 metrics: %w", err)
		}
		n.l2 = func() l2.Status {
			lost, ends, ended := n.agent.L2Lease()
			return l2.StatusOf(r.State(), l2.Lease{Lost: lost, Ends: ends, Ended: ended})
		}
		go func() {
			if err := r.Run(ctx); err != nil {
				log.Error("L2 answers stopped", "interface", cfg.L2Interface, "err", err)
			}
		}()
		onL2 = func(vips []netip.Addr) {
			if err := r.Set(vips); err != nil {
				log.Warn("L2 VIPs", "interface", cfg.L2Interface, "err", err)
				return
			}
			log.Info("answering ARP and neighbour discovery", "interface", cfg.L2Interface, "vips", len(vips))
		}
	}
	n.agent = agent.New(agent.Config{Servers: cfg.Servers, Token: cfg.Token, Identity: cfg.Identity, Node: cfg.Node, Zone: cfg.Zone,
		MinInterval: cfg.MinSync, Metrics: reg, Stats: stats, StatsInterval: cfg.StatsInterval, NoHealth: cfg.NoHealth,
		Verifiers: verifiers, VerifyInterval: verifyEvery, OnProgrammed: onProgrammed, Announced: n.told, L2: onL2}, prog, log)
	runCtx, stop := context.WithCancel(ctx)
	n.undo = append(n.undo, stop)
	if err := n.followAddresses(runCtx, hc); err != nil {
		return nil, err
	}
	if err := n.serveHTTP(reg, hc); err != nil {
		return nil, err
	}
	go n.run(runCtx)
	return n, nil
}

// startOVN runs the agent on OVN's northbound database alone: no
// kernel, no announcements, no L2, no health probes (the servers are
// told), no node ports.
func (n *Node) startOVN(ctx context.Context, reg *prometheus.Registry) (*Node, error) {
	cfg := n.cfg
	d, err := ovn.New(ctx, ovn.Config{NB: cfg.OVN.NB}, n.log)
	if err != nil {
		return nil, err
	}
	n.ovn = d
	n.undo = append(n.undo, d.Close)
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flowlb_agent_ovn_vips_unattached",
		Help: "VIPs written to OVN whose address no logical switch port holds: their Load_Balancer rows are attached nowhere."},
		func() float64 { return float64(d.Unattached()) })); err != nil {
		return nil, err
	}
	n.announced, n.l2 = announce.NoneStatus, l2.NoneStatus
	verifyEvery := cfg.VerifyInterval
	if verifyEvery <= 0 {
		verifyEvery = -1 // the agent's "never": the monitor's events still trigger checks
	}
	var stats agent.StatsReader
	statsEvery := time.Duration(0)
	if len(cfg.OVN.OpenFlow) > 0 && cfg.StatsInterval > 0 {
		cs := d.Counting(cfg.OVN.OpenFlow, nil)
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "flowlb_agent_ovn_connections_unattributed_total",
			Help: "New connections counted on the chassis whose member is unknown: OVN gave their backends' group to several listeners alike (same backends and hashing), or to a listener and a load balancer not flowlb's. They count for the listeners, not for the members."},
			func() float64 { return float64(cs.Unattributed()) })); err != nil {
			return nil, err
		}
		stats, statsEvery = cs, cfg.StatsInterval
	}
	n.agent = agent.New(agent.Config{Servers: cfg.Servers, Token: cfg.Token, Identity: cfg.Identity, Node: cfg.Node,
		MinInterval: cfg.MinSync, Metrics: reg, NoHealth: true, NoProbes: true, Stats: stats, StatsInterval: statsEvery,
		Verifiers: []agent.Verifier{d}, VerifyInterval: verifyEvery}, d, n.log)
	runCtx, stop := context.WithCancel(ctx)
	n.undo = append(n.undo, stop)
	if err := n.serveHTTP(reg, nil); err != nil {
		return nil, err
	}
	go n.run(runCtx)
	return n, nil
}

// openDataplanes opens nftables on the node's kernel, and the eBPF
// socket programs if configured.
func (n *Node) openDataplanes() error {
	cfg := n.cfg
	opts := []nftables.Option{nftables.WithZone(cfg.Zone)}
	if cfg.Uncounted {
		opts = append(opts, nftables.WithoutCounters())
	}
	if cfg.Observe != nil {
		opts = append(opts, nftables.WithPlanObserver(cfg.Observe))
	}
	var err error
	if cfg.Kernel != nil {
		n.dp, err = nftables.NewWithConn(cfg.Kernel, cfg.Node, opts...)
	} else {
		n.dp, err = nftables.New(-1, cfg.Node, opts...)
	}
	if err != nil {
		return err
	}
	n.undo = append(n.undo, func() {
		if !n.removed {
			_ = n.dp.Close()
		}
	})
	if len(cfg.PodNetworks) > 0 {
		if err := n.dp.SetPodNetworks(cfg.PodNetworks); err != nil {
			return err
		}
	}
	if cfg.Kernel == nil {
		if err := n.dp.Watching(); err != nil {
			n.log.Warn("nftables changes by other processes will be found by the periodic check only (--verify-interval), reading every element", "err", err)
		}
	}
	if cfg.EBPF == nil {
		return nil
	}
	if n.sockets, err = OpenSocketLB(*cfg.EBPF, cfg.Node, cfg.Zone, n.log); err != nil {
		return err
	}
	// Closed, not removed: the pins keep balancing while the agent is
	// down (fail-static); cleanup-ebpf or RemoveOnStop remove them.
	n.undo = append(n.undo, func() { _ = n.sockets.Close() })
	return nil
}

// OpenSocketLB mounts a bpffs for the pins if needed and loads the eBPF
// socket programs onto the cgroup, adopting pinned ones.
func OpenSocketLB(c EBPF, node, zone string, log *slog.Logger) (*ebpf.Dataplane, error) {
	cg := c.Cgroup
	if cg == "" {
		root, err := ebpf.CgroupV2Root()
		if err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		cg = root
	}
	if err := ebpf.MountBPFFS(filepath.Dir(c.PinDir)); err != nil {
		return nil, fmt.Errorf("bpf pin dir: %w", err)
	}
	d, err := ebpf.New(ebpf.Config{Node: node, Zone: zone, Cgroup: cg, PinDir: c.PinDir, Log: log})
	if err != nil {
		return nil, err
	}
	log.Info("eBPF socket load balancing attached", "cgroup", cg, "pins", c.PinDir)
	return d, nil
}

// l7 starts the node's L7 proxy and puts it first among the data
// planes, each packet data plane seeing the L7 services steered to it.
func (n *Node) l7(cfg L7, reg prometheus.Registerer) (agent.Programmer, agent.StatsReader, error) {
	ports, err := l7steer.NewPorts(cfg.FirstPort, cfg.LastPort)
	if err != nil {
		return nil, nil, err
	}
	addrs := cfg.Addresses
	if !addrs.V4.IsValid() || !addrs.V6.IsValid() {
		own := n.cfg.NodeAddresses
		if own == nil {
			found, err := agent.InterfaceAddresses()
			if err != nil {
				return nil, nil, err
			}
			own = agent.NodePortAddresses(found, n.cfg.NodePortCIDRs)
		}
		for _, a := range own {
			switch {
			case a.Is4() && !addrs.V4.IsValid():
				addrs.V4 = a
			case a.Is6() && !a.IsLinkLocalUnicast() && !addrs.V6.IsValid():
				addrs.V6 = a
			}
		}
	}
	if !addrs.V4.IsValid() && !addrs.V6.IsValid() {
		return nil, nil, errors.New("L7 proxy: the node has no address to steer HTTP listeners to")
	}
	proxy := l7proxy.New(l7proxy.Options{Log: n.log})
	n.undo = append(n.undo, func() {
		// A stopping agent lets the requests in flight be answered; the
		// kernel keeps steering to the ports, so new connections are
		// refused until the next agent serves them.
		ctx, cancel := context.WithTimeout(context.Background(), proxyDrain)
		defer cancel()
		if err := proxy.Drain(ctx); err != nil {
			n.log.Warn("L7 proxy: requests still in flight when the agent stopped", "after", proxyDrain, "err", err)
		}
		_ = proxy.Close()
	})
	if err := reg.Register(proxy.Collector()); err != nil {
		return nil, nil, fmt.Errorf("L7 proxy metrics: %w", err)
	}
	n.log.Info("L7 proxy ready", "steering_ports", fmt.Sprintf("%d-%d", cfg.FirstPort, cfg.LastPort), "ipv4", addrs.V4, "ipv6", addrs.V6)
	nft := l7steer.NewPackets(n.dp, ports, addrs)
	planes := []agent.Programmer{l7steer.NewProxyPlane(proxy, ports), nft}
	counters := []agent.StatsReader{nft, proxy}
	if n.sockets != nil {
		sockets := l7steer.NewPackets(n.sockets, ports, addrs)
		planes = append(planes, sockets)
		counters = append(counters, sockets)
	}
	// The packet data planes count the listeners' connections, the proxy
	// the members' requests.
	return agent.Chain(planes...), agent.SumStats(counters...), nil
}

// announcer wraps prog with the announcement of VIPs, if configured.
func (n *Node) announcer(prog agent.Programmer, reg prometheus.Registerer) (agent.Programmer, error) {
	n.announced = announce.NoneStatus
	if len(n.cfg.Announce) == 0 {
		return prog, nil
	}
	if n.cfg.BGP != nil {
		sp, err := bgp.New(*n.cfg.BGP, bgp.Options{Reg: reg, Log: n.log})
		if err != nil {
			return nil, fmt.Errorf("BGP: %w", err)
		}
		// Leaving, the speaker sends no NOTIFICATION: the routers keep
		// its routes (graceful restart) until the next agent's
		// End-of-RIB, or the restart time, as the flows stay in the
		// kernel (fail-static). Only the flows' removal withdraws them.
		n.undo = append(n.undo, func() {
			if n.removed {
				sp.Stop()
				return
			}
			sp.Leave()
		})
		n.announced = func() announce.Status { return announce.BGPStatus(sp.Advertised(), sp.Sessions()) }
		n.told = func() *agentv1.AnnounceStatus {
			return announceMessage(announce.ModeBGP, n.cfg.Announce, sp.VIPs(), sp.SessionStates())
		}
		return announce.New(prog, n.cfg.Node, n.cfg.Announce, sp, reg, n.log)
	}
	rt, err := announce.OpenTable(n.cfg.AnnounceTable)
	if err != nil {
		return nil, err
	}
	n.undo = append(n.undo, rt.Close)
	n.announced = func() announce.Status {
		vips, err := rt.List()
		return announce.TableStatus(n.cfg.AnnounceTable, vips, err)
	}
	n.told = func() *agentv1.AnnounceStatus {
		vips, err := rt.List()
		if err != nil {
			return nil // unknown: the server keeps what it was last told
		}
		return announceMessage(announce.ModeTable, n.cfg.Announce, vips, nil)
	}
	return announce.New(prog, n.cfg.Node, n.cfg.Announce, rt, reg, n.log)
}

// followAddresses gives the node's node-port addresses to nftables, to
// the agent (a VIP's member that is one of this node's own node ports is
// replaced by its endpoints) and to the health-check node ports: once if
// they are given, else now and whenever they change.
func (n *Node) followAddresses(ctx context.Context, hc *kubehealth.Server) error {
	set := func(addrs []netip.Addr) error {
		if hc != nil && len(n.cfg.NodePortCIDRs) > 0 {
			hc.SetAddresses(append([]netip.Addr{}, addrs...))
		}
		if err := n.dp.SetNodeAddresses(addrs); err != nil {
			return err
		}
		return n.agent.SetNodeAddresses(ctx, addrs)
	}
	if n.cfg.NodeAddresses != nil {
		return set(n.cfg.NodeAddresses)
	}
	return agent.WatchNodePortAddresses(ctx, addressInterval, n.cfg.NodePortCIDRs, set, n.log)
}

// serveHTTP serves kube-proxy's node health endpoint and the agent's
// metrics, readiness and status, as configured.
func (n *Node) serveHTTP(reg *prometheus.Registry, hc *kubehealth.Server) error {
	if n.cfg.Healthz != "" {
		lastUpdated := func() time.Time { return time.Time{} }
		if hc != nil {
			lastUpdated = hc.LastUpdated
		}
		// Not fatal: where kube-proxy still runs it holds the port, and
		// the flows matter more than this endpoint.
		if err := n.serve(n.cfg.Healthz, kubehealth.NodeHandler(n.agent.Ready, lastUpdated)); err != nil {
			n.log.Warn("node health endpoint not served", "flag", "--healthz-bind-address", "err", err)
		}
	}
	if n.cfg.Metrics == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/readyz", ReadyHandler(n.agent.Ready))
	mux.Handle("/status", StatusHandler(n.status))
	if err := n.serve(n.cfg.Metrics, mux); err != nil {
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	return nil
}

// status is the agent's /status.
func (n *Node) status() Status {
	a, l := n.announced(), n.l2()
	return Status{KernelStatus: n.agent.KernelStatus(), Announcements: &a, L2: &l}
}

// serve serves h on addr until the node stops.
func (n *Node) serve(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h}
	ln = httpserve.Serve(srv, ln, n.cfg.HTTPLimits, n.log)
	go func() { _ = srv.Serve(ln) }()
	// The listener too: Serve may not have taken it yet, and the port
	// must be free once the node has stopped.
	n.undo = append(n.undo, func() { _ = srv.Close(); _ = ln.Close() })
	return nil
}

// run runs the agent until ctx ends, removes the flows if asked to, and
// closes what Start opened.
func (n *Node) run(ctx context.Context) {
	defer close(n.done)
	defer n.close()
	n.log.Info("flowlb agent starting", "node", n.cfg.Node, "zone", n.cfg.Zone, "servers", n.cfg.Servers, "metrics", n.cfg.Metrics,
		"announce", n.cfg.Announce, "ebpf", n.sockets != nil, "ovn", n.ovn != nil)
	if err := n.agent.Run(ctx); err != nil && ctx.Err() == nil {
		n.err = err
		return
	}
	if n.cfg.RemoveOnStop == nil || n.dp == nil {
		return
	}
	remove, err := n.cfg.RemoveOnStop()
	switch {
	case err != nil:
		n.log.Warn("cannot tell whether the agent is being deleted; flows kept", "err", err)
	case remove:
		n.err = n.remove()
	}
}

// remove takes the node's flows out of its kernel: the nftables table,
// and the eBPF programs, maps and pins.
func (n *Node) remove() error {
	n.removed = true
	if err := n.dp.Remove(); err != nil {
		return fmt.Errorf("remove the nftables table: %w", err)
	}
	n.log.Info("flowlb's nftables table removed")
	if n.sockets == nil {
		return nil
	}
	if err := n.sockets.Remove(); err != nil {
		return fmt.Errorf("remove the eBPF data plane: %w", err)
	}
	n.log.Info("flowlb's eBPF programs, maps and pins removed", "pins", n.cfg.EBPF.PinDir)
	return nil
}

// close undoes Start, last first, once.
func (n *Node) close() {
	n.once.Do(func() {
		for i := len(n.undo) - 1; i >= 0; i-- {
			n.undo[i]()
		}
	})
}

// Agent is the node's agent.
func (n *Node) Agent() *agent.Agent { return n.agent }

// Wait waits until the node has stopped (its context ended, or the agent
// failed) and everything it opened is closed; the error is the agent's,
// or the removal's.
func (n *Node) Wait() error {
	<-n.done
	return n.err
}

// Done is closed when the node has stopped.
func (n *Node) Done() <-chan struct{} { return n.done }
