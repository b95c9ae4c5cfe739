package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// A node for the kernel tests: three backends answering on :8080 with
// their address, and an echo on :9090 of the first, behind
// 198.19.0.10:80 and 198.19.0.10:90.
var (
	repairBackends = []string{"198.18.17.2", "198.18.17.3", "198.18.17.4"}
	repairVIP      = netip.MustParseAddr("198.19.0.10")
)

// repairTable is the load balancer the kernel tests program.
func repairTable() *agentv1.LoadBalancerServices {
	web := flows.Service{Key: flows.Key{VIP: repairVIP, Protocol: flows.TCP, Port: 80}, LoadBalancerID: "lb", Algorithm: flows.RoundRobin, ConnectionLimit: -1}
	for _, b := range repairBackends {
		web.Backends = append(web.Backends, flows.Backend{Address: netip.MustParseAddr(b), Port: 8080, Weight: 1})
	}
	echo := flows.Service{Key: flows.Key{VIP: repairVIP, Protocol: flows.TCP, Port: 90}, LoadBalancerID: "lb", Algorithm: flows.RoundRobin, ConnectionLimit: -1,
		Backends: []flows.Backend{{Address: netip.MustParseAddr(repairBackends[0]), Port: 9090, Weight: 1}}}
	return wireLB("lb", web, echo)
}

// serveRepairNode puts the backends on lo and serves them; withVIPRoute
// routes the VIP range to lo (what nftables needs for the node's own
// connections; the socket programs translate before routing).
func serveRepairNode(t *testing.T, withVIPRoute bool) {
	t.Helper()
	for _, a := range repairBackends {
		addAddr(t, "lo", a+"/32")
		answer(t, a+":8080")
	}
	if withVIPRoute {
		lo, err := vnl.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := vnl.RouteAdd(&vnl.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: net.IP{198, 19, 0, 0}, Mask: net.CIDRMask(17, 32)},
			Scope: vnl.SCOPE_HOST, Type: unix.RTN_LOCAL}); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", repairBackends[0]+":9090")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// forwards reports whether the VIP reaches a backend (which answers
// "address:port client").
func forwards() (bool, string) {
	got := dialOnce(repairVIP.String() + ":80")
	backend, _, _ := strings.Cut(got, ":")
	return slices.Contains(repairBackends, backend), got
}

// heldConn is a TCP connection through the VIP, held open across a
// repair and used after it.
type heldConn struct {
	c net.Conn
	r *bufio.Reader
}

func holdConn(t *testing.T) *heldConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", repairVIP.String()+":90", time.Second)
	if err != nil {
		t.Fatalf("connect through the VIP: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	h := &heldConn{c: c, r: bufio.NewReader(c)}
	h.use(t)
	return h
}

func (h *heldConn) use(t *testing.T) {
	t.Helper()
	_ = h.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(h.c, "still there?\n"); err != nil {
		t.Fatalf("held connection: write: %v", err)
	}
	if got, err := h.r.ReadString('\n'); err != nil || got != "still there?\n" {
		t.Fatalf("held connection: read %q, %v", got, err)
	}
}

// runAgent runs an agent of node n1 on the replica at addr until the
// test ends.
func runAgent(t *testing.T, addr string, dp Programmer, cfg Config) *Agent {
	t.Helper()
	cfg.Servers, cfg.Node, cfg.NoHealth, cfg.Metrics = []string{addr}, "n1", true, prometheus.NewRegistry()
	a := New(cfg, dp, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// hostReplica serves log on the host's loopback: the agent's stream
// stays out of the test's namespace, its data plane in it.
func hostReplica(t *testing.T, log *changeLog) *replica {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startReplica(t, log, ln)
}

func runNft(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
		t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestAgentRepairsNftables: on the real kernel, with no periodic check,
// the changes others make to flowlb's nftables tables (Debian's nft, as
// an admin, firewalld or `systemctl reload nftables` make them) are
// repaired from their notifications: the node forwards through the VIP
// again within a second, a TCP connection held open through the VIP
// across the repair still works, and the repair is counted under its
// kind.
func TestAgentRepairsNftables(t *testing.T) {
	testutil.RequireRoot(t)
	log := newChangeLog("db-1")
	log.publish(repairTable())
	r := hostReplica(t, log)
	inNamespace(t, nil, func(ns netns.NsHandle) {
		serveRepairNode(t, true)
		dp, err := nftables.New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		a := runAgent(t, r.addr, dp, Config{VerifyInterval: -1})
		testutil.Eventually(t, 5*time.Second, "revision 1 acknowledged", func() (bool, string) { return slices.Contains(r.acked(), 1), fmt.Sprint(r.acked()) })
		testutil.Eventually(t, time.Second, "forwarding", forwards)
		want := map[string]float64{}
		// Not t.Run: a subtest's goroutine would leave the namespace's
		// thread.
		for _, tc := range []struct {
			name   string
			kind   string
			n      float64
			change func()
		}{
			{"table deleted", "table", 1, func() { runNft(t, "delete", "table", "ip", "flowlb") }},
			{"both tables deleted", "table", 2, func() { runNft(t, "delete", "table", "ip", "flowlb"); runNft(t, "delete", "table", "ip6", "flowlb") }},
			{"ruleset flushed", "table", 2, func() { runNft(t, "flush", "ruleset") }},
			{"an element deleted", "element", 1, func() {
				runNft(t, "delete", "element", "ip", "flowlb", "pick_random", "{ 198.19.0.10 . tcp . 80 }")
			}},
			{"a chain flushed", "chain", 1, func() { runNft(t, "flush", "chain", "ip", "flowlb", "lb") }},
		} {
			h := holdConn(t)
			tc.change()
			start := time.Now()
			if ok, _ := forwards(); ok && tc.kind != "element" {
				// (A deleted element is one service's of several
				// elements; the others forward until the repair.)
				t.Logf("%s: still forwarding right after the change (repaired already?)", tc.name)
			}
			testutil.Eventually(t, time.Second, tc.name+": forwarding again within 1 s", forwards)
			want[tc.kind] += tc.n
			testutil.Eventually(t, time.Second, tc.name+": the repair counted", func() (bool, string) {
				got := promtest.ToFloat64(a.m.repairs.WithLabelValues(tc.kind))
				return got == want[tc.kind], fmt.Sprintf("%s repairs %v, want %v", tc.kind, got, want[tc.kind])
			})
			t.Logf("%s: forwarding again %s after the change", tc.name, time.Since(start).Round(time.Millisecond))
			h.use(t)
		}
		if n := a.Sessions(); n != 1 {
			t.Errorf("%d sessions, want 1", n)
		}
		if err := a.Ready(); err != nil {
			t.Errorf("not ready after the repairs: %v", err)
		}
	})
}

// TestAgentKernelRefusesForeignTable: on the real kernel, another
// process takes flowlb's ip table (deletes it and makes one of the same
// name it owns): the kernel refuses the agent's repair and its next
// change. The session stays up, the change is not acknowledged, and the
// agent says why it is not ready; once the other process goes (and the
// kernel with it its table), the agent rebuilds the table, the change
// lands and is acknowledged, on the same session.
func TestAgentKernelRefusesForeignTable(t *testing.T) {
	testutil.RequireRoot(t)
	log := newChangeLog("db-1")
	log.publish(repairTable())
	r := hostReplica(t, log)
	inNamespace(t, nil, func(ns netns.NsHandle) {
		serveRepairNode(t, true)
		dp, err := nftables.New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		a := runAgent(t, r.addr, dp, Config{VerifyInterval: -1})
		testutil.Eventually(t, 5*time.Second, "revision 1 acknowledged", func() (bool, string) { return slices.Contains(r.acked(), 1), fmt.Sprint(r.acked()) })

		release := testutil.TakeNftablesTable(t, unix.NFPROTO_IPV4, "flowlb")
		testutil.Eventually(t, 2*time.Second, "the refusal seen", func() (bool, string) {
			st := a.KernelStatus()
			return st.Refusing && strings.Contains(st.LastRefusal, "operation not permitted"), fmt.Sprintf("%+v", st)
		})
		log.publish(wireLB("lb", flows.Service{Key: flows.Key{VIP: repairVIP, Protocol: flows.TCP, Port: 80}, LoadBalancerID: "lb",
			Algorithm: flows.RoundRobin, ConnectionLimit: -1, Backends: []flows.Backend{{Address: netip.MustParseAddr(repairBackends[1]), Port: 8080, Weight: 1}}}))
		testutil.Eventually(t, 5*time.Second, "revision 2 received and refused", func() (bool, string) {
			st := a.KernelStatus()
			return st.Received == 2 && st.Refusing && st.RefusedAttempts >= 3, fmt.Sprintf("%+v", st)
		})
		if slices.Contains(r.acked(), 2) {
			t.Fatalf("revision 2 acknowledged while the kernel refuses it: %v", r.acked())
		}
		if err := a.Ready(); err == nil || !strings.Contains(err.Error(), "refuses") {
			t.Errorf("Ready while refused: %v", err)
		}
		release() // the kernel deletes the table the other process owned
		testutil.Eventually(t, 10*time.Second, "revision 2 acknowledged once the kernel takes it", func() (bool, string) {
			return slices.Contains(r.acked(), 2), fmt.Sprintf("acks %v, %+v", r.acked(), a.KernelStatus())
		})
		if got := dialOnce(repairVIP.String() + ":80"); !strings.HasPrefix(got, repairBackends[1]+":8080") {
			t.Errorf("the VIP after revision 2: %q, want %s", got, repairBackends[1])
		}
		if n := a.Sessions(); n != 1 {
			t.Errorf("%d sessions, want 1", n)
		}
		if err := a.Ready(); err != nil {
			t.Errorf("not ready once the kernel took revision 2: %v", err)
		}
	})
}

// testCgroup makes a cgroup v2 directory for one test, moves this
// process into it (the socket programs serve its sockets) and out again
// at the end, and removes it.
func testCgroup(t *testing.T) string {
	t.Helper()
	root, err := ebpf.CgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "flowlb-agent-test-")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	orig := ""
	for _, l := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			orig = p
		}
	}
	moveTo := func(d string) error {
		return os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	t.Cleanup(func() {
		if err := moveTo(filepath.Join(root, orig)); err != nil {
			t.Errorf("leave the test cgroup: %v", err)
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the test cgroup: %v", err)
		}
	})
	if err := moveTo(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testBPFFS mounts a bpffs for one test's pins.
func testBPFFS(t *testing.T) string {
	t.Helper()
	fs := t.TempDir()
	if err := ebpf.MountBPFFS(fs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(fs, 0); err != nil {
			t.Errorf("unmount the test bpffs: %v", err)
		}
	})
	return fs
}

// TestAgentRepairsEBPF: on the real kernel, an entry of the eBPF
// services map another process deleted and a socket program it detached
// from the cgroup are repaired by the periodic check: a process of the
// cgroup reaches the VIP through the programs again within the interval,
// a TCP connection held open through the VIP across the repair still
// works, and the repair is counted under its kind.
func TestAgentRepairsEBPF(t *testing.T) {
	testutil.RequireRoot(t)
	log := newChangeLog("db-1")
	log.publish(repairTable())
	r := hostReplica(t, log)
	pins := filepath.Join(testBPFFS(t), "flowlb")
	cg := testCgroup(t)
	dp, err := ebpf.New(ebpf.Config{Node: "n1", Cgroup: cg, PinDir: pins})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Remove()
	const every = 200 * time.Millisecond
	a := runAgent(t, r.addr, dp, Config{VerifyInterval: every})
	testutil.Eventually(t, 5*time.Second, "revision 1 acknowledged", func() (bool, string) { return slices.Contains(r.acked(), 1), fmt.Sprint(r.acked()) })
	services, err := cebpf.LoadPinnedMap(filepath.Join(pins, "services"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer services.Close()
	inNamespace(t, nil, func(netns.NsHandle) {
		serveRepairNode(t, false) // no route to the VIP: only the programs reach it
		testutil.Eventually(t, time.Second, "forwarding through the programs", forwards)
		want := map[string]float64{}
		for _, tc := range []struct {
			name, kind string
			change     func()
		}{
			{"a map entry deleted", "ebpf_map", func() {
				var k [8]byte // VIP . port . protocol, as encoded
				copy(k[:4], repairVIP.AsSlice())
				binary.BigEndian.PutUint16(k[4:6], 80)
				k[6] = unix.IPPROTO_TCP
				if err := services.Delete(k); err != nil {
					t.Fatalf("delete the entry: %v", err)
				}
			}},
			{"the connect program detached", "ebpf_attach", func() {
				l, err := link.LoadPinnedLink(filepath.Join(pins, "link_connect4"), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				if err := l.Detach(); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			h := holdConn(t)
			tc.change()
			if ok, got := forwards(); ok {
				t.Fatalf("%s: still forwarding right after the change: %q", tc.name, got)
			}
			testutil.Eventually(t, 3*every, tc.name+": forwarding again within the interval", forwards)
			want[tc.kind]++
			testutil.Eventually(t, time.Second, tc.name+": the repair counted", func() (bool, string) {
				got := promtest.ToFloat64(a.m.repairs.WithLabelValues(tc.kind))
				return got == want[tc.kind], fmt.Sprintf("%v", got)
			})
			h.use(t)
		}
	})
	if n := a.Sessions(); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
}
