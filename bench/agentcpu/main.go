// Command agentcpu measures the agent's CPU per change. A child process
// runs one agent (internal/node/agent, as flowlb agent runs it, without
// probes) against a replica played by this process over gRPC on
// loopback. The replica sends a snapshot of -services services, then
// -changes deltas, each one load balancer's replacement with a member
// added or removed (what the hub sends for a member change), and waits
// for each acknowledgement before the next (-mode paced) or sends them
// all and waits for the last (-mode burst). The child reports its own CPU
// time (getrusage) before and after the deltas: the agent's CPU, with
// its data plane's (-kernel none: a data plane that does nothing; fake:
// the nftables data plane on the in-memory kernel), per change; and its
// live heap after the deltas (after a collection), which grows with each
// copy of the service table the agent keeps.
//
// -arrive makes each delta a new load balancer of one service (port 80)
// instead of a member change: N new services arriving, as a burst of
// Kubernetes Services reaches an agent. -kubehealth gives the agent the
// health-check node ports' hook that flowlb agent has with
// --healthcheck-node-ports (kube-proxy's node ports follow the table).
//
// -agents name=PATH,... runs builds of this command as the child, in
// turn within each round (each round starting with the next one), so
// that builds of the agent are compared on the same machine at the same
// time:
//
//	go build -o /tmp/agentcpu-new ./bench/agentcpu
//	(in a checkout of the other commit) go build -o /tmp/agentcpu-old ./bench/agentcpu
//	/tmp/agentcpu-new -agents before=/tmp/agentcpu-old,after=/tmp/agentcpu-new
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables/nftfake"
	"github.com/flowlb/flowlb/internal/node/kubehealth"
	"github.com/flowlb/flowlb/internal/shared/agentgrpc"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func main() {
	child := flag.String("child", "", "(internal) run the agent against this replica address")
	kernel := flag.String("kernel", "none", "the agent's data plane: none (does nothing) or fake (nftables on the in-memory kernel)")
	services := flag.Int("services", 2000, "services in the snapshot (two per load balancer, ports 80 and 443)")
	backends := flag.Int("backends", 10, "backends per service")
	changes := flag.Int("changes", 2000, "deltas sent after the snapshot")
	mode := flag.String("mode", "paced", "paced: each delta after the previous one's acknowledgement; burst: all at once")
	rounds := flag.Int("rounds", 3, "rounds; each runs every agent once")
	agents := flag.String("agents", "", "name=PATH,...: builds of this command to run as the agent, in turn (default: this one)")
	profile := flag.String("cpuprofile", "", "write the agent's CPU profile of the deltas to this file, suffixed with the agent's name and the round")
	arrive := flag.Bool("arrive", false, "each delta adds a new load balancer of one service instead of changing a member")
	kubeHealth := flag.Bool("kubehealth", false, "give the agent the health-check node ports' hook (flowlb agent --healthcheck-node-ports)")
	flag.Parse()
	if *child != "" {
		if err := runChild(*child, *kernel, *profile, *kubeHealth); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(*kernel, *mode, *agents, *profile, *services, *backends, *changes, *rounds, *arrive, *kubeHealth); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type build struct{ name, path string }

func run(kernel, mode, list, profile string, services, backends, changes, rounds int, arrive, kubeHealth bool) error {
	if mode != "paced" && mode != "burst" {
		return fmt.Errorf("-mode %q: paced or burst", mode)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	builds := []build{{"this", self}}
	if list != "" {
		builds = nil
		for _, f := range strings.Split(list, ",") {
			name, path, ok := strings.Cut(f, "=")
			if !ok {
				return fmt.Errorf("-agents: %q is not name=PATH", f)
			}
			builds = append(builds, build{name, path})
		}
	}
	snap, deltas := workload(services, backends, changes, arrive)
	what := "member changes"
	if arrive {
		what = "new load balancers"
	}
	fmt.Printf("agent CPU per change: %d services (%d backends each), %d deltas (%s, %s), kernel %s, kubehealth %v, %d rounds\n",
		services, backends, changes, what, mode, kernel, kubeHealth, rounds)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average at start: %s\n", strings.Join(strings.Fields(string(b))[:3], " "))
	}
	per := map[string][]time.Duration{}
	heaps := map[string][]uint64{}
	for r := range rounds {
		for i := range builds {
			b := builds[(r+i)%len(builds)]
			prof := ""
			if profile != "" {
				prof = fmt.Sprintf("%s.%s.%d", profile, b.name, r+1)
			}
			cpu, heap, err := measure(b.path, kernel, mode, prof, kubeHealth, snap, deltas)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, b.name, err)
			}
			per[b.name] = append(per[b.name], cpu)
			heaps[b.name] = append(heaps[b.name], heap)
			fmt.Printf("round %d  %-8s %8.1f µs CPU per change  %6.1f MiB heap\n", r+1, b.name, float64(cpu.Nanoseconds())/1e3, mib(heap))
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average at end: %s\n", strings.Join(strings.Fields(string(b))[:3], " "))
	}
	fmt.Println("agent     median µs  min µs  max µs  median heap MiB")
	for _, b := range builds {
		d := slices.Clone(per[b.name])
		slices.Sort(d)
		h := slices.Clone(heaps[b.name])
		slices.Sort(h)
		us := func(x time.Duration) float64 { return float64(x.Nanoseconds()) / 1e3 }
		fmt.Printf("%-8s %9.1f %7.1f %7.1f %16.1f\n", b.name, us(d[len(d)/2]), us(d[0]), us(d[len(d)-1]), mib(h[len(h)/2]))
	}
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// workload builds the snapshot and the deltas: load balancer j has the
// services VIP:80 and VIP:443; delta i replaces load balancer i mod n,
// with one member more than the snapshot's or as many, in turn, or with
// arrive adds load balancer n+i with the service VIP:80 alone.
func workload(services, backends, changes int, arrive bool) (*agentv1.Update, []*agentv1.Update) {
	lbs := max(services/2, 1)
	lbServices := func(j int, extra bool) []flows.Service {
		vip := netip.AddrFrom4([4]byte{198, 19, byte(j / 250), byte(1 + j%250)})
		var out []flows.Service
		for _, port := range []uint16{80, 443} {
			s := flows.Service{Key: flows.Key{VIP: vip, Protocol: flows.TCP, Port: port}, LoadBalancerID: fmt.Sprintf("lb-%05d", j),
				ListenerID: fmt.Sprintf("l-%05d-%d", j, port), Algorithm: flows.RoundRobin}
			n := backends
			if extra {
				n++
			}
			for b := range n {
				s.Backends = append(s.Backends, flows.Backend{MemberID: fmt.Sprintf("m-%05d-%d", j, b),
					Address: netip.AddrFrom4([4]byte{198, 18, byte(16 + b), byte(1 + j%250)}), Port: 8080, Weight: 1})
			}
			out = append(out, s)
		}
		return out
	}
	snap := &agentv1.Update{Epoch: "bench", Revision: 1, Snapshot: true}
	for j := range lbs {
		snap.Loadbalancers = append(snap.Loadbalancers, flowpb.LoadBalancerServicesToProto(fmt.Sprintf("lb-%05d", j), lbServices(j, false)))
	}
	extra := make([]bool, lbs)
	var deltas []*agentv1.Update
	if arrive {
		for i := range changes {
			j := lbs + i
			deltas = append(deltas, &agentv1.Update{Epoch: "bench", Revision: int64(2 + i),
				Loadbalancers: []*agentv1.LoadBalancerServices{flowpb.LoadBalancerServicesToProto(fmt.Sprintf("lb-%05d", j), lbServices(j, false)[:1])}})
		}
		return snap, deltas
	}
	for i := range changes {
		j := i % lbs
		extra[j] = !extra[j]
		deltas = append(deltas, &agentv1.Update{Epoch: "bench", Revision: int64(2 + i),
			Loadbalancers: []*agentv1.LoadBalancerServices{flowpb.LoadBalancerServicesToProto(fmt.Sprintf("lb-%05d", j), lbServices(j, extra[j]))}})
	}
	return snap, deltas
}

// measure runs one agent (a child process of path) through the snapshot
// and the deltas, and returns its CPU per delta and its live heap after
// them.
func measure(path, kernel, mode, profile string, kubeHealth bool, snap *agentv1.Update, deltas []*agentv1.Update) (time.Duration, uint64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	rep := &replica{sessions: make(chan agentv1.Agent_SubscribeServer, 1), acks: make(chan int64, 1024), done: make(chan struct{})}
	// The agent pings every 10 s (as it pings a real replica).
	srv := grpc.NewServer(append(agentgrpc.ServerOptions(), grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}))...)
	agentv1.RegisterAgentServer(srv, rep)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	defer close(rep.done)

	args := []string{"-child", ln.Addr().String(), "-kernel", kernel, "-cpuprofile", profile}
	if kubeHealth {
		args = append(args, "-kubehealth")
	}
	cmd := exec.Command(path, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	out := bufio.NewReader(outPipe)
	// ask asks the child for its CPU time ("cpu", in ns) or live heap
	// ("heap", in bytes).
	ask := func(q string) (int64, error) {
		if _, err := io.WriteString(in, q+"\n"); err != nil {
			return 0, err
		}
		line, err := out.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("the agent's %s: %w", q, err)
		}
		return strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	}

	var stream agentv1.Agent_SubscribeServer
	select {
	case stream = <-rep.sessions:
	case <-time.After(30 * time.Second):
		return 0, 0, errors.New("the agent did not subscribe within 30 s")
	}
	acked := int64(0)
	waitAck := func(rev int64) error {
		timeout := time.After(2 * time.Minute)
		for acked < rev {
			select {
			case got := <-rep.acks:
				acked = max(acked, got)
			case <-timeout:
				return fmt.Errorf("no acknowledgement of revision %d within 2 min", rev)
			}
		}
		return nil
	}
	if err := stream.Send(snap); err != nil {
		return 0, 0, err
	}
	if err := waitAck(snap.GetRevision()); err != nil {
		return 0, 0, err
	}
	c0, err := ask("cpu")
	if err != nil {
		return 0, 0, err
	}
	for _, u := range deltas {
		if err := stream.Send(u); err != nil {
			return 0, 0, err
		}
		if mode == "paced" {
			if err := waitAck(u.GetRevision()); err != nil {
				return 0, 0, err
			}
		}
	}
	if err := waitAck(deltas[len(deltas)-1].GetRevision()); err != nil {
		return 0, 0, err
	}
	c1, err := ask("cpu")
	if err != nil {
		return 0, 0, err
	}
	heap, err := ask("heap")
	if err != nil {
		return 0, 0, err
	}
	return time.Duration(c1-c0) / time.Duration(len(deltas)), uint64(heap), nil
}

// replica is the server side of one agent's stream: it hands the stream
// to measure and passes the acknowledgements on.
type replica struct {
	agentv1.UnimplementedAgentServer
	sessions chan agentv1.Agent_SubscribeServer
	acks     chan int64
	done     chan struct{}
	once     sync.Once
}

func (r *replica) Subscribe(stream agentv1.Agent_SubscribeServer) error {
	if _, err := stream.Recv(); err != nil { // the hello
		return err
	}
	first := false
	r.once.Do(func() { first = true })
	if !first {
		return errors.New("one session only")
	}
	r.sessions <- stream
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if a := m.GetAck(); a != nil {
			select {
			case r.acks <- a.GetRevision():
			case <-r.done:
				return nil
			}
		}
	}
}

// null is a data plane that does nothing: the agent's own work alone.
type null struct{}

func (null) Sync(context.Context, flows.Table) error                   { return nil }
func (null) Apply(context.Context, []flows.Service, []flows.Key) error { return nil }

// runChild runs the agent until its stdin closes, answering "cpu" with
// its process's CPU time in nanoseconds and "heap" with its live heap in
// bytes after a collection; with profile, the CPU profile
// runs from the first "cpu" to the second.
func runChild(addr, kernel, profile string, kubeHealth bool) error {
	var prog agent.Programmer = null{}
	if kernel == "fake" {
		dp, err := nftables.NewWithConn(nftfake.New(), "n1")
		if err != nil {
			return err
		}
		prog = dp
	} else if kernel != "none" {
		return fmt.Errorf("-kernel %q: none or fake", kernel)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := agent.Config{Server: addr, Token: "bench", Node: "n1", NoHealth: true, VerifyInterval: -1}
	if kubeHealth {
		// As internal/node does with --healthcheck-node-ports; with no
		// node addresses, the server listens on nothing.
		hc := kubehealth.NewServer(nil, func() error { return nil }, log)
		defer hc.Close()
		cfg.OnProgrammed = func(s map[flows.Key]flows.Service) { hc.SetChecks(kubehealth.Checks(s, "n1")) }
	}
	a := agent.New(cfg, prog, log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	in := bufio.NewScanner(os.Stdin)
	asked := 0
	for in.Scan() {
		if in.Text() == "heap" {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Println(ms.HeapAlloc)
			continue
		}
		if in.Text() != "cpu" {
			continue
		}
		if profile != "" && asked == 1 {
			pprof.StopCPUProfile()
		}
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return err
		}
		fmt.Println(time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Nanoseconds())
		if profile != "" && asked == 0 {
			f, err := os.Create(profile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
		}
		asked++
	}
	return in.Err()
}
