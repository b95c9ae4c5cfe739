package nftables

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// held is a TCP connection through a VIP, kept open across a repair.
type held struct {
	c net.Conn
	r *bufio.Reader
}

func hold(t *testing.T, addr string) *held {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	h := &held{c: c, r: bufio.NewReader(c)}
	h.use(t, "hello")
	return h
}

// use sends a line and reads it back: the connection still works.
func (h *held) use(t *testing.T, line string) {
	t.Helper()
	_ = h.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(h.c, line+"\n"); err != nil {
		t.Fatalf("held connection %s: write: %v", h.c.RemoteAddr(), err)
	}
	got, err := h.r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("held connection %s: read %q, %v", h.c.RemoteAddr(), got, err)
	}
}

func nft(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
		t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestVerifyRepairsForeignChanges: on the real kernel, changes another
// process makes to flowlb's tables (nft, as an admin, firewalld or
// `systemctl reload nftables` make them) are notified within a second,
// the check that follows repairs them, the VIPs of both families answer
// again and the connections held open through them across the repair
// still work. Changes the data plane makes itself are not notified.
func TestVerifyRepairsForeignChanges(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		setup6(t)
		defer serveAll(t)()
		defer serveAll6(t)()
		for _, a := range []string{"198.18.17.2:9090", "[2001:2:0:17::2]:9090"} {
			ln := echo(t, a)
			t.Cleanup(func() { ln.Close() })
		}
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if err := dp.Watching(); err != nil {
			t.Fatalf("no notifications: %v", err)
		}
		ctx := context.Background()
		tab := svc(flows.RoundRobin, backendAddrs...)
		for k, s := range svc6(flows.RoundRobin, backends6...).Services {
			tab.Services[k] = s
		}
		echoSvc := func(vip, backend string) flows.Service {
			s := service(vip, flows.TCP, 90, flows.RoundRobin, flows.Backend{Weight: 1, Port: 9090})
			s.Backends[0].Address = netip.MustParseAddr(backend)
			return s
		}
		for _, s := range []flows.Service{echoSvc("198.19.0.10", "198.18.17.2"), echoSvc(vip6, "2001:2:0:17::2")} {
			tab.Services[s.Key] = s
		}
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		if _, err := dp.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		answers := func() bool {
			return !strings.HasPrefix(ask(t, "198.19.0.10:80", ""), "error") && !strings.HasPrefix(ask6(vip6Port, ""), "error")
		}
		if !answers() {
			t.Fatal("the VIPs do not answer before any change")
		}
		drifted := func(within time.Duration) bool {
			select {
			case <-dp.Drift():
				return true
			case <-time.After(within):
				return false
			}
		}

		// The data plane's own change is not heard: its notifications are
		// filtered out before a foreign change's arrive.
		more := svc(flows.SourceIP, backendAddrs[:2]...)
		for k, s := range tab.Services {
			if _, ok := more.Services[k]; !ok {
				more.Services[k] = s
			}
		}
		if err := dp.Sync(ctx, more); err != nil {
			t.Fatal(err)
		}
		nft(t, "add", "set", "ip", "flowlb", "foreign", "{ type ipv4_addr; }")
		if !drifted(time.Second) {
			t.Fatal("no notification within 1 s of a set added by another process")
		}
		dp.mu.Lock()
		sus, _, losses, stopped := dp.mon.take()
		dp.mon.putBack(sus, time.Now())
		dp.mu.Unlock()
		got := sus[byte(nftables.TableFamilyIPv4)]
		if stopped != nil || losses != 0 || got == nil || !got.sets["foreign"] || len(got.sets) != 1 || len(got.elems) != 0 || len(got.added) != 0 || sus[byte(nftables.TableFamilyIPv6)] != nil {
			t.Fatalf("pending after a change of flowlb's own and another's set: %+v (%d lost, %v)", got, losses, stopped)
		}
		if check, err := dp.Verify(ctx); err != nil || !reflect.DeepEqual(check.Repaired, map[string]int{dataplane.Set: 1}) || check.Scope != scopeStructure {
			t.Fatalf("check after another's set: %+v, %v", check, err)
		}

		for _, tc := range []struct {
			name   string
			change func()
			want   map[string]int
			full   bool // check as if notifications had been lost
		}{
			// A counter element is the packet path's, which makes it
			// again: not written back.
			{"full: slot and counter elements deleted", func() {
				nft(t, "delete", "element", "ip", "flowlb", "slots", "{ 198.19.0.10 . tcp . 80 . 7 }") // slot 7
				nft(t, "delete", "element", "ip", "flowlb", "stats_in", "{ 198.19.0.10 . tcp . 80 }")
			}, map[string]int{dataplane.Element: 1}, true},
			{"counter set deleted", func() {
				// (The kernel deletes no set a rule refers to.)
				nft(t, "flush", "chain", "ip", "flowlb", "acl")
				nft(t, "flush", "chain", "ip", "flowlb", "acl_out")
				nft(t, "delete", "set", "ip", "flowlb", "stats_in")
			}, map[string]int{dataplane.Set: 1, dataplane.Chain: 2}, false},
			{"full: slots flushed", func() { nft(t, "flush", "map", "ip", "flowlb", "slots") }, map[string]int{dataplane.Set: 1}, true},
			{"table deleted", func() { nft(t, "delete", "table", "ip", "flowlb") }, map[string]int{dataplane.Table: 1}, false},
			{"both tables deleted", func() { nft(t, "delete", "table", "ip", "flowlb"); nft(t, "delete", "table", "ip6", "flowlb") }, map[string]int{dataplane.Table: 2}, false},
			{"ruleset flushed", func() { nft(t, "flush", "ruleset") }, map[string]int{dataplane.Table: 2}, false},
			{"element deleted", func() {
				nft(t, "delete", "element", "ip", "flowlb", "pick_src", "{ 198.19.0.10 . tcp . 80 }")
			}, map[string]int{dataplane.Element: 1}, false},
			{"slots flushed", func() { nft(t, "flush", "map", "ip", "flowlb", "slots") }, map[string]int{dataplane.Element: 122}, false},
			{"chain flushed", func() { nft(t, "flush", "chain", "ip6", "flowlb", "lb") }, map[string]int{dataplane.Chain: 1}, false},
			{"chain deleted", func() { nft(t, "delete", "chain", "ip", "flowlb", "output") }, map[string]int{dataplane.Chain: 1}, false},
			{"rule added", func() { nft(t, "insert", "rule", "ip", "flowlb", "lb", "drop") }, map[string]int{dataplane.Chain: 1}, false},
		} {
			// Not t.Run: a subtest's goroutine would leave the
			// namespace's thread.
			conns := []*held{hold(t, "198.19.0.10:90"), hold(t, net.JoinHostPort(vip6, "90"))}
			tc.change()
			if !drifted(time.Second) {
				t.Fatalf("%s: no notification within 1 s", tc.name)
			}
			if tc.full {
				dp.mu.Lock()
				dp.needFull = true
				dp.mu.Unlock()
			}
			check, err := dp.Verify(ctx)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if tc.full != (check.Scope == scopeFull) {
				t.Errorf("%s: checked %s", tc.name, check.Scope)
			}
			if !reflect.DeepEqual(check.Repaired, tc.want) {
				t.Errorf("%s: repaired %v (%v), want %v", tc.name, check.Repaired, check.What, tc.want)
			}
			if !answers() {
				t.Errorf("%s: the VIPs do not answer after the repair", tc.name)
			}
			for _, h := range conns {
				h.use(t, "again")
				h.c.Close()
			}
			testutil.Eventually(t, 5*time.Second, tc.name+": a check that finds nothing", func() (bool, string) {
				check, err := dp.Verify(ctx)
				return err == nil && check.Repairs() == 0, check.Scope
			})
		}
	})
}

// TestRefusedTransactionLeavesTheSocketClean: after the kernel refuses a
// transaction with EPERM (flowlb's table taken by another process that
// owns it), the data plane's next requests get their own answers, not
// the refused batch's: once the other process is gone, a check rebuilds
// the table and a change applies. (The library stops reading a batch's
// answers at its first EPERM; they answered the next requests, each of
// which then failed with the old error.)
func TestRefusedTransactionLeavesTheSocketClean(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		ctx := context.Background()
		tab := svc(flows.RoundRobin, backendAddrs...)
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		release := testutil.TakeNftablesTable(t, unix.NFPROTO_IPV4, tableName)
		if err := dp.Sync(ctx, svc(flows.RoundRobin, backendAddrs[:2]...)); err == nil {
			t.Fatal("a change to a table another owns was not refused")
		}
		if _, err := dp.conn.ListTableOfFamily(tableName, nftables.TableFamilyIPv6); err != nil {
			t.Fatalf("reading the other table after the refusal: %v", err)
		}
		release()
		check, err := dp.Verify(ctx)
		if err != nil || check.Repaired[dataplane.Table] != 1 {
			t.Fatalf("check once the other process is gone: %+v, %v", check, err)
		}
		if err := dp.Sync(ctx, svc(flows.RoundRobin, backendAddrs[:2]...)); err != nil {
			t.Fatalf("change after the rebuild: %v", err)
		}
	})
}
