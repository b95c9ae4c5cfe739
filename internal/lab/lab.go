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
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/shared/pgserver"
)

// Options describe a lab to bring up.
type Options struct {
	Name        string // short lab name, [a-z0-9]{1,8}
	Nodes       int
	PodsPerNode int
	Ports       Ports // echo ports; defaults TCP 8080, UDP 9090, HTTP 80, PROXY-HTTP 81, HTTPS 443
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
	// OwnerPID, if set, ties the lab to that process instead (a test
	// binary that runs `flowlb lab up --owner-pid`).
	OwnerPID int
	// ReadyTimeout bounds the wait for echo servers to listen (default 30s).
	ReadyTimeout time.Duration
	// Zones is how many topology zones the nodes are dealt into (Zone;
	// default DefaultZones): the zone labels of the lab's Kubernetes nodes
	// and the agents' --zone.
	Zones int
	// Servers adds server hosts s1…sN (N ≤ MaxServers) on the fabric, for
	// flowlb server replicas.
	Servers int
	// Postgres adds the database host and starts the lab's PostgreSQL
	// (StartPostgres) once the rest is up.
	Postgres bool
	// Dataplane is the agents' data plane (AgentDataplaneArgs): "" or
	// DataplaneNftables, or DataplaneEBPF, for which the lab mounts a
	// bpffs of its own for the nodes' pins.
	Dataplane string
	Log       *slog.Logger
}

// DefaultPorts are the echo server ports when Options.Ports is empty.
var DefaultPorts = Ports{TCP: []int{8080}, UDP: []int{9090}, HTTP: []int{80}, ProxyHTTP: []int{81}, HTTPS: []int{443}}

// Lab is a running lab. Its methods are safe for concurrent use and keep
// the on-disk state current, so the CLI and tests can share a lab.
type Lab struct {
	name string
	dir  string
	log  *slog.Logger

	mu sync.Mutex
	st State

	// makers are the socket makers of hosts whose dials a lab on eBPF
	// makes in their node's cgroup (sockets.go).
	makersMu sync.Mutex
	makers   map[string]*socketMaker
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
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := o.fillDefaults(); err != nil {
		return nil, err
	}
	st, err := initialState(o)
	if err != nil {
		return nil, err
	}
	dir, err := claimStateDir(o.Name, stateRoot(o.StateRoot))
	if err != nil {
		return nil, err
	}
	l = &Lab{name: o.Name, dir: dir, log: o.Log, st: st}
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
	if err := l.bringUp(ctx, o); err != nil {
		return nil, err
	}
	// The flowlb servers' secrets, for what is started on the lab by hand
	// as much as by the demo and the tests.
	if _, err := l.ReplicaSecrets(); err != nil {
		return nil, err
	}
	return l, nil
}

// validate checks the lab's name and size.
func (o *Options) validate() error {
	if err := ValidName(o.Name); err != nil {
		return err
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return fmt.Errorf("nodes %d: want 1-%d", o.Nodes, MaxNodes)
	}
	if o.PodsPerNode < 0 || o.PodsPerNode > MaxPodsPerNode {
		return fmt.Errorf("pods per node %d: want 0-%d", o.PodsPerNode, MaxPodsPerNode)
	}
	if o.Servers < 0 || o.Servers > MaxServers {
		return fmt.Errorf("servers %d: want 0-%d", o.Servers, MaxServers)
	}
	if o.Dataplane != "" && o.Dataplane != DataplaneNftables && o.Dataplane != DataplaneEBPF {
		return fmt.Errorf("dataplane %q: want %s or %s", o.Dataplane, DataplaneNftables, DataplaneEBPF)
	}
	if o.Dataplane == DataplaneEBPF && cgroup2Root() == "" {
		return fmt.Errorf("dataplane %s: no cgroup v2 mount for the nodes' cgroups", DataplaneEBPF)
	}
	if o.Postgres {
		// Before building anything.
		if _, err := pgserver.Find(); err != nil {
			return fmt.Errorf("lab database: %w", err)
		}
	}
	return nil
}

// fillDefaults sets the defaults the field comments of Options name.
func (o *Options) fillDefaults() error {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(o.Ports.TCP)+len(o.Ports.UDP)+len(o.Ports.HTTP) == 0 {
		o.Ports = DefaultPorts
	}
	if len(o.Echo) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Echo = []string{exe, "lab", "echo"}
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	if o.Zones < 1 {
		o.Zones = DefaultZones
	}
	return nil
}

// initialState is the state of a lab of o before anything is built: every
// node with its pods, and every node a next hop of the router.
func initialState(o Options) (State, error) {
	st := State{Name: o.Name, Created: time.Now().UTC(), Ports: o.Ports, Echo: o.Echo, EchoEnv: o.EchoEnv, Zones: o.Zones}
	if o.Dataplane == DataplaneEBPF {
		st.Dataplane = DataplaneEBPF
	}
	if o.Owned || o.OwnerPID != 0 {
		pid := o.OwnerPID
		if pid == 0 {
			pid = os.Getpid()
		}
		start, err := procStart(pid)
		if err != nil {
			return State{}, fmt.Errorf("owner %d: %w", pid, err)
		}
		st.Owner = &ProcState{PID: pid, Start: start}
	}
	for i := 1; i <= o.Nodes; i++ {
		n := NodeState{Index: i}
		for j := 1; j <= o.PodsPerNode; j++ {
			n.Pods = append(n.Pods, j)
		}
		st.Nodes = append(st.Nodes, n)
		st.NextHops = append(st.NextHops, i)
	}
	for k := 1; k <= o.Servers; k++ {
		st.Servers = append(st.Servers, k)
	}
	return st, nil
}

// claimStateDir creates the state directory of lab name under root, with
// its logs and ctl subdirectories, and refuses a name that is taken by a
// state directory or by namespaces.
func claimStateDir(name, root string) (string, error) {
	dir := filepath.Join(root, name)
	if existing, _ := listNS(Prefix(name)); len(existing) > 0 {
		return "", fmt.Errorf("lab %s: namespaces %s... exist; run `flowlb lab down --name %s`", name, existing[0], name)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	// Mkdir (not MkdirAll) doubles as the claim on the name.
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("lab %s exists (%s); run `flowlb lab down --name %s`", name, dir, name)
		}
		return "", err
	}
	for _, sub := range []string{"logs", "ctl"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// bringUp builds the network of a freshly claimed lab, starts the pods'
// echo servers unless o.NoEcho and the database if o.Postgres, and marks
// the lab ready.
func (l *Lab) bringUp(ctx context.Context, o Options) error {
	t0 := time.Now()
	if o.Dataplane == DataplaneEBPF {
		if err := mountBPFFS(l.dir, o.Nodes); err != nil {
			return err
		}
	}
	if err := l.build(ctx); err != nil {
		return err
	}
	o.Log.Info("lab network built", "lab", o.Name, "nodes", o.Nodes, "pods", o.Nodes*o.PodsPerNode, "elapsed", time.Since(t0))
	if !o.NoEcho {
		if err := l.startAllEcho(ctx, o.ReadyTimeout); err != nil {
			return err
		}
	}
	if o.Postgres {
		t1 := time.Now()
		if _, err := l.StartPostgres(ctx); err != nil {
			return err
		}
		o.Log.Info("lab database up", "lab", o.Name, "dsn", PostgresDSN, "elapsed", time.Since(t1))
	}
	if err := l.update(func(s *State) error { s.Ready = true; return nil }); err != nil {
		return err
	}
	o.Log.Info("lab up", "lab", o.Name, "elapsed", time.Since(t0))
	return nil
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
