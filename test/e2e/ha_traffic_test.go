package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/node/dataplane/ebpf"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
)

// conversation is one long-lived TCP connection through a VIP that
// exchanges a line with its member every 10 ms until stopped or broken.
type conversation struct {
	from      string
	pod       string // the member that answers
	conn      net.Conn
	rd        *bufio.Reader
	exchanges atomic.Int64
	// maxGap is the longest time between two answered lines, in ns.
	maxGap  atomic.Int64
	err     atomic.Value // what broke it
	stop    chan struct{}
	done    chan struct{}
	started time.Time
}

func startConversation(t *testing.T, from lab.Host, vip string) *conversation {
	t.Helper()
	conn, err := from.Dial(context.Background(), "tcp", vip)
	if err != nil {
		t.Fatal(err)
	}
	c := &conversation{from: from.Name, conn: conn, rd: bufio.NewReader(conn), stop: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	r, err := c.say()
	if err != nil {
		t.Fatalf("%s -> %s: %v", from.Name, vip, err)
	}
	c.pod = r.Pod
	go c.run()
	t.Cleanup(c.close)
	return c
}

func (c *conversation) run() {
	defer close(c.done)
	last := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		r, err := c.say()
		if err == nil && r.Pod != c.pod {
			err = fmt.Errorf("answered by %s, not %s", r.Pod, c.pod)
		}
		if err != nil {
			c.err.Store(err.Error())
			return
		}
		now := time.Now()
		if gap := now.Sub(last); gap > time.Duration(c.maxGap.Load()) {
			c.maxGap.Store(int64(gap))
		}
		last = now
		c.exchanges.Add(1)
	}
}

func (c *conversation) say() (echo.Reply, error) {
	_ = c.conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.conn.Write([]byte("hello\n")); err != nil {
		return echo.Reply{}, err
	}
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return echo.Reply{}, err
	}
	return echo.Parse(strings.TrimSpace(line))
}

func (c *conversation) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
		<-c.done
		c.conn.Close()
	}
}

// check fails t unless the conversation ran without a break, with no
// silence longer than maxGap, to its end.
func (c *conversation) check(t *testing.T, maxGap time.Duration) {
	t.Helper()
	c.close()
	gap := time.Duration(c.maxGap.Load())
	t.Logf("connection %s -> %s: %d exchanges in %s, longest silence %s", c.from, c.pod, c.exchanges.Load(),
		time.Since(c.started).Round(time.Second), gap.Round(time.Millisecond))
	if e := c.err.Load(); e != nil {
		t.Errorf("connection %s -> %s broke after %d exchanges: %v", c.from, c.pod, c.exchanges.Load(), e)
	}
	if gap > maxGap {
		t.Errorf("connection %s -> %s was silent for %s (more than %s)", c.from, c.pod, gap, maxGap)
	}
}

// newConnections opens a new connection through the VIP every 50 ms
// until stop is closed, counting those that failed.
func newConnections(from lab.Host, vip string, stop <-chan struct{}) (ok, failed *atomic.Int64, last *atomic.Value, done <-chan struct{}) {
	ok, failed, last = new(atomic.Int64), new(atomic.Int64), new(atomic.Value)
	d := make(chan struct{})
	go func() {
		defer close(d)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := from.Ask(context.Background(), vip, 2*time.Second); err != nil {
				failed.Add(1)
				last.Store(err.Error())
			} else {
				ok.Add(1)
			}
		}
	}()
	return ok, failed, last, d
}

// apiFlows is what the API's load balancers make every node hold: for
// each VIP:port/TCP, the members of weight above 0 not being deleted (as
// address:port).
func apiFlows(api *replicaAPI) (map[string][]string, error) {
	code, out, err := api.read("/v2/lbaas/loadbalancers", 30*time.Second)
	if err != nil || code != 200 {
		return nil, fmt.Errorf("list load balancers: %d %v", code, err)
	}
	want := map[string][]string{}
	for _, lb := range out["loadbalancers"].([]any) {
		lb := lb.(map[string]any)
		key := netip.AddrPortFrom(netip.MustParseAddr(lb["vip_address"].(string)), 80).String() + "/TCP"
		backends := []string{}
		for _, p := range lb["pools"].([]any) {
			code, ms, err := api.read("/v2/lbaas/pools/"+p.(map[string]any)["id"].(string)+"/members", 30*time.Second)
			if err != nil || code != 200 {
				return nil, fmt.Errorf("members of %s: %d %v", lb["name"], code, err)
			}
			for _, m := range ms["members"].([]any) {
				m := m.(map[string]any)
				// The compiler leaves out members being deleted.
				if m["weight"].(float64) > 0 && m["provisioning_status"] != "PENDING_DELETE" {
					backends = append(backends, fmt.Sprintf("%s:%v", m["address"], m["protocol_port"]))
				}
			}
		}
		slices.Sort(backends)
		want[key] = backends
	}
	return want, nil
}

// kernelFlows is what node n's flowlb table holds: for each service, the
// backends that have slots.
func kernelFlows(n lab.Host) (map[string][]string, error) {
	f, err := os.Open(lab.NSPath(n.NS))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dp, err := nftables.Open(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("flowlb table of %s: %w", n.Name, err)
	}
	defer dp.Close()
	have := map[string][]string{}
	for _, s := range dp.Dump() {
		have[s.Key.String()] = slices.Sorted(maps.Keys(s.Slots))
	}
	return have, nil
}

// bpfFlows is what the services maps pinned in pinDir hold: for each
// service, the backends that have slots (none for a refusal).
func bpfFlows(pinDir string) (map[string][]string, error) {
	ss, err := ebpf.Dump(pinDir)
	if err != nil {
		return nil, err
	}
	have := map[string][]string{}
	for _, s := range ss {
		var bs []string
		for b := range s.Backends {
			bs = append(bs, b.String())
		}
		slices.Sort(bs)
		have[s.Key.String()] = bs
	}
	return have, nil
}

// flowDiff describes how have differs from want, "" if it does not.
func flowDiff(want, have map[string][]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if h, ok := have[k]; !ok {
			out = append(out, fmt.Sprintf("%s missing (want %v)", k, want[k]))
		} else if !slices.Equal(h, want[k]) {
			out = append(out, fmt.Sprintf("%s has %v, want %v", k, h, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s programmed but not in the API", k))
		}
	}
	return strings.Join(out, "; ")
}
