package lab

// Hosts: the namespaces of a lab by name, and what a caller does inside
// one (dial, listen, run, start a tracked process).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func (l *Lab) hasNode(i int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.st.Nodes, func(n NodeState) bool { return n.Index == i })
}

// Host is one namespace of the lab: a node, a pod, a server host, the
// database host, the client, the router or the fabric.
type Host struct {
	lab  *Lab
	Name string     // n1, n1-p3, s1, db, client, router, fabric
	NS   string     // network namespace name
	Addr netip.Addr // main address
	// Addr6 is the IPv6 address beside it (docs/lab.md, address plan);
	// the router's and the fabric's are on the fabric, as Addr.
	Addr6 netip.Addr
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
		h.Addr, h.Addr6 = ControlAddr, ControlAddr6
	case HostRouter:
		h.Addr, h.Addr6 = RouterFabricAddr, RouterFabricAddr6
	case HostClient:
		h.Addr, h.Addr6 = ClientAddr, ClientAddr6
	case KindNode:
		if node() == nil {
			return Host{}, fmt.Errorf("lab %s has no node %s", l.name, name)
		}
		h.Addr, h.Addr6 = NodeAddr(i), NodeAddr6(i)
	case KindServer:
		if !slices.Contains(s.Servers, i) {
			return Host{}, fmt.Errorf("lab %s has no server host %s (lab up --servers)", l.name, name)
		}
		h.Addr, h.Addr6 = ServerAddr(i), ServerAddr6(i)
	case HostDB:
		if s.Postgres == nil {
			return Host{}, fmt.Errorf("lab %s has no database host (lab up --postgres)", l.name)
		}
		h.Addr, h.Addr6 = DBAddr, DBAddr6
	case KindPod:
		n := node()
		if n == nil || !slices.Contains(n.Pods, j) {
			return Host{}, fmt.Errorf("lab %s has no pod %s", l.name, name)
		}
		h.Addr, h.Addr6 = PodAddr(i, j), PodAddr6(i, j)
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
		out = append(out, Host{lab: l, Name: name, NS: NSName(l.name, name), Addr: NodeAddr(n.Index), Addr6: NodeAddr6(n.Index)})
	}
	return out
}

// Pods returns every pod, node by node.
func (l *Lab) Pods() []Host {
	var out []Host
	for _, n := range l.snapshot().Nodes {
		for _, j := range n.Pods {
			name := PodName(n.Index, j)
			out = append(out, Host{lab: l, Name: name, NS: NSName(l.name, name), Addr: PodAddr(n.Index, j), Addr6: PodAddr6(n.Index, j)})
		}
	}
	return out
}

// Do runs fn on a dedicated OS thread inside the host's namespace.
func (h Host) Do(fn func() error) error { return InNS(h.NS, fn) }

// Netlink opens a netlink handle in the host's namespace; close it.
func (h Host) Netlink() (*netlink.Handle, error) { return Handle(h.NS) }

// Dial opens a connection from inside the host's namespace; the returned
// connection can be used from any goroutine. In a lab on eBPF, a node's
// or a pod's connection is made as its own processes' (DialControl).
func (h Host) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var err error
		c, err = (&net.Dialer{Control: h.DialControl()}).DialContext(ctx, network, addr)
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
	return h.lab.startProc(h.Name, name, ProcState{Argv: argv, Env: env})
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
	// In the host's cgroup, as what Start starts: a pod's command is then
	// balanced by its node's eBPF data plane like the pod's own processes.
	if cg := h.lab.cgroup(h.Name); cg != "" && os.MkdirAll(cg, 0o755) == nil {
		if fd, err := unix.Open(cg, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(fd)
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		}
	}
	if err := h.Do(cmd.Start); err != nil {
		return err
	}
	return cmd.Wait()
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
