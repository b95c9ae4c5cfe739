package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The highly available control plane's timing: a replica's lease (the
// server's default), how often survivors look for dead replicas' pending
// changes (a third of it), and the ack timeout the replicas run with.
const (
	haLease      = 3 * time.Second
	haResume     = haLease / 3
	haAckTimeout = 3 * time.Second
	// haSlack covers polling and a loaded machine on top of the bound.
	haSlack = time.Second
	// haMoveLimit is how soon an agent whose replica died must stream
	// from another.
	haMoveLimit = time.Second
)

// TestHighlyAvailableControlPlane runs three `flowlb server` replicas, one
// in each server host of the lab, on the lab's PostgreSQL, and an agent
// on each of three nodes given all three replicas. Long-lived TCP
// connections through a VIP exchange a line every 10 ms with pod members,
// new connections are opened through it every 50 ms, and four API clients
// create, update and delete load balancers and members without pause,
// each request to the next replica, going on with the next one when a
// replica is unreachable or answers 503. Meanwhile a replica is killed
// with SIGKILL three times at random moments (each time one that has
// agents), and restarted a few seconds later; then PostgreSQL is stopped
// (fast) for two seconds and started again. It shows that: the agents of
// a killed replica stream from a survivor within a second (measured from
// each agent's flowlb_agent_server_info); a restarted replica registers,
// follows the log and serves the API again; every write a replica
// answered 2xx for is in the API at the end and every acknowledged delete
// is gone, with no duplicate; no load balancer stays PENDING_* longer
// than lease + resume interval + ack timeout (plus the database's
// downtime when it overlaps); clients see Octavia's 503 while the
// database is down and nothing they were acknowledged is lost; every
// connection through the VIP survives and keeps exchanging data, and
// every new one succeeds, since the agents keep their flows whatever
// happens to the control plane; and every node's nftables flows match
// the API's state at the end.
func TestHighlyAvailableControlPlane(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 3, pods: 3, replicas: 3, serverArgs: []string{"--ack-timeout", haAckTimeout.String()}})
	h := newHARun(t, c)
	h.startTraffic()
	h.startWriters(4)
	for round := 1; round <= 3; round++ {
		h.pause(2*time.Second, 4*time.Second)
		h.killAndRestart(round)
	}
	h.pause(time.Second, 2*time.Second)
	h.restartDatabase(2 * time.Second)
	h.pause(4*time.Second, 5*time.Second)
	h.finish()
}

// haRun is one run of the test: the cluster, the clients, the traffic
// and the figures.
type haRun struct {
	t       *testing.T
	c       *cluster
	api     *replicaAPI
	clock   *pendingClock
	rng     *rand.Rand
	start   time.Time
	writers []*writer
	stop    chan struct{}
	wg      sync.WaitGroup
	convs   []*conversation
	// newOK, newFailed count new connections through the VIP.
	newOK, newFailed *atomic.Int64
	newLast          *atomic.Value
	newDone          <-chan struct{}
	killed           map[int]int
	moves, rejoins   []time.Duration
}

func newHARun(t *testing.T, c *cluster) *haRun {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return &haRun{t: t, c: c, api: newReplicaAPI(t, c.lab, c.replicas), rng: rand.New(rand.NewPCG(seed, 1)), start: time.Now(),
		clock: &pendingClock{bound: haLease + haResume + haAckTimeout + haSlack}, stop: make(chan struct{}), killed: map[int]int{}}
}

// pause lets the load run for a random time between lo and hi.
func (h *haRun) pause(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(h.rng.Int64N(int64(hi-lo))))
}

func (h *haRun) logf(format string, args ...any) {
	h.t.Logf("%6.2fs "+format, append([]any{time.Since(h.start).Seconds()}, args...)...)
}

// startTraffic creates the load balancer the traffic goes through (pods 1
// and 2 of every node; the writers never touch it), a long-lived
// connection to it from pod 3 of every node, and new connections from
// pod 3 of node 1.
func (h *haRun) startTraffic() {
	var members []lab.Host
	for i := 1; i <= 3; i++ {
		members = append(members, h.c.lab.Pod(i, 1), h.c.lab.Pod(i, 2))
	}
	lb, _, _ := h.c.createLB(h.c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", members)
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	for i := 1; i <= 3; i++ {
		h.convs = append(h.convs, startConversation(h.t, h.c.lab.Pod(i, 3), vip))
	}
	h.newOK, h.newFailed, h.newLast, h.newDone = newConnections(h.c.lab.Pod(1, 3), vip, h.stop)
	h.logf("traffic through %s: 3 long-lived connections, new connections every 50 ms", vip)
}

// startWriters starts n API clients on load balancers of their own.
func (h *haRun) startWriters(n int) {
	subnet := h.c.subnet("flowlb-vip-subnet")
	var addrs []string
	for i := 1; i <= 3; i++ {
		addrs = append(addrs, h.c.lab.Pod(i, 1).Addr.String(), h.c.lab.Pod(i, 2).Addr.String())
	}
	for i := range n {
		w := &writer{t: h.t, n: i + 1, api: h.api, clock: h.clock, subnet: subnet, addrs: addrs, rng: rand.New(rand.NewPCG(h.rng.Uint64(), uint64(i)))}
		h.writers = append(h.writers, w)
		h.wg.Go(func() { w.run(h.stop) })
	}
}

// agentsOn returns, by replica, the nodes whose agents stream from it now.
func (h *haRun) agentsOn() map[int][]lab.Host {
	out := map[int][]lab.Host{}
	for _, n := range h.c.lab.Nodes() {
		server, err := agentServer(context.Background(), n)
		if err != nil {
			h.t.Errorf("agent of %s: %v", n.Name, err)
		}
		for _, k := range h.c.replicas {
			if server == lab.ReplicaAgent(k).String() {
				out[k] = append(out[k], n)
			}
		}
	}
	return out
}

// victim picks a replica that has agents at random, one killed the least
// often so far.
func (h *haRun) victim() (int, []lab.Host) {
	on := h.agentsOn()
	var ks []int
	for _, k := range h.c.replicas {
		if len(on[k]) == 0 {
			continue
		}
		if len(ks) > 0 && h.killed[k] < h.killed[ks[0]] {
			ks = ks[:0]
		}
		if len(ks) == 0 || h.killed[k] == h.killed[ks[0]] {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		h.t.Fatalf("no agent streams from any replica: %v", on)
	}
	k := ks[h.rng.IntN(len(ks))]
	h.killed[k]++
	return k, on[k]
}

// killAndRestart kills a replica with SIGKILL, measures how soon its
// agents stream from survivors, lets it stay dead for a few seconds and
// restarts it.
func (h *haRun) killAndRestart(round int) {
	k, agents := h.victim()
	addr := lab.ReplicaAgent(k).String()
	moved := make([]time.Duration, len(agents))
	to := make([]string, len(agents))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, n := range agents {
		wg.Go(func() { moved[i], to[i] = h.waitMoved(n, addr, t0) })
	}
	if err := h.c.lab.Server(k).Kill(lab.ProcServer, syscall.SIGKILL); err != nil {
		h.t.Fatal(err)
	}
	wg.Wait()
	for i, n := range agents {
		h.logf("kill %d: s%d killed (-9); the agent of %s streams from %s after %s", round, k, n.Name, to[i], moved[i].Round(time.Millisecond))
		if moved[i] > haMoveLimit {
			h.t.Errorf("kill %d: the agent of %s took %s to leave s%d (limit %s)", round, n.Name, moved[i], k, haMoveLimit)
		}
	}
	h.moves = append(h.moves, moved...)
	h.pause(2*time.Second, 4*time.Second)
	restarted := time.Now()
	if _, err := h.c.lab.Server(k).Restart(lab.ProcServer); err != nil {
		h.t.Fatal(err)
	}
	h.checkRejoined(k, restarted)
	h.rejoins = append(h.rejoins, time.Since(restarted))
	h.logf("kill %d: s%d restarted, rejoined in %s", round, k, time.Since(restarted).Round(time.Millisecond))
}

// waitMoved polls the agent of node n every 5 ms until it streams from
// another replica than addr; it returns the time since t0 and where.
func (h *haRun) waitMoved(n lab.Host, addr string, t0 time.Time) (time.Duration, string) {
	limit := 10 * time.Second
	for time.Since(t0) < limit {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		server, err := agentServer(ctx, n)
		cancel()
		if err == nil && server != "" && server != addr {
			return time.Since(t0), server
		}
		time.Sleep(5 * time.Millisecond)
	}
	return limit, "nowhere"
}

// checkRejoined waits until restarted replica k serves the API, has
// renewed its lease since it restarted, sees every agent of the cluster
// and has followed the log as far as the others had when it restarted.
func (h *haRun) checkRejoined(k int, since time.Time) {
	if err := h.c.lab.WaitReplica(context.Background(), k, 20*time.Second); err != nil {
		h.t.Fatal(err)
	}
	head := h.headRevision(k)
	testutil.Eventually(h.t, 20*time.Second, fmt.Sprintf("s%d rejoined", k), func() (bool, string) {
		text, err := h.api.metrics(k)
		if err != nil {
			return false, err.Error()
		}
		renewed, _ := metricValue(text, "flowlb_replica_lease_renewed_timestamp_seconds")
		agents, _ := metricValue(text, "flowlb_fanout_cluster_agents")
		rev, _ := metricValue(text, "flowlb_fanout_revision")
		code, _, err := h.api.sendTo(lab.ReplicaAPI(k), "GET", "/v2/lbaas/loadbalancers", nil)
		ok := renewed >= float64(since.Unix()) && agents == 3 && rev >= head && err == nil && code == 200
		return ok, fmt.Sprintf("lease renewed at %.0f (restart %d), %v agents in the cluster, revision %v of %v, API %d %v",
			renewed, since.Unix(), agents, rev, head, code, err)
	})
}

// headRevision is the highest log revision another replica than k holds.
func (h *haRun) headRevision(k int) float64 {
	var head float64
	for _, o := range h.c.replicas {
		if o == k {
			continue
		}
		if text, err := h.api.metrics(o); err == nil {
			rev, _ := metricValue(text, "flowlb_fanout_revision")
			head = max(head, rev)
		}
	}
	return head
}

// restartDatabase stops PostgreSQL (fast) under load, keeps it down for
// down and starts it again.
func (h *haRun) restartDatabase(down time.Duration) {
	before := h.api.unavailable.Load()
	h.clock.outage(true)
	t0 := time.Now()
	if err := h.c.lab.StopPostgres(lab.PostgresFast); err != nil {
		h.t.Fatal(err)
	}
	h.logf("database stopped (fast) in %s", time.Since(t0).Round(time.Millisecond))
	time.Sleep(down)
	if _, err := h.c.lab.StartPostgres(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.clock.outage(false)
	h.logf("database up again after %s; %d answers 503 meanwhile", time.Since(t0).Round(time.Millisecond), h.api.unavailable.Load()-before)
	if h.api.unavailable.Load() == before {
		h.t.Errorf("no client saw a 503 while the database was down")
	}
}

// finish stops the writers (each ends its change first) and the traffic,
// and checks the end state.
func (h *haRun) finish() {
	close(h.stop)
	h.wg.Wait()
	<-h.newDone
	h.logf("writers stopped")
	known := map[string]bool{}
	acked, adopted := 0, 0
	for _, w := range h.writers {
		w.verify()
		for _, id := range w.known() {
			known[id] = true
		}
		acked, adopted = acked+w.acked, adopted+w.adopted
	}
	h.checkNothingElse(known)
	h.checkFlows()
	for _, c := range h.convs {
		c.check(h.t, 2*time.Second)
	}
	if n := h.newFailed.Load(); n > 0 {
		h.t.Errorf("%d of %d new connections through the VIP failed (%v)", n, n+h.newOK.Load(), h.newLast.Load())
	}
	h.report(acked, adopted)
	h.logFigures()
}

// checkNothingElse: the API holds the traffic's load balancer and the
// writers' (no duplicate of a retried create), none of them PENDING_*.
func (h *haRun) checkNothingElse(known map[string]bool) {
	code, out, err := h.api.read("/v2/lbaas/loadbalancers", 30*time.Second)
	if err != nil || code != 200 {
		h.t.Fatalf("list load balancers: %d %v", code, err)
	}
	for _, lb := range out["loadbalancers"].([]any) {
		lb := lb.(map[string]any)
		if s := lb["provisioning_status"]; s != "ACTIVE" {
			h.t.Errorf("load balancer %s is %s at the end", lb["name"], s)
		}
		if lb["name"] != "e2e" && !known[lb["id"].(string)] {
			h.t.Errorf("load balancer %s (%s) is no writer's", lb["name"], lb["id"])
		}
	}
}

// checkFlows: every node's kernel holds the API's state: its nftables
// table, and on eBPF its pinned services maps too (the test's services
// are all the programs' to carry).
func (h *haRun) checkFlows() {
	want, err := apiFlows(h.api)
	if err != nil {
		h.t.Fatal(err)
	}
	ebpfToo := h.c.lab.Dataplane() == lab.DataplaneEBPF
	for i, n := range h.c.lab.Nodes() {
		testutil.Eventually(h.t, 10*time.Second, n.Name+"'s flows match the API", func() (bool, string) {
			have, err := kernelFlows(n)
			if err != nil {
				return false, err.Error()
			}
			if d := flowDiff(want, have); d != "" || !ebpfToo {
				return d == "", "nftables: " + d
			}
			if have, err = bpfFlows(h.c.lab.BPFPinDir(i + 1)); err != nil {
				return false, err.Error()
			}
			d := flowDiff(want, have)
			return d == "", "pinned maps: " + d
		})
	}
	h.logf("the flows of every node match the API: %d services", len(want))
}

func (h *haRun) report(acked, adopted int) {
	moves := slices.Clone(h.moves)
	slices.Sort(moves)
	h.logf("agents moved to a survivor in %v (max %s, limit %s)", roundAll(moves), moves[len(moves)-1].Round(time.Millisecond), haMoveLimit)
	h.logf("restarted replicas rejoined in %v", roundAll(h.rejoins))
	h.logf("writes: %d answered 2xx, %d found done after a lost answer; load balancers settled %d times", acked, adopted, h.clock.count)
	h.logf("longest PENDING: %s (%s) with the database up, %s (%s) across its outage; bound %s (+ the outage)",
		h.clock.longest.Round(time.Millisecond), h.clock.what, h.clock.across.Round(time.Millisecond), h.clock.acrossWhat, h.clock.bound)
	h.logf("answers: %d 503 (database unavailable), %d connections refused (killed replicas), %d connections lost mid-request",
		h.api.unavailable.Load(), h.api.refused.Load(), h.api.broken.Load())
	h.logf("new connections through the VIP: %d, %d failed", h.newOK.Load()+h.newFailed.Load(), h.newFailed.Load())
	if n := h.api.badFaults.Load() + h.api.serverErrors.Load(); n > 0 {
		h.t.Errorf("%d answers 5xx other than Octavia's 503 for the database (%v)", n, h.api.lastBad.Load())
	}
}

// logFigures reports, from the replicas' logs, the pending changes taken
// over from replicas that were gone, the completions that failed for good
// and the changes completed without every agent's ack, and how many
// agents each restarted replica served in its last life.
func (h *haRun) logFigures() {
	for _, k := range h.c.replicas {
		b, err := os.ReadFile(h.c.lab.LogPath(lab.ServerName(k), lab.ProcServer))
		if err != nil {
			h.t.Error(err)
			continue
		}
		lines := strings.Split(string(b), "\n")
		taken, failed, timeouts, lastLife := 0, 0, 0, 0
		for i, line := range lines {
			switch {
			case strings.Contains(line, `msg="took over pending changes`):
				var n int
				if _, v, ok := strings.Cut(line, " changes="); ok {
					fmt.Sscan(v, &n)
				}
				taken += n
			case strings.Contains(line, `msg="complete provisioning"`):
				failed++
			case strings.Contains(line, `msg="agents did not acknowledge in time"`):
				timeouts++
			case strings.Contains(line, `msg="flowlb server listening"`):
				lastLife = i
			}
		}
		agents := 0
		for _, line := range lines[lastLife:] {
			if strings.Contains(line, `msg="agent connected"`) {
				agents++
			}
		}
		h.logf("s%d (killed %d times): took over %d pending changes, %d completions failed for good, %d ack timeouts; %d agent streams in its last life",
			k, h.killed[k], taken, failed, timeouts, agents)
	}
}
