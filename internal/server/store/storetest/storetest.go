// Package storetest gives tests a fresh store on every engine flowlb
// supports: SQLite in a temporary directory and, when Debian's PostgreSQL
// is installed, a fresh database on a throwaway cluster that this process
// starts once and stops when the test binary exits (call Main from
// TestMain). Set FLOWLB_REQUIRE_POSTGRES=1 to fail instead of skip when
// PostgreSQL is missing, as CI does.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/pgserver"
)

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	DSNBase string // without database name
	dir     string
	pg      *pgserver.Install
	admin   *sql.DB
}

// StartCluster runs a PostgreSQL cluster from Debian's packages on a free
// loopback port as the postgres system user (the server refuses root).
func StartCluster() (*Cluster, error) {
	pg, err := pgserver.Find()
	if err != nil {
		return nil, err
	}
	c := &Cluster{pg: pg}
	if c.dir, err = os.MkdirTemp("", "flowlb-pg-"); err != nil {
		return nil, err
	}
	if err := pg.MkdirOwned(c.dir); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	data := filepath.Join(c.dir, "data")
	if err := pg.InitDB(data); err != nil {
		c.Stop()
		return nil, err
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", port, c.dir)
	if out, err := c.as("pg_ctl", "-D", data, "-o", opts, "-w", "-l", filepath.Join(c.dir, "log"), "start").CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	c.DSNBase = fmt.Sprintf("postgres://postgres@127.0.0.1:%d", port)
	if c.admin, err = sql.Open("pgx", c.DSNBase+"/postgres?sslmode=disable"); err != nil {
		c.Stop()
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err = c.admin.Ping(); err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("PostgreSQL did not answer: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) as(name string, args ...string) *exec.Cmd { return c.pg.Command(name, args...) }

var dbSeq atomic.Int64

// NewDatabase creates an empty database and returns its DSN.
func (c *Cluster) NewDatabase() (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	if _, err := c.admin.Exec("CREATE DATABASE " + name); err != nil {
		return "", err
	}
	return c.DSNBase + "/" + name + "?sslmode=disable", nil
}

// Stop stops the cluster and removes its files.
func (c *Cluster) Stop() {
	if c.admin != nil {
		c.admin.Close()
	}
	_ = c.as("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	os.RemoveAll(c.dir)
}

// CPUTime is the CPU time (user and system) the cluster's processes have
// used so far: the postmaster's own, its children's that it has reaped
// and its live children's, read from /proc (Linux, 100 ticks a second).
// Benchmarks take the difference over what they time.
func (c *Cluster) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: %w", err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		f, err := procStat(pid)
		if err != nil || (pid != pm && f.ppid != int64(pm)) {
			continue // gone meanwhile, or not the cluster's
		}
		ticks += f.utime + f.stime
		if pid == pm {
			ticks += f.cutime + f.cstime
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

type statFields struct{ ppid, utime, stime, cutime, cstime int64 }

// procStat reads the fields of /proc/PID/stat that CPUTime needs.
func procStat(pid int) (statFields, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return statFields{}, err
	}
	// The command name, in parentheses, may hold spaces: fields start
	// after its closing one, with the state (field 3).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return statFields{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 15 {
		return statFields{}, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	var out statFields
	for _, v := range []struct {
		field int // as numbered in proc(5)
		to    *int64
	}{{4, &out.ppid}, {14, &out.utime}, {15, &out.stime}, {16, &out.cutime}, {17, &out.cstime}} {
		n, err := strconv.ParseInt(f[v.field-3], 10, 64)
		if err != nil {
			return statFields{}, fmt.Errorf("/proc/%d/stat field %d: %w", pid, v.field, err)
		}
		*v.to = n
	}
	return out, nil
}

var (
	once    sync.Once
	cluster *Cluster
	pgErr   error
)

// Main runs the tests and stops the shared cluster afterwards.
func Main(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Stop()
	}
	os.Exit(code)
}

// Engine is one store under test.
type Engine struct {
	Name  string
	Store store.Store
	// DSN opens the same database again (for tests of reopening).
	DSN string
}

// Engines returns a fresh SQLite store and, if available, a fresh
// PostgreSQL store; both are closed at the end of the test.
func Engines(t testing.TB) []Engine {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(t.TempDir(), "flowlb.db")
	sq, err := store.Open(ctx, path, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	out := []Engine{{"sqlite", sq, path}}
	once.Do(func() { cluster, pgErr = StartCluster() })
	if pgErr != nil {
		if pgserver.Required() {
			t.Fatalf("PostgreSQL required: %v", pgErr)
		}
		t.Logf("skipping PostgreSQL: %v", pgErr)
		return out
	}
	dsn, err := cluster.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := store.Open(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	return append(out, Engine{"postgres", pg, dsn})
}

// Reopen opens the engine's database a second time, as another replica
// would, closed at the end of the test.
func Reopen(t testing.TB, e Engine) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), e.DSN, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// PostgresDSN returns a fresh PostgreSQL database, skipping the test if
// PostgreSQL is not installed (failing it where it is required).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	once.Do(func() { cluster, pgErr = StartCluster() })
	if pgErr != nil {
		if pgserver.Required() {
			t.Fatalf("PostgreSQL required: %v", pgErr)
		}
		t.Skipf("PostgreSQL: %v", pgErr)
	}
	dsn, err := cluster.NewDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}
