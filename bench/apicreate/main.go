// Command apicreate measures the LBaaS API: it creates N fully populated
// load balancers (1 listener, 1 pool, M members, 1 health monitor each)
// through the Octavia HTTP API of in-process flowlb servers and reports
// creates/s and the time until all are ACTIVE, per database engine and
// number of server replicas (each with the production wiring: change log,
// sequencer, fan-out; no agents connected),
// next to the figure of real Octavia measured on this kind of machine,
// and the CPU each load balancer cost, from the first create until all
// are ACTIVE: this process's (the servers, the clients and their polls)
// and the throwaway PostgreSQL cluster's.
//
//	go run ./bench/apicreate -n 1000 -sqlite -postgres auto -replicas 1,3
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowlb/flowlb/bench/internal/benchkit"
	flowlbserver "github.com/flowlb/flowlb/internal/server"
)

type result struct {
	engine       string
	servers      int
	n            int
	createWall   time.Duration
	activeWall   time.Duration
	p50, p99     time.Duration
	errors       int
	objectsPerLB int
	// cpu is this process's CPU from the first create until all are
	// ACTIVE; dbCPU the throwaway PostgreSQL cluster's (0: not known).
	cpu, dbCPU time.Duration
	// treesWritten and treesRead are the trees the fan-outs compiled
	// from the writes and from the store (treesCounted: the servers
	// count them).
	treesWritten, treesRead float64
	treesCounted            bool
}

func body(i, members int, subnet string) []byte {
	ms := make([]any, members)
	for j := range ms {
		ms[j] = map[string]any{"address": fmt.Sprintf("198.18.%d.%d", 16+j%200, 2+i%250), "protocol_port": 8000 + i%1000}
	}
	b, _ := json.Marshal(map[string]any{"loadbalancer": map[string]any{
		"name": fmt.Sprintf("bench-%d", i), "vip_subnet_id": subnet,
		"listeners": []any{map[string]any{"name": "l", "protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{"name": "p"}}},
		"pools": []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": ms,
			"healthmonitor": map[string]any{"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}}},
	}})
	return b
}

// server is an in-process flowlb server with the production wiring:
// the change log, its sequencer and the fan-out that completes changes.
type server struct {
	base   string
	url    string
	subnet string
	close  func()
}

func startServer(ctx context.Context, dsn, dir string, i int) (*server, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := flowlbserver.Start(ctx, flowlbserver.Options{
		Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Database: dsn, DataDir: dir, DefaultProject: "bench",
		// A /16 so that N VIPs always fit.
		VIPCIDR: "198.19.0.0/16", AckTimeout: 10 * time.Second, ReplicaID: fmt.Sprintf("bench-%d", i),
	}, log)
	if err != nil {
		return nil, err
	}
	closeIt := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}
	base := "http://" + s.APIAddr.String()
	subnet, err := vipSubnet(base)
	if err != nil {
		closeIt()
		return nil, err
	}
	return &server{base: base, url: base + "/v2/lbaas/loadbalancers", subnet: subnet, close: closeIt}, nil
}

// vipSubnet finds the default VIP subnet through the Neutron API.
func vipSubnet(base string) (string, error) {
	resp, err := http.Get(base + "/v2.0/networks?name=flowlb-vip")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var nets struct {
		Networks []struct {
			Subnets []string `json:"subnets"`
		} `json:"networks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&nets); err != nil {
		return "", err
	}
	if len(nets.Networks) != 1 || len(nets.Networks[0].Subnets) != 1 {
		return "", fmt.Errorf("default VIP network: %+v", nets)
	}
	return nets.Networks[0].Subnets[0], nil
}

// startReplicas starts n servers on one database, one after the other,
// as replicas of one deployment.
func startReplicas(ctx context.Context, dsn, dir string, n int) ([]*server, error) {
	var srvs []*server
	for i := range n {
		srv, err := startServer(ctx, dsn, dir, i)
		if err != nil {
			for _, s := range srvs {
				s.close()
			}
			return nil, err
		}
		srvs = append(srvs, srv)
	}
	return srvs, nil
}

// every, when set, paces the creates: create i is sent no sooner than
// i×every after the first, as Services come from the Kubernetes API one
// at a time rather than back to back.
var every time.Duration

// createAll posts every body from conc clients, client w to urls[w mod
// len(urls)], and returns each create's latency and the number of failures.
func createAll(client *http.Client, urls []string, bodies [][]byte, conc int) ([]time.Duration, int64) {
	lat := make([]time.Duration, len(bodies))
	var errs, next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		url := urls[w%len(urls)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				if every > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
				}
				t0 := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(bodies[i]))
				lat[i] = time.Since(t0)
				if err != nil {
					errs.Add(1)
					continue
				}
				if resp.StatusCode != http.StatusCreated {
					b, _ := io.ReadAll(resp.Body)
					fmt.Fprintf(os.Stderr, "create %d: %d %s\n", i, resp.StatusCode, b)
					errs.Add(1)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	return lat, errs.Load()
}

// treesFrom sums, over the servers' metrics, the trees their fan-outs
// compiled as a write handed them over and as read from the store
// (flowlb_fanout_trees_total); ok is false if no server counts them.
func treesFrom(client *http.Client, srvs []*server) (written, read float64, ok bool, err error) {
	for _, s := range srvs {
		resp, err := client.Get(s.base + "/metrics")
		if err != nil {
			return 0, 0, false, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, 0, false, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			for from, sum := range map[string]*float64{"write": &written, "store": &read} {
				if v, found := strings.CutPrefix(line, `flowlb_fanout_trees_total{from="`+from+`"} `); found {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						return 0, 0, false, fmt.Errorf("%s: %w", line, err)
					}
					*sum += f
					ok = true
				}
			}
		}
	}
	return written, read, ok, nil
}

// countActive counts the load balancers the API lists as ACTIVE, page
// by page (the API answers at most 1,000 per page, as Octavia does).
func countActive(client *http.Client, url string) (int, error) {
	active, marker := 0, ""
	for {
		page := url + "?fields=id&fields=provisioning_status&limit=1000"
		if marker != "" {
			page += "&marker=" + marker
		}
		resp, err := client.Get(page)
		if err != nil {
			return 0, err
		}
		var list struct {
			LBs []struct {
				ID                 string `json:"id"`
				ProvisioningStatus string `json:"provisioning_status"`
			} `json:"loadbalancers"`
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		for _, lb := range list.LBs {
			if lb.ProvisioningStatus == "ACTIVE" {
				active++
			}
		}
		if len(list.LBs) < 1000 {
			return active, nil
		}
		marker = list.LBs[len(list.LBs)-1].ID
	}
}

func run(ctx context.Context, engine, dsn string, n, members, conc, replicas int, dbCPU func() (time.Duration, bool)) (result, error) {
	dir, err := os.MkdirTemp("", "flowlb-bench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	srvs, err := startReplicas(ctx, dsn, dir, replicas)
	if err != nil {
		return result{}, err
	}
	defer func() {
		for _, s := range srvs {
			s.close()
		}
	}()
	urls := make([]string, len(srvs))
	for i, s := range srvs {
		urls[i] = s.url
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = body(i, members, srvs[0].subnet)
	}
	start, cpu0 := time.Now(), benchkit.ProcessCPU()
	db0, dbKnown := dbCPU()
	lat, errs := createAll(client, urls, bodies, conc)
	createWall := time.Since(start)
	// Polled every 100 ms (one list of the load balancers' statuses,
	// a few ms of the servers' time), so the figure is within 100 ms.
	want := int(int64(n) - errs)
	for {
		active, err := countActive(client, srvs[0].url)
		if err != nil {
			return result{}, err
		}
		if active == want {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return result{}, fmt.Errorf("only %d of %d LBs ACTIVE", active, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	activeWall, cpu := time.Since(start), benchkit.ProcessCPU()-cpu0
	var db time.Duration
	if db1, ok := dbCPU(); ok && dbKnown {
		db = db1 - db0
	}
	written, read, counted, err := treesFrom(client, srvs)
	if err != nil {
		return result{}, err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return result{treesWritten: written, treesRead: read, treesCounted: counted, engine: engine, servers: replicas, n: n, createWall: createWall, activeWall: activeWall, p50: lat[n/2], p99: lat[n*99/100], errors: int(errs),
		objectsPerLB: 4 + members, cpu: cpu, dbCPU: db}, nil
}

func main() {
	n := flag.Int("n", 1000, "load balancers to create")
	members := flag.Int("members", 10, "members per pool")
	conc := flag.Int("c", 8, "concurrent clients")
	flag.DurationVar(&every, "every", 0, "pace the creates: one every this long (0: back to back)")
	replicaList := flag.String("replicas", "1,3", "PostgreSQL runs: servers sharing the database, comma-separated (one fresh database each); the clients are spread over the servers")
	sqlite := flag.Bool("sqlite", true, "measure the embedded SQLite store")
	pg := flag.String("postgres", "", `PostgreSQL DSN to measure, or "auto" to start a throwaway cluster`)
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (servers and clients) to this file")
	flag.Parse()
	stopProfile, err := benchkit.CPUProfile(*cpuProfile)
	if err != nil {
		fatal(err)
	}
	defer stopProfile()
	ctx := context.Background()

	var results []result
	if *sqlite {
		dir, err := os.MkdirTemp("", "flowlb-bench-")
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(dir)
		r, err := run(ctx, "sqlite", filepath.Join(dir, "flowlb.db"), *n, *members, *conc, 1, func() (time.Duration, bool) { return 0, false })
		if err != nil {
			fatal(err)
		}
		results = append(results, r)
	}
	if *pg != "" {
		// A DSN given is measured as it is, every run on it; "auto" gives
		// every run a fresh database of a throwaway cluster.
		pgs, err := benchkit.OpenPostgres(*pg)
		if err != nil {
			fatal(err)
		}
		defer pgs.Stop()
		replicas, err := benchkit.Counts("replicas", "server count", *replicaList)
		if err != nil {
			fatal(err)
		}
		for _, k := range replicas {
			db, err := pgs.Database()
			if err != nil {
				fatal(err)
			}
			r, err := run(ctx, "postgres", db, *n, *members, *conc, k, pgs.CPUTime)
			if err != nil {
				fatal(err)
			}
			results = append(results, r)
		}
	}
	fmt.Printf("%d fully populated load balancers (1 listener, 1 pool, %d members, 1 health monitor), %d concurrent clients, %s\n",
		*n, *members, *conc, time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| engine | servers | creates/s | all created | all ACTIVE | create p50 | create p99 | errors | CPU / LB | PostgreSQL CPU / LB | trees from writes / store |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		db := ""
		if r.dbCPU > 0 {
			db = fmt.Sprintf("%.2f ms", benchkit.MS(r.dbCPU)/float64(r.n))
		}
		trees := ""
		if r.treesCounted {
			trees = fmt.Sprintf("%.0f / %.0f", r.treesWritten, r.treesRead)
		}
		fmt.Printf("| flowlb %s | %d | %.0f | %.2f s | %.2f s | %.1f ms | %.1f ms | %d | %.2f ms | %s | %s |\n", r.engine, r.servers, float64(r.n)/r.createWall.Seconds(),
			r.createWall.Seconds(), r.activeWall.Seconds(), benchkit.MS(r.p50), benchkit.MS(r.p99), r.errors, benchkit.MS(r.cpu)/float64(r.n), db, trees)
	}
	fmt.Println("| Octavia amphora+noop (anchor: 100 plain LBs) | 1 | ≈8 | 11–13 s | 71–73 s | | | | | | |")
	fmt.Println("CPU / LB: this process's (servers, clients, the 100 ms polls for ACTIVE) from the first create until all are ACTIVE, per load balancer")
	fmt.Println("trees: the load balancer trees the servers' fan-outs compiled from what a write on their replica handed over, and read back from the store")
	fmt.Println("targets: 1,000 full LBs ACTIVE in ≤ 3 s on SQLite, ≤ 5 s through 3 PostgreSQL replicas")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "apicreate:", err)
	os.Exit(1)
}
