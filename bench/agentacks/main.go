// Command agentacks measures how fast a change reaches the agents: it
// starts 1 and 3 in-process flowlb server replicas (the production
// wiring) on one PostgreSQL database, N simulated agents (real gRPC over
// the agent protocol with mutual TLS and enrollment, no kernel) spread
// over the replicas in a child process, and makes changes through the
// API one after the other: for each, the time from the API's answer
// (committed, PENDING) until every agent acknowledged a revision holding
// it, and until the load balancer reads ACTIVE; the servers' memory
// per connected agent; and the CPU each change cost the servers' process
// (the simulated agents run in another) and the PostgreSQL cluster, with
// and without the polls for ACTIVE.
//
// With -kill-replica, after that, one replica crashes (its listeners and
// connections cut at once, nothing retired: as a killed process) and a
// change is made through another: how soon each of its agents is
// subscribed again to a live replica, what the live replicas sent them
// to catch up (counted at the servers), and how soon every agent
// acknowledged the change.
//
//	go run ./bench/agentacks -n 1000 -changes 100 -replicas 1,3
//	go run ./bench/agentacks -n 5000 -changes 20 -replicas 3 -kill-replica
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/flowlb/flowlb/bench/internal/benchkit"
	flowlbserver "github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Change i adds member markerAddr(i): the agents tell the changes apart
// by it.
func markerAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(200 + i/250), byte(2 + i%250)})
}

func isMarker(a netip.Addr) bool {
	b := a.As4()
	return a.Is4() && b[0] == 198 && b[1] == 18 && b[2] >= 200
}

type result struct {
	replicas, agents, changes int
	acked, active             []time.Duration // per change
	rssPerAgent, heapPerAgent float64         // bytes
	// cpu is this process's CPU over the changes (servers and the API
	// client with its polls for ACTIVE); polls the number of those polls
	// and pollCPU what one costs, measured apart; dbCPU the PostgreSQL
	// cluster's over the changes (0: not known).
	cpu, pollCPU, dbCPU time.Duration
	polls               int
	// The agents' process once every agent is connected: resident set
	// and open files; and the servers' open files.
	childRSS            uint64
	childFDs, serverFDs int
	storm               *storm // nil: no replica killed
}

// storm is what followed the crash of one replica.
type storm struct {
	moved int // the agents it had
	// back is, for each of them, from the crash until a live replica
	// had it subscribed (polled every 5 to 50 ms).
	back []time.Duration
	// sent is what the live replicas sent the agents that subscribed
	// meanwhile; ended and failed the sessions that ended and the
	// attempts that got no stream (the agents' count).
	sent          fanout.CatchUps
	ended, failed int64
	why           map[string]int64
	// resumed and full are the sessions that got an update meanwhile,
	// by their TLS handshake.
	resumed, full int64
	// acked and active are the change made during the storm's: from the
	// API's answer until every agent acknowledged it, and until ACTIVE
	// (0: not within a minute).
	acked, active time.Duration
	// wasAt is how many agents were back when the API answered.
	wasAt int
	// Within stormLimit: the agents not back, and those that did not
	// acknowledge the change (acked is then 0).
	notBack, notAcked int
}

// stormLimit bounds the wait for the agents' return and for their acks
// of the change made meanwhile.
const stormLimit = 3 * time.Minute

// run measures one cluster of replicas servers on a fresh database.
func run(ctx context.Context, dsn string, replicas, agents, changes, lbs, monitored int, kill, fixedHandshake, noResume bool, dbCPU func() (time.Duration, bool)) (result, error) {
	res := result{replicas: replicas, agents: agents, changes: changes}
	dir, err := os.MkdirTemp("", "flowlb-agentacks-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var srvs []*flowlbserver.Server
	defer func() {
		for _, s := range srvs {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.Shutdown(sctx)
			cancel()
		}
	}()
	var addrs []string
	for i := range replicas {
		s, err := flowlbserver.Start(ctx, flowlbserver.Options{
			Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Database: dsn, DataDir: dir, DefaultProject: "bench",
			VIPCIDR: "198.19.0.0/16", AckTimeout: 30 * time.Second, ReplicaID: fmt.Sprintf("bench-%d", i),
		}, log)
		if err != nil {
			return res, err
		}
		srvs = append(srvs, s)
		addrs = append(addrs, s.AgentAddr.String())
	}
	api := &client{base: "http://" + srvs[0].APIAddr.String()}
	pools, lbIDs, err := api.createLBs(lbs, monitored)
	if err != nil {
		return res, err
	}

	rss0, heap0 := memory()
	child, err := startChild(childConfig{Servers: addrs, CAFile: filepath.Join(dir, "agent-ca.crt"), Token: readToken(dir), N: agents, FixedHandshake: fixedHandshake, NoResume: noResume})
	if err != nil {
		return res, err
	}
	defer child.stop()
	// Every replica knows of every agent, at the revision it holds.
	err = testutil.Wait(2*time.Minute, func() (bool, string) {
		for _, s := range srvs {
			all := s.Hub.ClusterAgents()
			if len(all) != agents {
				return false, fmt.Sprintf("%s knows %d agents", s.Replica, len(all))
			}
		}
		return true, ""
	})
	if err != nil {
		return res, err
	}
	rss1, heap1 := memory()
	res.rssPerAgent = float64(rss1-rss0) / float64(agents)
	res.heapPerAgent = float64(int64(heap1)-int64(heap0)) / float64(agents)
	res.childRSS, res.childFDs = procRSS(child.cmd.Process.Pid), openFiles(child.cmd.Process.Pid)
	res.serverFDs = openFiles(os.Getpid())

	// What one poll for ACTIVE costs, to tell the changes' CPU from the
	// polls'.
	const calibration = 200
	cpu0 := benchkit.ProcessCPU()
	for range calibration {
		if _, err := api.status(lbIDs[0]); err != nil {
			return res, err
		}
	}
	res.pollCPU = (benchkit.ProcessCPU() - cpu0) / calibration

	committed := make([]time.Time, changes)
	cpu0, polls0 := benchkit.ProcessCPU(), polls.Load()
	db0, dbKnown := dbCPU()
	for i := range changes {
		// The changes go to the replicas in turn.
		c := &client{base: "http://" + srvs[i%len(srvs)].APIAddr.String()}
		lb := i % lbs
		t0, err := c.addMember(pools[lb], markerAddr(i))
		if err != nil {
			return res, fmt.Errorf("change %d: %w", i, err)
		}
		committed[i] = t0
		at, err := c.waitActive(lbIDs[lb])
		if err != nil {
			return res, fmt.Errorf("change %d: %w", i, err)
		}
		res.active = append(res.active, at.Sub(t0))
	}
	res.cpu, res.polls = benchkit.ProcessCPU()-cpu0, int(polls.Load()-polls0)
	if db1, ok := dbCPU(); ok && dbKnown {
		res.dbCPU = db1 - db0
	}
	d, err := child.dump()
	if err != nil {
		return res, err
	}
	for i := range changes {
		s := d.Markers[markerAddr(i).String()]
		if s == nil || s.Agents != agents {
			return res, fmt.Errorf("change %d: acknowledged by %v of %d agents", i, s, agents)
		}
		res.acked = append(res.acked, time.Unix(0, s.LastNS).Sub(committed[i]))
	}
	if kill && len(srvs) > 1 {
		res.storm, err = crashOne(srvs, child, agents, pools[0], lbIDs[0], markerAddr(changes))
		if err != nil {
			return res, fmt.Errorf("storm: %w", err)
		}
	}
	return res, nil
}

// crashOne crashes the last replica, makes a change through the first
// (member marker added to pool) and measures the storm that follows:
// until every agent of the dead replica is subscribed to a live one and
// every agent acknowledged the change.
func crashOne(srvs []*flowlbserver.Server, child *child, agents int, pool, lbID string, marker netip.Addr) (*storm, error) {
	victim, live := srvs[len(srvs)-1], srvs[:len(srvs)-1]
	moved := victim.Hub.Agents()
	if len(moved) == 0 {
		return nil, fmt.Errorf("replica %s has no agents", victim.Replica)
	}
	st := &storm{moved: len(moved)}
	var before []fanout.CatchUps
	for _, s := range live {
		before = append(before, s.Hub.CatchUps())
	}
	d0, err := child.dump()
	if err != nil {
		return nil, err
	}
	// The change goes in while the agents move; the API's answer comes
	// back here while the polls below wait.
	api := &client{base: "http://" + live[0].APIAddr.String()}
	type answer struct {
		at, active time.Time
		err        error
	}
	answered := make(chan answer, 1)
	crashed := time.Now()
	victim.Crash()
	go func() {
		at, err := api.addMember(pool, marker)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		// Not ACTIVE within waitActive's minute: reported, not fatal.
		active, _ := api.waitActive(lbID)
		answered <- answer{at: at, active: active}
	}()
	backAt := map[string]time.Duration{}
	var ans *answer
	// Past stormLimit, what came back is reported, and what did not.
	_ = testutil.Wait(stormLimit, func() (bool, string) {
		now := time.Since(crashed)
		for _, s := range live {
			for n := range s.Hub.Agents() {
				if _, was := moved[n]; was {
					if _, seen := backAt[n]; !seen {
						backAt[n] = now
					}
				}
			}
		}
		if ans == nil {
			select {
			case a := <-answered:
				ans = &a
				st.wasAt = len(backAt)
			default:
			}
		}
		return len(backAt) == len(moved) && ans != nil, ""
	})
	st.notBack = len(moved) - len(backAt)
	if ans == nil {
		a := <-answered
		ans = &a
		st.wasAt = len(backAt)
	}
	if ans.err != nil {
		return nil, fmt.Errorf("the change during the storm: %w", ans.err)
	}
	for _, t := range backAt {
		st.back = append(st.back, t)
	}
	if !ans.active.IsZero() {
		st.active = ans.active.Sub(ans.at)
	}
	var d childDump
	var derr error
	_ = testutil.Wait(stormLimit, func() (bool, string) {
		if d, derr = child.dump(); derr != nil {
			return true, ""
		}
		s := d.Markers[marker.String()]
		return s != nil && s.Agents == agents, ""
	})
	if derr != nil {
		return nil, derr
	}
	if s := d.Markers[marker.String()]; s != nil && s.Agents == agents {
		st.acked = time.Unix(0, s.LastNS).Sub(ans.at)
	} else {
		st.notAcked = agents
		if s != nil {
			st.notAcked -= s.Agents
		}
	}
	st.ended, st.failed = d.Ended-d0.Ended, d.Failed-d0.Failed
	st.resumed, st.full = d.Resumed-d0.Resumed, d.Full-d0.Full
	st.why = d.Why
	for k, n := range d0.Why {
		if st.why[k] -= n; st.why[k] == 0 {
			delete(st.why, k)
		}
	}
	for i, s := range live {
		c := s.Hub.CatchUps()
		st.sent.UpToDate += c.UpToDate - before[i].UpToDate
		st.sent.Entries += c.Entries - before[i].Entries
		st.sent.LoadBalancers += c.LoadBalancers - before[i].LoadBalancers
		st.sent.Snapshots += c.Snapshots - before[i].Snapshots
		st.sent.Services += c.Services - before[i].Services
	}
	return st, nil
}

// memory is the process's resident set and live heap after a collection.
func memory() (rss uint64, heap uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procRSS(os.Getpid()), ms.HeapAlloc
}

// procRSS is a process's resident set (0: not known).
func procRSS(pid int) uint64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// openFiles counts a process's open file descriptors (0: not known).
func openFiles(pid int) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es)
}

func readToken(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "agent-token"))
	return strings.TrimSpace(string(b))
}

// child is the process of the simulated agents.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startChild(cfg childConfig) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(self, "-child", string(b))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	c.out.Buffer(nil, 64<<20)
	if !c.out.Scan() || c.out.Text() != "ready" {
		c.stop()
		return nil, fmt.Errorf("the agents' process did not get ready: %q %v", c.out.Text(), c.out.Err())
	}
	return c, nil
}

func (c *child) dump() (childDump, error) {
	var out childDump
	if _, err := io.WriteString(c.in, "dump\n"); err != nil {
		return out, err
	}
	if !c.out.Scan() {
		return out, fmt.Errorf("the agents' process: %v", c.out.Err())
	}
	return out, json.Unmarshal(c.out.Bytes(), &out)
}

func (c *child) stop() {
	c.in.Close()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// client speaks the Octavia API of one replica.
type client struct{ base string }

func (c *client) do(method, path string, body any, want int, out any) error {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// createLBs creates n load balancers (1 listener, 1 pool, 2 members;
// with monitored > 0, a TCP health monitor on each pool and monitored
// members spread over the pools), waits until they are ACTIVE and
// returns their pools and ids.
func (c *client) createLBs(n, monitored int) (pools, ids []string, err error) {
	var nets struct {
		Networks []struct {
			Subnets []string `json:"subnets"`
		} `json:"networks"`
	}
	if err := c.do("GET", "/v2.0/networks?name=flowlb-vip", nil, 200, &nets); err != nil {
		return nil, nil, err
	}
	if len(nets.Networks) != 1 || len(nets.Networks[0].Subnets) != 1 {
		return nil, nil, fmt.Errorf("default VIP network: %+v", nets)
	}
	for i := range n {
		members := []any{
			map[string]any{"address": fmt.Sprintf("198.18.1.%d", 2+i%250), "protocol_port": 8080},
			map[string]any{"address": fmt.Sprintf("198.18.2.%d", 2+i%250), "protocol_port": 8080},
		}
		pool := map[string]any{"name": "pool", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT"}
		if monitored > 0 {
			// This load balancer's share of the monitored members.
			members = nil
			for j := i; j < monitored; j += n {
				k := j / n
				members = append(members, map[string]any{"address": fmt.Sprintf("198.18.%d.%d", 3+k/250, 2+k%250), "protocol_port": 8080})
			}
			pool["healthmonitor"] = map[string]any{"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}
		}
		pool["members"] = members
		body := map[string]any{"loadbalancer": map[string]any{
			"name": fmt.Sprintf("bench-%d", i), "vip_subnet_id": nets.Networks[0].Subnets[0],
			"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": pool}},
		}}
		var out struct {
			LoadBalancer struct {
				ID    string `json:"id"`
				Pools []struct {
					ID string `json:"id"`
				} `json:"pools"`
			} `json:"loadbalancer"`
		}
		if err := c.do("POST", "/v2/lbaas/loadbalancers", body, http.StatusCreated, &out); err != nil {
			return nil, nil, err
		}
		ids = append(ids, out.LoadBalancer.ID)
		pools = append(pools, out.LoadBalancer.Pools[0].ID)
	}
	for _, id := range ids {
		if _, err := c.waitActive(id); err != nil {
			return nil, nil, err
		}
	}
	return pools, ids, nil
}

// addMember adds a member and returns when the API answered.
func (c *client) addMember(pool string, addr netip.Addr) (time.Time, error) {
	err := c.do("POST", "/v2/lbaas/pools/"+pool+"/members", map[string]any{"member": map[string]any{"address": addr.String(), "protocol_port": 8080}}, http.StatusCreated, nil)
	return time.Now(), err
}

// polls counts the polls for ACTIVE.
var polls atomic.Int64

// status reads a load balancer's provisioning status.
func (c *client) status(id string) (string, error) {
	var out struct {
		LoadBalancer struct {
			Status string `json:"provisioning_status"`
		} `json:"loadbalancer"`
	}
	polls.Add(1)
	err := c.do("GET", "/v2/lbaas/loadbalancers/"+id+"?fields=provisioning_status", nil, 200, &out)
	return out.LoadBalancer.Status, err
}

// waitActive polls a load balancer every 2 ms (a GET costs the servers
// well under that) and returns when it first read ACTIVE.
func (c *client) waitActive(id string) (time.Time, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := c.status(id)
		if err != nil {
			return time.Time{}, err
		}
		if st == "ACTIVE" {
			return time.Now(), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("load balancer %s not ACTIVE within a minute", id)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

func main() {
	childCfg := flag.String("child", "", "internal: run the simulated agents of this configuration")
	n := flag.Int("n", 1000, "simulated agents")
	changes := flag.Int("changes", 100, "changes to measure, one after the other")
	lbs := flag.Int("lbs", 10, "load balancers the changes go to in turn")
	replicaList := flag.String("replicas", "1,3", "server replicas sharing the database, one run each (a fresh database each)")
	pg := flag.String("postgres", "auto", `PostgreSQL DSN, or "auto" to start a throwaway cluster`)
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the servers' process to this file")
	kill := flag.Bool("kill-replica", false, "then crash one replica (of 2 or more) and measure the agents' move and a change made meanwhile")
	monitored := flag.Int("monitored", 0, "members with a TCP health monitor, spread over the load balancers (0: 2 unmonitored members each)")
	fixedHandshake := flag.Bool("fixed-handshake", false, "the simulated agents wait 500 ms for every handshake, as the agent did before its wait grew after handshakes that got no answer")
	noResume := flag.Bool("no-resume", false, "the simulated agents make a full TLS handshake every time, as agents did before the replicas resumed each other's sessions")
	flag.Parse()
	if *childCfg != "" {
		if err := runChild(*childCfg); err != nil {
			fatal(err)
		}
		return
	}
	stopProfile, err := benchkit.CPUProfile(*cpuProfile)
	if err != nil {
		fatal(err)
	}
	defer stopProfile()
	replicas, err := benchkit.Counts("replicas", "server count", *replicaList)
	if err != nil {
		fatal(err)
	}
	pgs, err := benchkit.OpenPostgres(*pg)
	if err != nil {
		fatal(err)
	}
	defer pgs.Stop()
	ctx := context.Background()
	var results []result
	for _, k := range replicas {
		dsn, err := pgs.Database()
		if err != nil {
			pgs.Stop()
			fatal(err)
		}
		r, err := run(ctx, dsn, k, *n, *changes, *lbs, *monitored, *kill, *fixedHandshake, *noResume, pgs.CPUTime)
		if err != nil {
			pgs.Stop() // fatal exits without running the deferred Stop
			fatal(err)
		}
		results = append(results, r)
	}
	fmt.Printf("%d simulated agents (mutual TLS, enrolled), %d changes one after the other (a member added), %d monitored members, PostgreSQL, %d CPUs, %s\n",
		*n, *changes, *monitored, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| replicas | agents | all acked p50 | all acked p99 | ACTIVE p50 | ACTIVE p99 | RSS / agent | heap / agent | CPU / change | less polls | PostgreSQL CPU / change |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		perChange := func(d time.Duration) float64 { return benchkit.MS(d) / float64(r.changes) }
		fmt.Printf("| %d | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.0f KiB | %.0f KiB | %.2f ms | %.2f ms | %.2f ms |\n", r.replicas, r.agents,
			benchkit.MS(quantile(r.acked, 0.5)), benchkit.MS(quantile(r.acked, 0.99)), benchkit.MS(quantile(r.active, 0.5)), benchkit.MS(quantile(r.active, 0.99)),
			r.rssPerAgent/1024, r.heapPerAgent/1024, perChange(r.cpu), perChange(r.cpu-time.Duration(r.polls)*r.pollCPU), perChange(r.dbCPU))
	}
	fmt.Println("| target | 5000 on 3 replicas, 2 cores | | ≤ 200 ms | | | | | | | |")
	fmt.Println("CPU / change: the servers' process over the changes (with the API client and its polls for ACTIVE, every 2 ms); less polls: without those, at the cost of one poll measured apart")
	fmt.Println()
	fmt.Println("| replicas | agents' process RSS | its open files | servers' open files |")
	fmt.Println("|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %d | %.0f MiB (%.0f KiB / agent) | %d | %d |\n", r.replicas, float64(r.childRSS)/(1<<20), float64(r.childRSS)/1024/float64(r.agents), r.childFDs, r.serverFDs)
	}
	var storms []result
	for _, r := range results {
		if r.storm != nil {
			storms = append(storms, r)
		}
	}
	if len(storms) == 0 {
		return
	}
	fmt.Println()
	hs := "500 ms, doubled after each that got no answer in time, up to 20 s (the agent's)"
	if *fixedHandshake {
		hs = "a fixed 500 ms (the agent's before its wait grew)"
	}
	if *noResume {
		hs += ", every one a full TLS handshake"
	}
	fmt.Printf("One replica crashed; a change made through another at once; the agents' handshakes: %s\n", hs)
	fmt.Println("| replicas | agents moved | back p50 | back p99 | back max | back within 10 s | not back in 3 min | sent nothing | sent entries (load balancers) | sent a snapshot | sessions ended / attempts failed | sessions resumed / full handshakes | back at the API's answer | change: all acked | change: ACTIVE |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range storms {
		st := r.storm
		within := 0
		for _, b := range st.back {
			if b <= 10*time.Second {
				within++
			}
		}
		// Quantiles over every agent moved: one not back counts as
		// past the limit.
		back := slices.Clone(st.back)
		for range st.notBack {
			back = append(back, stormLimit)
		}
		acked := fmt.Sprintf("%.1f ms", benchkit.MS(st.acked))
		if st.notAcked > 0 {
			acked = fmt.Sprintf("%d agents not within 3 min", st.notAcked)
		}
		active := fmt.Sprintf("%.1f ms", benchkit.MS(st.active))
		if st.active == 0 {
			active = "not within 1 min"
		}
		fmt.Printf("| %d | %d | %.1f ms | %.1f ms | %.1f ms | %d | %d | %d | %d (%d) | %d | %d / %d | %d / %d | %d | %s | %s |\n", r.replicas, st.moved,
			benchkit.MS(quantile(back, 0.5)), benchkit.MS(quantile(back, 0.99)), benchkit.MS(slices.Max(back)), within, st.notBack,
			st.sent.UpToDate, st.sent.Entries, st.sent.LoadBalancers, st.sent.Snapshots, st.ended, st.failed, st.resumed, st.full, st.wasAt, acked, active)
	}
	for _, r := range storms {
		for k, n := range r.storm.why {
			fmt.Printf("attempts failed (%d replicas): %d: %s\n", r.replicas, n, k)
		}
	}
	fmt.Println("back: from the crash until a live replica had the agent subscribed; sent: what the live replicas sent the agents that subscribed meanwhile, counted at the servers (Hub.CatchUps); target: back within 10 s, no snapshot to an agent up to date")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "agentacks:", err)
	os.Exit(1)
}
