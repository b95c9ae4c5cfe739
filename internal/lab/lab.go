// Package lab builds a multi-node cluster out of network namespaces on one
// machine: nodes joined by a bridged fabric, routed pod networks with an
// echo server in every pod, and an external client behind a router that
// reaches the external VIP range through the nodes with ECMP.
//
// Nothing is added to the root namespace: every link is created from
// inside a lab namespace, all addresses are in 198.18.0.0/15, and no
// namespace has a route out of the machine. See docs/lab.md.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Options describe a lab to bring up.
type Options struct {
	Name        string // short lab name, [a-z0-9]{1,8}
	Nodes       int
	PodsPerNode int
	Ports       Ports // echo ports; defaults TCP 8080, UDP 9090, HTTP 80
	// Echo is the argv prefix that runs the echo server; the lab appends
	// its flags. Default: this executable with "lab echo" (the flowlb
	// binary). Tests pass their own re-exec command (see labtest).
	Echo    []string
	EchoEnv []string
	// NoEcho leaves pods without an echo server.
	NoEcho bool
	// StateRoot overrides DefaultStateRoot.
	StateRoot string
	// Owned ties the lab to the calling process: once it has exited (a
	// test binary killed by a timeout, say), DownOrphans removes the lab.
	Owned bool
	// ReadyTimeout bounds the wait for echo servers to listen (default 30s).
	ReadyTimeout time.Duration
	// Zones is how many topology zones the nodes are dealt into (Zone;
	// default DefaultZones): the zone labels of the lab's Kubernetes nodes
	// and the agents' --zone.
	Zones int
	Log   *slog.Logger
}

// DefaultPorts are the echo server ports when Options.Ports is empty.
var DefaultPorts = Ports{TCP: []int{8080}, UDP: []int{9090}, HTTP: []int{80}}

// Lab is a running lab. Its methods are safe for concurrent use and keep
// the on-disk state current, so the CLI and tests can share a lab.
type Lab struct {
	name string
	dir  string
	log  *slog.Logger

	mu sync.Mutex
	st State
}

// Name is the lab's name.
func (l *Lab) Name() string { return l.name }

// Dir is the lab's state directory (state file, logs, echo control files).
func (l *Lab) Dir() string { return l.dir }

// State returns a copy of the lab's current state.
func (l *Lab) State() State { return *l.snapshot() }

func stateRoot(root string) string {
	if root == "" {
		return DefaultStateRoot
	}
	return root
}

// Up builds a lab. On failure it removes whatever it built.
func Up(ctx context.Context, o Options) (l *Lab, err error) {
	if err := ValidName(o.Name); err != nil {
		return nil, err
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return nil, fmt.Errorf("nodes %d: want 1-%d", o.Nodes, MaxNodes)
	}
	if o.PodsPerNode < 0 || o.PodsPerNode > MaxPodsPerNode {
		return nil, fmt.Errorf("pods per node %d: want 0-%d", o.PodsPerNode, MaxPodsPerNode)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(o.Ports.TCP)+len(o.Ports.UDP)+len(o.Ports.HTTP) == 0 {
		o.Ports = DefaultPorts
	}
	if len(o.Echo) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.Echo = []string{exe, "lab", "echo"}
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	root := stateRoot(o.StateRoot)
	dir := filepath.Join(root, o.Name)
	if existing, _ := listNS(Prefix(o.Name)); len(existing) > 0 {
		return nil, fmt.Errorf("lab %s: namespaces %s... exist; run `flowlb lab down --name %s`", o.Name, existing[0], o.Name)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	// Mkdir (not MkdirAll) doubles as the claim on the name.
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("lab %s exists (%s); run `flowlb lab down --name %s`", o.Name, dir, o.Name)
		}
		return nil, err
	}
	for _, sub := range []string{"logs", "ctl"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	if o.Zones < 1 {
		o.Zones = DefaultZones
	}
	l = &Lab{name: o.Name, dir: dir, log: o.Log}
	l.st = State{Name: o.Name, Created: time.Now().UTC(), Ports: o.Ports, Echo: o.Echo, EchoEnv: o.EchoEnv, Zones: o.Zones}
	if o.Owned {
		start, err := procStart(os.Getpid())
		if err != nil {
			return nil, err
		}
		l.st.Owner = &ProcState{PID: os.Getpid(), Start: start}
	}
	for i := 1; i <= o.Nodes; i++ {
		n := NodeState{Index: i}
		for j := 1; j <= o.PodsPerNode; j++ {
			n.Pods = append(n.Pods, j)
		}
		l.st.Nodes = append(l.st.Nodes, n)
		l.st.NextHops = append(l.st.NextHops, i)
	}
	// Write the state before touching the kernel, so that `lab down`
	// finds the lab even if we die in the middle.
	if err := writeState(dir, &l.st); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = Down(o.Name, o.StateRoot)
			l = nil
		}
	}()
	t0 := time.Now()
	if err := l.build(ctx); err != nil {
		return nil, err
	}
	o.Log.Info("lab network built", "lab", o.Name, "nodes", o.Nodes, "pods", o.Nodes*o.PodsPerNode, "elapsed", time.Since(t0))
	if !o.NoEcho {
		if err := l.startAllEcho(ctx, o.ReadyTimeout); err != nil {
			return nil, err
		}
	}
	if err := l.update(func(s *State) error { s.Ready = true; return nil }); err != nil {
		return nil, err
	}
	o.Log.Info("lab up", "lab", o.Name, "elapsed", time.Since(t0))
	return l, nil
}

// Open attaches to a lab brought up earlier (by another process).
func Open(name, root string) (*Lab, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	dir := filepath.Join(stateRoot(root), name)
	s, err := readState(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("lab %s not found (no %s)", name, stateFile(dir))
		}
		return nil, err
	}
	return &Lab{name: name, dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil)), st: *s}, nil
}

// Sysctls per role; docs/lab.md explains each one.
var (
	// Every namespace: IPv4 only, so no DAD, router solicitations or
	// link-local noise, and links come up at once.
	sysctlAll = []sysctl{
		{key: "net.ipv6.conf.all.disable_ipv6", val: "1"},
		{key: "net.ipv6.conf.default.disable_ipv6", val: "1"},
	}
	// Routers (nodes and the router): forward, and accept asymmetric
	// paths (ECMP in, direct reply out) that rp_filter would drop; do not
	// send ICMP redirects when forwarding back onto the fabric, which
	// would teach hosts to bypass the node that owns the flow.
	sysctlForward = []sysctl{
		{key: "net.ipv4.ip_forward", val: "1"},
		{key: "net.ipv4.conf.all.rp_filter", val: "0"},
		{key: "net.ipv4.conf.default.rp_filter", val: "0"},
		{key: "net.ipv4.conf.all.send_redirects", val: "0"},
		{key: "net.ipv4.conf.default.send_redirects", val: "0"},
	}
	// Nodes: short TIME_WAIT in conntrack so load tests do not fill the
	// table with finished connections.
	sysctlNode = []sysctl{
		{key: "net.netfilter.nf_conntrack_tcp_timeout_time_wait", val: "5", optional: true},
		{key: "net.ipv4.ip_local_port_range", val: "1024 65535"},
	}
	// Router: hash ECMP on the 5-tuple, so one client spreads its
	// connections over the nodes.
	sysctlRouter = []sysctl{
		{key: "net.ipv4.fib_multipath_hash_policy", val: "1"},
	}
	// Endpoints (pods and client): many short connections.
	sysctlEndpoint = []sysctl{
		{key: "net.ipv4.ip_local_port_range", val: "1024 65535"},
		{key: "net.ipv4.tcp_tw_reuse", val: "1"},
		{key: "net.core.somaxconn", val: "4096"},
		{key: "net.ipv4.ping_group_range", val: "0 2147483647"},
	}
	sysctlFabric = []sysctl{
		{key: "net.ipv4.conf.all.rp_filter", val: "0"},
		{key: "net.ipv4.conf.default.rp_filter", val: "0"},
	}
)

func sysctlsFor(kind string) []sysctl {
	out := slices.Clone(sysctlAll)
	switch kind {
	case "node":
		out = append(append(out, sysctlForward...), sysctlNode...)
	case HostRouter:
		out = append(append(out, sysctlForward...), sysctlRouter...)
	case "pod", HostClient:
		out = append(out, sysctlEndpoint...)
	case HostFabric:
		out = append(out, sysctlFabric...)
	}
	return out
}

// newHostNS creates the namespace of host with its sysctls and loopback up.
func (l *Lab) newHostNS(host string) error {
	kind, _, _, err := ParseHost(host)
	if err != nil {
		return err
	}
	return createNS(NSName(l.name, host), func() error {
		if err := setSysctls(sysctlsFor(kind)); err != nil {
			return err
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	})
}

// parallelism bounds concurrent kernel work; namespace and veth creation
// mostly wait on RCU grace periods, so more workers than CPUs pays off.
const parallelism = 16

func (l *Lab) build(ctx context.Context) error {
	s := l.snapshot()
	hosts := []string{HostFabric, HostRouter, HostClient}
	for _, n := range s.Nodes {
		hosts = append(hosts, NodeName(n.Index))
		for _, j := range n.Pods {
			hosts = append(hosts, PodName(n.Index, j))
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for _, h := range hosts {
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			return l.newHostNS(h)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := l.buildFabric(s); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	for _, n := range s.Nodes {
		g.Go(func() error {
			if err := l.buildNode(s, n.Index); err != nil {
				return err
			}
			for _, j := range n.Pods {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				if err := l.buildPod(n.Index, j); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

func pfx(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

func ipnet(p netip.Prefix) *net.IPNet { return pfx(p.Addr(), p.Bits()) }

// veth creates a veth pair from inside h's namespace: name stays there,
// peer goes straight into the namespace at peerNS. Neither end ever
// exists in the root namespace.
func veth(h *netlink.Handle, name, peer, peerNS string, master int) error {
	fd, err := unix.Open(NSPath(peerNS), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name, MasterIndex: master},
		PeerName:      peer,
		PeerNamespace: netlink.NsFd(fd),
	}
	if err := h.LinkAdd(v); err != nil {
		return fmt.Errorf("veth %s/%s -> %s: %w", name, peer, peerNS, err)
	}
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	return h.LinkSetUp(link)
}

// upAddr brings link name up in h's namespace with address a/bits.
func upAddr(h *netlink.Handle, name string, a netip.Addr, bits int) (netlink.Link, error) {
	link, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: pfx(a, bits)}); err != nil {
		return nil, fmt.Errorf("address %s on %s: %w", a, name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return nil, err
	}
	return link, nil
}

func routeVia(h *netlink.Handle, dst netip.Prefix, gw netip.Addr) error {
	if err := h.RouteReplace(&netlink.Route{Dst: ipnet(dst), Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("route %s via %s: %w", dst, gw, err)
	}
	return nil
}

// buildFabric creates the bridge, plugs every node and the router into it,
// and wires the router to the client.
func (l *Lab) buildFabric(s *State) error {
	fab, err := Handle(NSName(l.name, HostFabric))
	if err != nil {
		return err
	}
	defer fab.Close()
	if err := fab.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	br, err := upAddr(fab, "br0", ControlAddr, FabricCIDR.Bits())
	if err != nil {
		return err
	}
	brIdx := br.Attrs().Index
	for _, n := range s.Nodes {
		if err := veth(fab, NodeName(n.Index), "eth0", NSName(l.name, NodeName(n.Index)), brIdx); err != nil {
			return err
		}
	}
	if err := veth(fab, "rtr", "eth0", NSName(l.name, HostRouter), brIdx); err != nil {
		return err
	}
	// The control address reaches pods and the client like any fabric host.
	for _, n := range s.Nodes {
		if err := routeVia(fab, PodCIDR(n.Index), NodeAddr(n.Index)); err != nil {
			return err
		}
	}
	if err := routeVia(fab, ClientCIDR, RouterFabricAddr); err != nil {
		return err
	}

	rtr, err := Handle(NSName(l.name, HostRouter))
	if err != nil {
		return err
	}
	defer rtr.Close()
	if _, err := upAddr(rtr, "eth0", RouterFabricAddr, FabricCIDR.Bits()); err != nil {
		return err
	}
	if err := veth(rtr, "eth1", "eth0", NSName(l.name, HostClient), 0); err != nil {
		return err
	}
	if _, err := upAddr(rtr, "eth1", RouterClientAddr, ClientCIDR.Bits()); err != nil {
		return err
	}
	if err := setNextHops(rtr, s.NextHops); err != nil {
		return err
	}

	cl, err := Handle(NSName(l.name, HostClient))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := upAddr(cl, "eth0", ClientAddr, ClientCIDR.Bits()); err != nil {
		return err
	}
	return cl.RouteReplace(&netlink.Route{Dst: pfx(netip.IPv4Unspecified(), 0), Gw: RouterClientAddr.AsSlice()})
}

// setNextHops points the external VIP range at the given nodes (ECMP);
// with no nodes the route is removed and the router answers unreachable.
func setNextHops(h *netlink.Handle, nodes []int) error {
	if len(nodes) == 0 {
		if err := h.RouteDel(&netlink.Route{Dst: ipnet(ExternalVIPs)}); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete external VIP route: %w", err)
		}
		return nil
	}
	if err := h.RouteReplace(ecmpRoute(ExternalVIPs, nodes)); err != nil {
		return fmt.Errorf("external VIP route via nodes %v: %w", nodes, err)
	}
	return nil
}

// buildNode addresses node i on the fabric and routes the other nodes'
// pod CIDRs and the client network.
func (l *Lab) buildNode(s *State, i int) error {
	h, err := Handle(NSName(l.name, NodeName(i)))
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := upAddr(h, "eth0", NodeAddr(i), FabricCIDR.Bits()); err != nil {
		return err
	}
	for _, n := range s.Nodes {
		if n.Index != i {
			if err := routeVia(h, PodCIDR(n.Index), NodeAddr(n.Index)); err != nil {
				return err
			}
		}
	}
	return routeVia(h, ClientCIDR, RouterFabricAddr)
}

// buildPod wires pod j of node i: a veth pJ on the node carrying the
// gateway /32 and a /32 route to the pod; in the pod, eth0 with the pod's
// /32 and a default route via the gateway (routed, Calico style: no
// bridge, no ARP between pods).
func (l *Lab) buildPod(i, j int) error {
	node, err := Handle(NSName(l.name, NodeName(i)))
	if err != nil {
		return err
	}
	defer node.Close()
	dev := "p" + strconv.Itoa(j)
	podNS := NSName(l.name, PodName(i, j))
	if err := veth(node, dev, "eth0", podNS, 0); err != nil {
		return err
	}
	link, err := upAddr(node, dev, PodGateway(i), 32)
	if err != nil {
		return err
	}
	if err := node.RouteReplace(&netlink.Route{Dst: pfx(PodAddr(i, j), 32), LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to pod %s: %w", PodName(i, j), err)
	}
	pod, err := Handle(podNS)
	if err != nil {
		return err
	}
	defer pod.Close()
	eth, err := upAddr(pod, "eth0", PodAddr(i, j), 32)
	if err != nil {
		return err
	}
	if err := pod.RouteReplace(&netlink.Route{Dst: pfx(PodGateway(i), 32), LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("pod %s gateway route: %w", PodName(i, j), err)
	}
	return pod.RouteReplace(&netlink.Route{Dst: pfx(netip.IPv4Unspecified(), 0), Gw: PodGateway(i).AsSlice()})
}

// SetNextHops changes, at run time, which nodes the router sends the
// external VIP range to.
func (l *Lab) SetNextHops(nodes ...int) error {
	for _, n := range nodes {
		if !l.hasNode(n) {
			return fmt.Errorf("no node %d", n)
		}
	}
	return l.update(func(s *State) error {
		h, err := Handle(NSName(l.name, HostRouter))
		if err != nil {
			return err
		}
		defer h.Close()
		if err := setNextHops(h, nodes); err != nil {
			return err
		}
		s.NextHops = slices.Clone(nodes)
		return nil
	})
}

// DefaultZones is the number of zones of a lab that names none.
const DefaultZones = 3

// Zone is the topology zone of node i when nodes are dealt into zones
// zones round-robin: zone-a, zone-b, ...
func Zone(i, zones int) string {
	if zones < 1 {
		zones = 1
	}
	return "zone-" + string(rune('a'+(i-1)%zones))
}

// Zones is the number of zones the lab's nodes are dealt into.
func (l *Lab) Zones() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.Zones < 1 {
		return DefaultZones // a lab from before zones were recorded
	}
	return l.st.Zones
}

// Zone is the topology zone of node i.
func (l *Lab) Zone(i int) string { return Zone(i, l.Zones()) }

func (l *Lab) hasNode(i int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.st.Nodes, func(n NodeState) bool { return n.Index == i })
}

// Host is one namespace of the lab: a node, a pod, the client, the router
// or the fabric.
type Host struct {
	lab  *Lab
	Name string     // n1, n1-p3, client, router, fabric
	NS   string     // network namespace name
	Addr netip.Addr // main address
}

// Host looks a host up by name.
func (l *Lab) Host(name string) (Host, error) {
	kind, i, j, err := ParseHost(name)
	if err != nil {
		return Host{}, err
	}
	h := Host{lab: l, Name: name, NS: NSName(l.name, name)}
	s := l.snapshot()
	node := func() *NodeState {
		for k := range s.Nodes {
			if s.Nodes[k].Index == i {
				return &s.Nodes[k]
			}
		}
		return nil
	}
	switch kind {
	case HostFabric:
		h.Addr = ControlAddr
	case HostRouter:
		h.Addr = RouterFabricAddr
	case HostClient:
		h.Addr = ClientAddr
	case "node":
		if node() == nil {
			return Host{}, fmt.Errorf("lab %s has no node %s", l.name, name)
		}
		h.Addr = NodeAddr(i)
	case "pod":
		n := node()
		if n == nil || !slices.Contains(n.Pods, j) {
			return Host{}, fmt.Errorf("lab %s has no pod %s", l.name, name)
		}
		h.Addr = PodAddr(i, j)
	}
	return h, nil
}

func (l *Lab) must(name string) Host {
	h, err := l.Host(name)
	if err != nil {
		panic(err)
	}
	return h
}

// Node returns node i (1-based); it panics if there is none.
func (l *Lab) Node(i int) Host { return l.must(NodeName(i)) }

// Pod returns pod j of node i; it panics if there is none.
func (l *Lab) Pod(i, j int) Host { return l.must(PodName(i, j)) }

// Client, Router and Fabric return the fixed hosts. Fabric is where a
// control-plane process (flowlb server) runs: it listens on ControlAddr,
// which every node reaches directly.
func (l *Lab) Client() Host { return l.must(HostClient) }
func (l *Lab) Router() Host { return l.must(HostRouter) }
func (l *Lab) Fabric() Host { return l.must(HostFabric) }

// Nodes returns every node.
func (l *Lab) Nodes() []Host {
	var out []Host
	for _, n := range l.snapshot().Nodes {
		name := NodeName(n.Index)
		out = append(out, Host{lab: l, Name: name, NS: NSName(l.name, name), Addr: NodeAddr(n.Index)})
	}
	return out
}

// Pods returns every pod, node by node.
func (l *Lab) Pods() []Host {
	var out []Host
	for _, n := range l.snapshot().Nodes {
		for _, j := range n.Pods {
			name := PodName(n.Index, j)
			out = append(out, Host{lab: l, Name: name, NS: NSName(l.name, name), Addr: PodAddr(n.Index, j)})
		}
	}
	return out
}

// Do runs fn on a dedicated OS thread inside the host's namespace.
func (h Host) Do(fn func() error) error { return InNS(h.NS, fn) }

// Netlink opens a netlink handle in the host's namespace; close it.
func (h Host) Netlink() (*netlink.Handle, error) { return Handle(h.NS) }

// Dial opens a connection from inside the host's namespace; the returned
// connection can be used from any goroutine.
func (h Host) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a listener inside the host's namespace. The socket stays
// there while the caller serves it from any goroutine: a test can run
// its server in-process and still be reached from the nodes, e.g.
// l.Fabric().Listen("tcp", lab.ControlAddr.String()+":9000").
func (h Host) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := h.Do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// Start runs argv in the host's namespace as a detached process named
// name (unique per host), logging to a file under the lab directory. The
// lab tracks it: Stop, status and down find it.
func (h Host) Start(name string, argv []string, env ...string) (ProcState, error) {
	return h.lab.startProc(h.Name, name, argv, env)
}

// Stop kills the host's process named name.
func (h Host) Stop(name string) error { return h.lab.stopProc(h.Name, name) }

// Run runs argv in the host's namespace in the foreground with the given
// stdio and returns its exit status (like `ip netns exec`).
func (h Host) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, argv ...string) error {
	if len(argv) == 0 {
		return errors.New("empty command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := h.Do(cmd.Start); err != nil {
		return err
	}
	return cmd.Wait()
}

// LogPath is the log file of the host's process named name.
func (l *Lab) LogPath(host, name string) string {
	return filepath.Join(l.dir, "logs", host+"."+name+".log")
}

func (l *Lab) startProc(host, name string, argv, env []string, extra ...*os.File) (ProcState, error) {
	if _, err := l.Host(host); err != nil {
		return ProcState{}, err
	}
	var p ProcState
	err := l.update(func(s *State) error {
		for _, q := range s.Procs {
			if q.Host == host && q.Name == name && q.alive() {
				return fmt.Errorf("%s/%s already runs as pid %d", host, name, q.PID)
			}
		}
		var err error
		p, err = spawn(NSName(l.name, host), l.cgroup(host), l.LogPath(host, name), argv, env, extra...)
		if err != nil {
			return err
		}
		p.Host, p.Name = host, name
		s.Procs = slices.DeleteFunc(s.Procs, func(q ProcState) bool { return q.Host == host && q.Name == name })
		s.Procs = append(s.Procs, p)
		return nil
	})
	return p, err
}

func (l *Lab) cgroup(host string) string {
	cg := cgroupDir(l.name)
	if cg == "" {
		return ""
	}
	return filepath.Join(cg, host)
}

func (l *Lab) stopProc(host, name string) error {
	return l.update(func(s *State) error {
		var pids []int
		found := false
		s.Procs = slices.DeleteFunc(s.Procs, func(q ProcState) bool {
			if q.Host != host || q.Name != name {
				return false
			}
			found = true
			if q.alive() {
				pids = append(pids, q.PID)
			}
			return true
		})
		if !found {
			return fmt.Errorf("no process %s on %s", name, host)
		}
		return killAndWait(pids, 5*time.Second)
	})
}

// Down removes the lab.
func (l *Lab) Down() error {
	root := filepath.Dir(l.dir)
	return Down(l.name, root)
}

// Down removes lab name completely: its processes (from the state file,
// its cgroup and a scan of every process's namespace), its namespaces
// (and with them every link and route), its cgroups and its state
// directory. It needs nothing but the name, so it also cleans up after a
// lab (or a `lab up`) that crashed; it is idempotent.
func Down(name, root string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	dir := filepath.Join(stateRoot(root), name)
	var errs []error
	nss, err := listNS(Prefix(name))
	if err != nil {
		errs = append(errs, err)
	}
	// Kill first: a namespace only goes away once no process holds it.
	if err := killCgroupProcs(cgroupDir(name)); err != nil {
		errs = append(errs, err)
	}
	inodes := map[uint64]bool{}
	for _, ns := range nss {
		if ino, err := nsInode(ns); err == nil {
			inodes[ino] = true
		}
	}
	pids := pidsInNS(inodes)
	if s, err := readState(dir); err == nil {
		for _, p := range s.Procs {
			if p.alive() {
				pids = append(pids, p.PID)
			}
		}
	}
	if err := killAndWait(pids, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range nss {
		if err := deleteNS(ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killCgroup(cgroupDir(name)); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DownOrphans removes every lab whose owner process (Options.Owned) has
// exited, and returns their names. Labs without an owner (made by the
// CLI) and labs of live processes are left alone, so concurrent test
// binaries can call it safely.
func DownOrphans(root string) ([]string, error) {
	var gone []string
	var errs []error
	for _, name := range Labs(root) {
		s, err := readState(filepath.Join(stateRoot(root), name))
		if err != nil || s.Owner == nil || s.Owner.alive() {
			continue
		}
		if err := Down(name, root); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, name)
	}
	return gone, errors.Join(errs...)
}

// killCgroupProcs kills the lab's cgroup tree without waiting.
func killCgroupProcs(dir string) error {
	if dir == "" {
		return nil
	}
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	return nil
}

// Labs lists the names of labs present on the machine, found by state
// directory, namespace and cgroup prefix.
func Labs(root string) []string {
	seen := map[string]bool{}
	if ents, err := os.ReadDir(stateRoot(root)); err == nil {
		for _, e := range ents {
			if ValidName(e.Name()) == nil {
				seen[e.Name()] = true
			}
		}
	}
	if nss, err := listNS("flb-"); err == nil {
		for _, ns := range nss {
			if n := labOfNS(ns); n != "" {
				seen[n] = true
			}
		}
	}
	if cg := cgroup2Root(); cg != "" {
		if ents, err := os.ReadDir(cg); err == nil {
			for _, e := range ents {
				if rest, ok := strings.CutPrefix(e.Name(), "flb-"); ok && ValidName(rest) == nil {
					seen[rest] = true
				}
			}
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ExitCode extracts a process exit status from a Run error.
func ExitCode(err error) (int, bool) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ee.ExitCode(), true
	}
	return 0, false
}
