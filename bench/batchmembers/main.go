// Command batchmembers measures batch member updates (PUT
// /v2/lbaas/pools/{id}/members) through the Octavia HTTP API of an
// in-process flowlb server with the production wiring: for each size, a
// fresh load balancer's pool gets that many members in one request, while
// a writer updates another load balancer in a loop. It prints the
// batch's response time and CPU time (the process's and, on a PostgreSQL
// cluster it started, the database's), the time until the load balancer
// is ACTIVE again and the CPU time (both) until then, and the other
// writer's update latencies during the batch.
//
//	go run ./bench/batchmembers -sizes 1000,5000,20000 -sqlite -postgres auto
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
	"slices"
	"sync"
	"time"

	"github.com/flowlb/flowlb/bench/internal/benchkit"
	flowlbserver "github.com/flowlb/flowlb/internal/server"
)

type result struct {
	engine   string
	members  int
	batch    time.Duration // the PUT's response time
	cpu      time.Duration // the process's CPU time meanwhile (server, client, other writer)
	dbCPU    time.Duration // the PostgreSQL cluster's CPU time meanwhile, when it is ours
	hasDB    bool
	cpuAll   time.Duration // process and database CPU time until ACTIVE again
	active   time.Duration // until the load balancer is ACTIVE again
	writes   int           // the other writer's updates answered during the batch
	p50, p99 time.Duration // their latencies
	max      time.Duration
}

type api struct {
	base   string
	client *http.Client
}

func (a api) do(method, path string, body any) (map[string]any, int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return nil, resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, resp.StatusCode, err
		}
	}
	return out, resp.StatusCode, nil
}

// newLB creates a load balancer with a listener and an empty pool and
// waits until it is ACTIVE; it returns the LB's and the pool's ids.
func (a api) newLB(subnet, name string) (lb, pool string, err error) {
	out, _, err := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": name, "vip_subnet_id": subnet,
		"listeners": []any{map[string]any{"name": "l", "protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{"name": "p"}}},
		"pools":     []any{map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT"}},
	}})
	if err != nil {
		return "", "", err
	}
	lbDoc := out["loadbalancer"].(map[string]any)
	lb = lbDoc["id"].(string)
	pool = lbDoc["pools"].([]any)[0].(map[string]any)["id"].(string)
	return lb, pool, a.waitActive(lb, 10*time.Minute)
}

func (a api) waitActive(lb string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		out, _, err := a.do("GET", "/v2/lbaas/loadbalancers/"+lb, nil)
		if err != nil {
			return err
		}
		if st := out["loadbalancer"].(map[string]any)["provisioning_status"]; st == "ACTIVE" {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("load balancer %s still %v", lb, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// membersBody is n distinct members, addresses 198.18.16.2 on.
func membersBody(n int) map[string]any {
	ms := make([]any, n)
	for j := range ms {
		ms[j] = map[string]any{"address": fmt.Sprintf("198.18.%d.%d", 16+j/250, 2+j%250), "protocol_port": 8080}
	}
	return map[string]any{"members": ms}
}

// writer renames load balancer lb in a loop, waiting for ACTIVE after
// each update, until stop is closed; it returns each update's start and
// latency.
func writer(a api, lb string, stop <-chan struct{}) ([]time.Time, []time.Duration, error) {
	var starts []time.Time
	var lat []time.Duration
	for i := 0; ; i++ {
		select {
		case <-stop:
			return starts, lat, nil
		default:
		}
		t0 := time.Now()
		if _, _, err := a.do("PUT", "/v2/lbaas/loadbalancers/"+lb, map[string]any{"loadbalancer": map[string]any{"name": fmt.Sprint("w", i)}}); err != nil {
			return starts, lat, err
		}
		starts, lat = append(starts, t0), append(lat, time.Since(t0))
		if err := a.waitActive(lb, time.Minute); err != nil {
			return starts, lat, err
		}
	}
}

// dbClock reads a database server's CPU time; false when it cannot.
type dbClock func() (time.Duration, bool)

func noDBClock() (time.Duration, bool) { return 0, false }

func run(ctx context.Context, engine, dsn string, dbCPU dbClock, sizes []int, otherWriter bool) ([]result, error) {
	dir, err := os.MkdirTemp("", "flowlb-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := flowlbserver.Start(ctx, flowlbserver.Options{
		Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Database: dsn, DataDir: dir, DefaultProject: "bench",
		VIPCIDR: "198.19.0.0/24", AckTimeout: 10 * time.Second, ReplicaID: "bench",
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	a := api{base: "http://" + s.APIAddr.String(), client: &http.Client{Timeout: 5 * time.Minute}}
	subnet, err := vipSubnet(a)
	if err != nil {
		return nil, err
	}
	other, _, err := a.newLB(subnet, "other")
	if err != nil {
		return nil, err
	}
	var out []result
	for _, n := range sizes {
		lb, pool, err := a.newLB(subnet, fmt.Sprint("batch-", n))
		if err != nil {
			return nil, err
		}
		body := membersBody(n)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var starts []time.Time
		var lat []time.Duration
		var werr error
		if otherWriter {
			wg.Go(func() { starts, lat, werr = writer(a, other, stop) })
		}
		time.Sleep(200 * time.Millisecond) // the writer is going
		db0, hasDB := dbCPU()
		t0, cpu0 := time.Now(), benchkit.ProcessCPU()
		_, _, berr := a.do("PUT", "/v2/lbaas/pools/"+pool+"/members", body)
		batch, cpu := time.Since(t0), benchkit.ProcessCPU()-cpu0
		db1, hasDB1 := dbCPU()
		if berr == nil {
			berr = a.waitActive(lb, 10*time.Minute)
		}
		active := time.Since(t0)
		cpuAll := benchkit.ProcessCPU() - cpu0
		if db2, ok := dbCPU(); ok {
			cpuAll += db2 - db0
		}
		close(stop)
		wg.Wait()
		if berr != nil {
			return nil, berr
		}
		if werr != nil {
			return nil, werr
		}
		// The updates that overlapped the batch, from its start until
		// the load balancer was ACTIVE again.
		var during []time.Duration
		for i, st := range starts {
			if st.Add(lat[i]).After(t0) && st.Before(t0.Add(active)) {
				during = append(during, lat[i])
			}
		}
		r := result{engine: engine, members: n, batch: batch, cpu: cpu, dbCPU: db1 - db0, hasDB: hasDB && hasDB1, cpuAll: cpuAll, active: active, writes: len(during)}
		if len(during) > 0 {
			slices.Sort(during)
			r.p50, r.p99, r.max = during[len(during)/2], during[(len(during)*99)/100], during[len(during)-1]
		}
		out = append(out, r)
	}
	return out, nil
}

// vipSubnet finds the default VIP subnet through the Neutron API.
func vipSubnet(a api) (string, error) {
	out, _, err := a.do("GET", "/v2.0/networks?name=flowlb-vip", nil)
	if err != nil {
		return "", err
	}
	nets, _ := out["networks"].([]any)
	if len(nets) != 1 {
		return "", fmt.Errorf("default VIP network: %v", out)
	}
	subs, _ := nets[0].(map[string]any)["subnets"].([]any)
	if len(subs) != 1 {
		return "", fmt.Errorf("default VIP network: %v", out)
	}
	return subs[0].(string), nil
}

func main() {
	sizeList := flag.String("sizes", "1000,5000,20000", "members per batch, comma-separated")
	sqlite := flag.Bool("sqlite", true, "measure the embedded SQLite store")
	pg := flag.String("postgres", "", `PostgreSQL DSN to measure, or "auto" to start a throwaway cluster`)
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	otherWriter := flag.Bool("other-writer", true, "update another load balancer in a loop during each batch (false: the CPU times are the batch's own)")
	flag.Parse()
	sizes, err := benchkit.Counts("sizes", "member count", *sizeList)
	if err != nil {
		fatal(err)
	}
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
		rs, err := run(ctx, "sqlite", filepath.Join(dir, "flowlb.db"), noDBClock, sizes, *otherWriter)
		if err != nil {
			fatal(err)
		}
		results = append(results, rs...)
	}
	if *pg != "" {
		pgs, err := benchkit.OpenPostgres(*pg)
		if err != nil {
			fatal(err)
		}
		defer pgs.Stop()
		dsn, err := pgs.Database()
		if err != nil {
			fatal(err)
		}
		rs, err := run(ctx, "postgres", dsn, pgs.CPUTime, sizes, *otherWriter)
		if err != nil {
			fatal(err)
		}
		results = append(results, rs...)
	}
	meanwhile := "nothing else written meanwhile"
	if *otherWriter {
		meanwhile = "another load balancer updated in a loop meanwhile"
	}
	fmt.Printf("batch member update of a fresh pool, %s, %s\n", meanwhile, time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| engine | members | batch answered | its CPU time | its database CPU | LB ACTIVE again | CPU until then | other writes during | their p50 | their p99 | their max |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		db := "–" // SQLite's is the process's; a DSN's server is not ours to read
		if r.hasDB {
			db = fmt.Sprintf("%.2f s", r.dbCPU.Seconds())
		}
		fmt.Printf("| flowlb %s | %d | %.2f s | %.2f s | %s | %.2f s | %.2f s | %d | %.1f ms | %.1f ms | %.1f ms |\n", r.engine, r.members,
			r.batch.Seconds(), r.cpu.Seconds(), db, r.active.Seconds(), r.cpuAll.Seconds(), r.writes, benchkit.MS(r.p50), benchkit.MS(r.p99), benchkit.MS(r.max))
	}
	fmt.Println("before (2026-11, SQLite, batch answered): 1k 0.24 s, 5k 2.3 s, 10k 10.5 s, 20k 42 s, other writes blocked throughout; target 20k ≤ 1 s")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "batchmembers:", err)
	os.Exit(1)
}
