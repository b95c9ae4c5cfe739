// Command lbaas is the benchmark suite's LBaaS API contest: the real
// OpenStack Octavia from Debian (API under uwsgi and one worker, the
// amphora provider with the no-op amphora, compute and network drivers,
// its own MariaDB and RabbitMQ on loopback, noauth) against the `flowlb
// server` binary on SQLite and on PostgreSQL (noauth, no agents), on the
// same work, alternately, round after round:
//
//   - N load balancers created by 8 concurrent clients, plain and fully
//     populated in one call each (a TCP listener, a pool of 10 members, a
//     TCP health monitor), timed until the API lists all of them ACTIVE
//     (polled back to back), and each create call's p50 and p99;
//   - then, on the first of the full load balancers, a new pool created
//     alone, and once ACTIVE a batch update that gives it 100 members
//     (PUT .../members), timed until the load balancer is ACTIVE again.
//
// Each measurement starts from an empty database and a new server (for
// Octavia: a new database, API and worker; MariaDB and RabbitMQ stay).
// It writes a record for bench/suite.
//
//	go run ./bench/lbaas -flowlb bin/flowlb -sizes 100,1000 -rounds 3,1 -record bench/results/raw/lbaas.json
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/flowlb/flowlb/bench/internal/benchkit"
	"github.com/flowlb/flowlb/bench/suite/results"
)

// The contenders.
const (
	flowlbSQLite   = "flowlb (SQLite)"
	flowlbPostgres = "flowlb (PostgreSQL)"
	octaviaName    = "octavia"
	// octaviaFlowlb is the real Octavia's API with flowlb as its
	// provider driver (deploy/octavia-provider) and a flowlb server
	// (--network noop, no agents) behind it.
	octaviaFlowlb = "octavia (provider flowlb)"
)

const sizeLBs = "load balancers"

// contest is a contest of this benchmark: flowlb on SQLite is the
// baseline, and sizes and figures span decades (log-log curves).
func contest(name, title, unit string) results.Contest {
	return results.Contest{Name: name, Title: title, Unit: unit, Size: sizeLBs, LowerIsBetter: true, Baseline: flowlbSQLite, Curve: true}
}

var (
	contestActive = map[bool]results.Contest{
		false: contest("lbaas-active-plain", "N plain load balancers created by 8 clients → all ACTIVE", "s"),
		true:  contest("lbaas-active-full", "N full load balancers (listener, pool, 10 members, monitor) created by 8 clients → all ACTIVE", "s"),
	}
	contestCreateP50 = map[bool]results.Contest{
		false: contest("lbaas-create-plain-p50", "POST /v2/lbaas/loadbalancers, plain: response time p50", "ms"),
		true:  contest("lbaas-create-full-p50", "POST /v2/lbaas/loadbalancers, full: response time p50", "ms"),
	}
	contestCreateP99 = map[bool]results.Contest{
		false: contest("lbaas-create-plain-p99", "POST /v2/lbaas/loadbalancers, plain: response time p99", "ms"),
		true:  contest("lbaas-create-full-p99", "POST /v2/lbaas/loadbalancers, full: response time p99", "ms"),
	}
	contestBatchCall   = contest("lbaas-batch-members-call", "PUT 100 members (batch update) on a live load balancer among N: response time", "ms")
	contestBatchActive = contest("lbaas-batch-members-active", "PUT 100 members (batch update) on a live load balancer among N → ACTIVE again", "s")
)

func main() {
	flowlbBin := flag.String("flowlb", "bin/flowlb", "the flowlb binary (make build)")
	sizeList := flag.String("sizes", "100", "numbers of load balancers, comma-separated")
	roundList := flag.String("rounds", "3", "rounds: one count for every size, or one per size")
	contenderList := flag.String("contenders", strings.Join([]string{flowlbSQLite, octaviaName, flowlbPostgres}, ","), "contenders, comma-separated")
	modeList := flag.String("modes", "plain,full", "plain and/or full load balancers, comma-separated (full ones are followed by the batch update)")
	members := flag.Int("members", 10, "members per pool of a full load balancer")
	batch := flag.Int("batch", 100, "members of the batch update")
	conc := flag.Int("c", 8, "concurrent clients")
	provider := flag.String("provider", "deploy/octavia-provider", "the flowlb provider driver's source, for the contender "+octaviaFlowlb)
	pg := flag.String("postgres", "auto", `PostgreSQL DSN for flowlb (PostgreSQL), or "auto" to start a throwaway cluster`)
	record := flag.String("record", "", "write the record (JSON, for bench/suite) here")
	command := flag.String("command", "", "the command line the record names (default: this program's)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{flowlb: *flowlbBin, sizes: *sizeList, rounds: *roundList, contenders: *contenderList, modes: *modeList,
		members: *members, batch: *batch, conc: *conc, postgres: *pg, record: *record, command: *command, provider: *provider}); err != nil {
		fmt.Fprintln(os.Stderr, "lbaas:", err)
		os.Exit(1)
	}
}

type config struct {
	flowlb, sizes, rounds, contenders, modes string
	members, batch, conc                     int
	postgres, record, command                string
	provider                                 string
}

func run(ctx context.Context, cfg config) error {
	sizes, err := benchkit.Counts("sizes", "number of load balancers", cfg.sizes)
	if err != nil {
		return err
	}
	rounds, err := benchkit.Counts("rounds", "round count", cfg.rounds)
	if err != nil {
		return err
	}
	if len(rounds) == 1 {
		for len(rounds) < len(sizes) {
			rounds = append(rounds, rounds[0])
		}
	}
	if len(rounds) != len(sizes) {
		return fmt.Errorf("-rounds: one count, or one per size (%d)", len(sizes))
	}
	var modes []bool
	for _, m := range strings.Split(cfg.modes, ",") {
		switch m {
		case "plain":
			modes = append(modes, false)
		case "full":
			modes = append(modes, true)
		default:
			return fmt.Errorf("-modes: %q is neither plain nor full", m)
		}
	}
	names := strings.Split(cfg.contenders, ",")
	ps, err := newPlayers(ctx, names, cfg)
	if err != nil {
		return err
	}
	defer ps.close()
	if cfg.command == "" {
		cfg.command = strings.Join(os.Args, " ")
	}
	rec := results.Run{Date: time.Now().UTC(), Commit: headCommit(), Machine: results.ThisMachine(cfg.command)}
	fmt.Printf("lbaas: %s; %d CPUs, load average %.2f\n", strings.Join(names, " vs "), rec.Machine.CPUs, rec.Machine.Load1)
	for si, n := range sizes {
		for r := range rounds[si] {
			// Each round starts with another contender: no one always
			// runs on the machine as the previous one left it.
			for i := range names {
				who := names[(i+r)%len(names)]
				for _, full := range modes {
					m, err := measure(ctx, ps.players[who], n, full, cfg)
					if err != nil {
						return fmt.Errorf("%s, %d load balancers, round %d: %w", who, n, r+1, err)
					}
					fmt.Printf("%-20s %5d %-5s round %d: all ACTIVE after %7.2f s (created after %.2f s, create p50 %.1f ms, p99 %.1f ms)",
						who, n, mode(full), r+1, m.active.Seconds(), m.created.Seconds(), m.p50, m.p99)
					add := func(c results.Contest, v float64) {
						rec.Add(c, results.Sample{Contender: who, Size: n, Round: r + 1, Value: v})
					}
					add(contestActive[full], m.active.Seconds())
					add(contestCreateP50[full], m.p50)
					add(contestCreateP99[full], m.p99)
					if full {
						fmt.Printf("; batch of %d members: %.1f ms, ACTIVE after %.2f s", cfg.batch, ms(m.batchCall), m.batchActive.Seconds())
						add(contestBatchCall, ms(m.batchCall))
						add(contestBatchActive, m.batchActive.Seconds())
					}
					fmt.Println()
					// Written after every measurement: a run that fails
					// later keeps what it measured.
					if cfg.record != "" {
						if err := rec.Write(cfg.record); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	for _, c := range rec.Contests {
		for _, s := range c.Summarize() {
			fmt.Printf("%-95s %5d %-20s median %9.3f %s (%d rounds) ratio %.2f\n", c.Title, s.Size, s.Contender, s.Median, c.Unit, s.N, s.Ratio)
		}
	}
	fmt.Println("anchor (Octavia, amphora provider with no-op compute, measured earlier on this kind of machine): 100 plain load balancers ACTIVE after 71–73 s")
	if cfg.record != "" {
		return rec.Write(cfg.record)
	}
	return nil
}

func mode(full bool) string {
	if full {
		return "full"
	}
	return "plain"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// measurement is one contender's figures at one size in one mode.
type measurement struct {
	created, active        time.Duration
	p50, p99               float64 // ms
	batchCall, batchActive time.Duration
}

func measure(ctx context.Context, p player, n int, full bool, cfg config) (measurement, error) {
	var m measurement
	srv, err := p.start(ctx)
	if err != nil {
		return m, err
	}
	defer srv.stop()
	a := api{base: srv.base, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.conc}, Timeout: 5 * time.Minute}}
	members := 0
	if full {
		members = cfg.members
	}
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = lbBody(i, members, srv.subnet)
	}
	start := time.Now()
	lat, first, err := createAll(ctx, a, bodies, cfg.conc)
	if err != nil {
		return m, srv.explain(err)
	}
	m.created = time.Since(start)
	m.p50, m.p99 = percentileMS(lat, 50), percentileMS(lat, 99)
	// Octavia's worker takes most of a second per load balancer.
	within := 5*time.Minute + time.Duration(n)*3*time.Second
	if err := waitAllActive(ctx, a, n, within, func(active int) {
		fmt.Printf("  %s: %d of %d ACTIVE after %s\n", p.name, active, n, time.Since(start).Round(time.Second))
	}); err != nil {
		return m, srv.explain(err)
	}
	m.active = time.Since(start)
	if !full {
		return m, nil
	}
	// The batch goes to a new pool of the first load balancer, created
	// alone: Octavia 11 leaves the pool of a fully populated create in
	// PENDING_CREATE after the load balancer is ACTIVE, and refuses
	// (409) any change to it.
	lbID := first.LoadBalancer.ID
	var pool struct {
		Pool struct {
			ID string `json:"id"`
		} `json:"pool"`
	}
	if err := a.do(ctx, http.MethodPost, "/v2/lbaas/pools", poolBody(lbID), http.StatusCreated, &pool); err != nil {
		return m, srv.explain(err)
	}
	if err := waitActive(ctx, a, lbID, 10*time.Minute); err != nil {
		return m, srv.explain(err)
	}
	t0 := time.Now()
	if err := a.do(ctx, http.MethodPut, "/v2/lbaas/pools/"+pool.Pool.ID+"/members", batchBody(cfg.batch), http.StatusAccepted, nil); err != nil {
		return m, srv.explain(err)
	}
	m.batchCall = time.Since(t0)
	if err := waitActive(ctx, a, lbID, 10*time.Minute); err != nil {
		return m, srv.explain(err)
	}
	m.batchActive = time.Since(t0)
	return m, nil
}

// headCommit is the checkout's commit ("" outside a git checkout).
func headCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
