package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/flowlb/flowlb/bench/internal/benchkit"
	"github.com/flowlb/flowlb/internal/lab/noopoctavia"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// player starts a contender's server, empty, for one measurement.
type player struct {
	name  string
	start func(context.Context) (*server, error)
}

// server is a contender's API, ready.
type server struct {
	base   string // e.g. http://127.0.0.1:9876
	subnet string // the VIP subnet of the load balancers
	stop   func()
	logs   func() string
}

// explain adds the end of the server's logs to err.
func (s *server) explain(err error) error {
	return fmt.Errorf("%w\n%s", err, s.logs())
}

// players are the contenders and what they share across measurements
// (Octavia's MariaDB and RabbitMQ, a PostgreSQL cluster).
type players struct {
	players map[string]player
	closers []func()
}

func (ps *players) close() {
	for i := len(ps.closers) - 1; i >= 0; i-- {
		ps.closers[i]()
	}
}

func newPlayers(ctx context.Context, names []string, cfg config) (_ *players, err error) {
	ps := &players{players: map[string]player{}}
	defer func() {
		if err != nil {
			ps.close()
		}
	}()
	for _, name := range names {
		switch name {
		case flowlbSQLite:
			ps.players[name] = player{name, func(ctx context.Context) (*server, error) { return startFlowlb(ctx, cfg.flowlb, "") }}
		case octaviaFlowlb:
			fmt.Println("lbaas: starting MariaDB and RabbitMQ for Octavia with the flowlb provider")
			stack, err := noopoctavia.StartWithProvider(ctx, cfg.provider)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			ps.closers = append(ps.closers, stack.Close)
			ps.players[name] = player{name, func(ctx context.Context) (*server, error) {
				// flowlb as the Octavia API's provider runs without
				// Neutron: Octavia's no-op network driver makes the VIP.
				fl, err := startFlowlb(ctx, cfg.flowlb, "", "--network", "noop")
				if err != nil {
					return nil, err
				}
				stack.FlowlbURL = fl.base
				if err := stack.Fresh(ctx); err != nil {
					fl.stop()
					return nil, fmt.Errorf("%s: %w\n%s", name, err, stack.Logs())
				}
				return &server{base: stack.URL, subnet: noopSubnet, stop: fl.stop, logs: func() string { return stack.Logs() + fl.logs() }}, nil
			}}
		case flowlbPostgres:
			pg, err := benchkit.OpenPostgres(cfg.postgres)
			if err != nil {
				return nil, fmt.Errorf("PostgreSQL: %w", err)
			}
			ps.closers = append(ps.closers, pg.Stop)
			ps.players[name] = player{name, func(ctx context.Context) (*server, error) {
				dsn, err := pg.Database()
				if err != nil {
					return nil, err
				}
				return startFlowlb(ctx, cfg.flowlb, dsn)
			}}
		case octaviaName:
			fmt.Println("lbaas: starting MariaDB, RabbitMQ and Octavia")
			stack, err := noopoctavia.Start(ctx)
			if err != nil {
				return nil, fmt.Errorf("octavia: %w", err)
			}
			ps.closers = append(ps.closers, stack.Close)
			fresh := false // Start left a fresh Octavia for the first measurement
			ps.players[name] = player{name, func(ctx context.Context) (*server, error) {
				if fresh {
					if err := stack.Fresh(ctx); err != nil {
						return nil, fmt.Errorf("octavia: %w\n%s", err, stack.Logs())
					}
				}
				fresh = true
				return &server{base: stack.URL, subnet: noopSubnet, stop: func() {}, logs: stack.Logs}, nil
			}}
		default:
			return nil, fmt.Errorf("unknown contender %q (%s, %s, %s, %s)", name, flowlbSQLite, octaviaName, octaviaFlowlb, flowlbPostgres)
		}
	}
	return ps, nil
}

// noopSubnet is the VIP subnet of Octavia's load balancers: its no-op
// network driver accepts any.
const noopSubnet = "8a7f2c1e-0d3b-4c55-9e61-1f2a3b4c5d6e"

// startFlowlb starts `flowlb server` (noauth, no agents) on a new
// SQLite database in a temporary directory, or on dsn, with extra
// arguments, and waits until it answers.
func startFlowlb(ctx context.Context, bin, dsn string, extra ...string) (_ *server, err error) {
	dir, err := os.MkdirTemp("", "flowlb-lbaas-bench-")
	if err != nil {
		return nil, err
	}
	ports, err := testutil.FreePorts(2)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := []string{"server", "--listen", listen, "--agent-listen", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--data-dir", dir, "--default-project", project, "--log-level", "warn"}
	if dsn != "" {
		args = append(args, "--database", dsn)
	}
	args = append(args, extra...)
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv := &server{base: "http://" + listen}
	srv.logs = func() string {
		b, _ := os.ReadFile(log.Name())
		return "--- flowlb server log:\n" + string(b)
	}
	srv.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	defer func() {
		if err != nil {
			err = srv.explain(err)
			srv.stop()
		}
	}()
	a := api{base: srv.base, client: http.DefaultClient}
	if err := testutil.Wait(60*time.Second, func() (bool, string) {
		if err := a.do(ctx, http.MethodGet, "/v2/lbaas/loadbalancers?limit=1", nil, http.StatusOK, nil); err != nil {
			return false, err.Error()
		}
		return true, ""
	}); err != nil {
		return nil, fmt.Errorf("flowlb server: %w", err)
	}
	if slices.Contains(extra, "noop") {
		srv.subnet = noopSubnet
		return srv, nil
	}
	// The default VIP subnet, made at start.
	var nets struct {
		Networks []struct {
			Subnets []string `json:"subnets"`
		} `json:"networks"`
	}
	if err := a.do(ctx, http.MethodGet, "/v2.0/networks?name=flowlb-vip", nil, http.StatusOK, &nets); err != nil {
		return nil, err
	}
	if len(nets.Networks) != 1 || len(nets.Networks[0].Subnets) != 1 {
		b, _ := json.Marshal(nets)
		return nil, errors.New("flowlb's default VIP network: " + string(b))
	}
	srv.subnet = nets.Networks[0].Subnets[0]
	return srv, nil
}
