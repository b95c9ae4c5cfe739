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
//	go run ./bench/agentacks -n 1000 -changes 100 -replicas 1,3
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
}

// run measures one cluster of replicas servers on a fresh database.
func run(ctx context.Context, dsn string, replicas, agents, changes, lbs int, dbCPU func() (time.Duration, bool)) (result, error) {
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
	pools, lbIDs, err := api.createLBs(lbs)
	if err != nil {
		return res, err
	}

	rss0, heap0 := memory()
	child, err := startChild(childConfig{Servers: addrs, CAFile: filepath.Join(dir, "agent-ca.crt"), Token: readToken(dir), N: agents})
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
	seen, err := child.dump()
	if err != nil {
		return res, err
	}
	for i := range changes {
		s := seen[markerAddr(i).String()]
		if s == nil || s.Agents != agents {
			return res, fmt.Errorf("change %d: acknowledged by %v of %d agents", i, s, agents)
		}
		res.acked = append(res.acked, time.Unix(0, s.LastNS).Sub(committed[i]))
	}
	return res, nil
}

// memory is the process's resident set and live heap after a collection.
func memory() (rss uint64, heap uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			rss = kb * 1024
		}
	}
	return rss, ms.HeapAlloc
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

func (c *child) dump() (map[string]*markerSeen, error) {
	if _, err := io.WriteString(c.in, "dump\n"); err != nil {
		return nil, err
	}
	if !c.out.Scan() {
		return nil, fmt.Errorf("the agents' process: %v", c.out.Err())
	}
	var out map[string]*markerSeen
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

// createLBs creates n load balancers (1 listener, 1 pool, 2 members),
// waits until they are ACTIVE and returns their pools and ids.
func (c *client) createLBs(n int) (pools, ids []string, err error) {
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
		body := map[string]any{"loadbalancer": map[string]any{
			"name": fmt.Sprintf("bench-%d", i), "vip_subnet_id": nets.Networks[0].Subnets[0],
			"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80,
				"default_pool": map[string]any{"name": "pool", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": []any{
					map[string]any{"address": fmt.Sprintf("198.18.1.%d", 2+i%250), "protocol_port": 8080},
					map[string]any{"address": fmt.Sprintf("198.18.2.%d", 2+i%250), "protocol_port": 8080},
				}}}},
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
		r, err := run(ctx, dsn, k, *n, *changes, *lbs, pgs.CPUTime)
		if err != nil {
			pgs.Stop() // fatal exits without running the deferred Stop
			fatal(err)
		}
		results = append(results, r)
	}
	fmt.Printf("%d simulated agents (mutual TLS, enrolled), %d changes one after the other (a member added), PostgreSQL, %d CPUs, %s\n",
		*n, *changes, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| replicas | agents | all acked p50 | all acked p99 | ACTIVE p50 | ACTIVE p99 | RSS / agent | heap / agent | CPU / change | less polls | PostgreSQL CPU / change |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		perChange := func(d time.Duration) float64 { return benchkit.MS(d) / float64(r.changes) }
		fmt.Printf("| %d | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.0f KiB | %.0f KiB | %.2f ms | %.2f ms | %.2f ms |\n", r.replicas, r.agents,
			benchkit.MS(quantile(r.acked, 0.5)), benchkit.MS(quantile(r.acked, 0.99)), benchkit.MS(quantile(r.active, 0.5)), benchkit.MS(quantile(r.active, 0.99)),
			r.rssPerAgent/1024, r.heapPerAgent/1024, perChange(r.cpu), perChange(r.cpu-time.Duration(r.polls)*r.pollCPU), perChange(r.dbCPU))
	}
	fmt.Println("| target | 1000 on 3 replicas, 2 cores | | ≤ 200 ms | | | | | | | |")
	fmt.Println("CPU / change: the servers' process over the changes (with the API client and its polls for ACTIVE, every 2 ms); less polls: without those, at the cost of one poll measured apart")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "agentacks:", err)
	os.Exit(1)
}
