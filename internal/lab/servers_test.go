package lab_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/vishvananda/netlink"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
)

// listenPeers serves a listener in h on h's address: every connection
// gets one line, the peer address the server saw.
func listenPeers(t *testing.T, h lab.Host, port string) net.Listener {
	t.Helper()
	ln, err := h.Listen("tcp", hostport(h.Addr, port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, c.RemoteAddr())
			c.Close()
		}
	}()
	return ln
}

// peerSeen connects from h to addr and returns the peer address the
// listenPeers server there reported.
func peerSeen(t *testing.T, from lab.Host, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := from.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("%s -> %s: %v", from.Name, addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("%s -> %s: read: %v", from.Name, addr, err)
	}
	host, _, _ := net.SplitHostPort(strings.TrimSpace(line))
	return host
}

// openDB opens the lab's database from inside host h, one fresh
// connection per use (so a restarted database is seen at once).
func openDB(t *testing.T, h lab.Host) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(lab.PostgresDSN + "&connect_timeout=3")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = h.Dial
	db := stdlib.OpenDB(*cfg)
	db.SetMaxIdleConns(0)
	t.Cleanup(func() { db.Close() })
	return db
}

// queryStrings runs q on db and returns the first column of every row.
func queryStrings(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustExec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestServersAndPostgres: a lab with two server hosts and the database.
// The server hosts are reached from nodes, pods, the client and each
// other with their real addresses and reach the pods; the database
// answers at lab.PostgresDSN from every host, is set up as documented,
// keeps its data over fast and immediate restarts, and down leaves
// nothing of it all.
func TestServersAndPostgres(t *testing.T) {
	l := labtest.New(t, 2, 1, labtest.WithServers(2), labtest.WithPostgres)
	t.Run("hosts", func(t *testing.T) { checkFabricHosts(t, l) })
	t.Run("servers reached", func(t *testing.T) {
		for _, srv := range l.Servers() {
			ln := listenPeers(t, srv, "9876")
			from := []lab.Host{l.Node(1), l.Pod(2, 1), l.Client(), l.Fabric(), l.DB()}
			for _, other := range l.Servers() {
				if other.Name != srv.Name {
					from = append(from, other)
				}
			}
			for _, from := range from {
				if got := peerSeen(t, from, ln.Addr().String()); got != from.Addr.String() {
					t.Errorf("%s -> %s: server saw %s, want %s", from.Name, srv.Name, got, from.Addr)
				}
			}
		}
	})
	t.Run("servers reach pods", func(t *testing.T) {
		for _, srv := range l.Servers() {
			if r := ask(t, srv, hostport(l.Pod(2, 1).Addr, "8080")); r.Pod != "n2-p1" || !strings.HasPrefix(r.Peer, srv.Addr.String()+":") {
				t.Errorf("%s -> n2-p1: %+v, want n2-p1 seeing peer %s", srv.Name, r, srv.Addr)
			}
		}
	})
	t.Run("database from every host", func(t *testing.T) {
		for _, from := range []lab.Host{l.Node(1), l.Pod(1, 1), l.Client(), l.Server(1), l.Server(2)} {
			got := queryStrings(t, openDB(t, from), "SELECT host(inet_client_addr())")
			if !slices.Equal(got, []string{from.Addr.String()}) {
				t.Errorf("from %s: the database saw %v, want %s", from.Name, got, from.Addr)
			}
		}
	})
	t.Run("database setup", func(t *testing.T) { checkPostgresSetup(t, l) })
	t.Run("restarts keep the data", func(t *testing.T) { checkPostgresRestarts(t, l) })
	t.Run("down", func(t *testing.T) { checkDownRemovesAll(t, l) })
}

// checkFabricHosts checks the server and database hosts' addresses,
// routes (no default route) and status.
func checkFabricHosts(t *testing.T, l *lab.Lab) {
	hosts := append(l.Servers(), l.DB())
	want := []string{"s1 198.18.0.241", "s2 198.18.0.242", "db 198.18.0.239"}
	var got []string
	for _, h := range hosts {
		got = append(got, h.Name+" "+h.Addr.String())
		nl, err := h.Netlink()
		if err != nil {
			t.Fatal(err)
		}
		routes, err := nl.RouteList(nil, netlink.FAMILY_V4)
		nl.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				t.Errorf("%s has a default route %s: it must not route out of the lab", h.Name, r)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("hosts %v, want %v", got, want)
	}
	if _, err := l.Host("s3"); err == nil {
		t.Error("host s3 exists in a lab of 2 servers")
	}
	var b strings.Builder
	l.Status().Format(&b)
	for _, s := range []string{"flb-" + l.Name() + "-s2", "flb-" + l.Name() + "-db", "postgres[", "dsn " + lab.PostgresDSN} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("status lacks %q:\n%s", s, b.String())
		}
	}
}

// checkPostgresSetup checks what the database was started with: who runs
// it, in which IPC namespace, where it listens and whom it lets in.
func checkPostgresSetup(t *testing.T, l *lab.Lab) {
	db := openDB(t, l.Node(1))
	checks := []struct{ query, want string }{
		{"SHOW listen_addresses", lab.DBAddr.String()},
		{"SHOW max_connections", "300"},
		{"SHOW dynamic_shared_memory_type", "mmap"},
		{"SELECT current_database()", "flowlb"},
		{"SELECT string_agg(type || ' ' || coalesce(address, '-') || ' ' || coalesce(netmask, '-'), ', ' ORDER BY line_number) FROM pg_hba_file_rules",
			"local - -, host 198.18.0.0 255.254.0.0"},
	}
	for _, c := range checks {
		if got := queryStrings(t, db, c.query); !slices.Equal(got, []string{c.want}) {
			t.Errorf("%s = %v, want %s", c.query, got, c.want)
		}
	}
	p, err := l.DB().Proc(lab.ProcPostgres)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d", p.PID), &st); err != nil {
		t.Fatal(err)
	}
	if p.User == nil || st.Uid != p.User.UID || st.Uid == 0 {
		t.Errorf("postgres runs as uid %d (recorded %+v), want the postgres user", st.Uid, p.User)
	}
	ours, _ := os.Readlink("/proc/self/ns/ipc")
	theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/ipc", p.PID))
	if theirs == "" || theirs == ours {
		t.Errorf("postgres IPC namespace %q, want its own (ours %q)", theirs, ours)
	}
	if pg := l.Postgres(); !strings.HasPrefix(pg.Data, l.Dir()+"/") {
		t.Errorf("data in %s, want under the lab's directory %s", pg.Data, l.Dir())
	}
}

// checkPostgresRestarts writes, stops the database fast, immediately and
// with SIGKILL, starts it again each time and reads everything back.
func checkPostgresRestarts(t *testing.T, l *lab.Lab) {
	db := openDB(t, l.Pod(2, 1))
	mustExec(t, db, "CREATE TABLE lab_restart (n int)")
	mustExec(t, db, "INSERT INTO lab_restart VALUES (1)")
	stops := map[string]func() error{
		"fast":      func() error { return l.StopPostgres(lab.PostgresFast) },
		"immediate": func() error { return l.StopPostgres(lab.PostgresImmediate) },
		"kill -9":   func() error { return l.DB().Kill(lab.ProcPostgres, syscall.SIGKILL) },
	}
	for i, mode := range []string{"fast", "immediate", "kill -9"} {
		if err := stops[mode](); err != nil {
			t.Fatalf("stop %s: %v", mode, err)
		}
		if l.PostgresRunning() {
			t.Fatalf("running after stop %s", mode)
		}
		if err := db.Ping(); err == nil {
			t.Fatalf("the database answers after stop %s", mode)
		}
		if _, err := l.StartPostgres(context.Background()); err != nil {
			t.Fatalf("start after stop %s: %v", mode, err)
		}
		want := []string{"1", "2", "3", "4"}[:i+1]
		if got := queryStrings(t, db, "SELECT n::text FROM lab_restart ORDER BY n"); !slices.Equal(got, want) {
			t.Errorf("after a %s restart: rows %v, want %v", mode, got, want)
		}
		mustExec(t, db, fmt.Sprintf("INSERT INTO lab_restart VALUES (%d)", i+2))
	}
	if err := l.StopPostgres("slow"); err == nil {
		t.Error("stop mode slow accepted")
	}
}

// checkDownRemovesAll takes the lab down and looks for what it left.
func checkDownRemovesAll(t *testing.T, l *lab.Lab) {
	nss, _ := filepath.Glob(filepath.Join(lab.NetnsDir, lab.Prefix(l.Name())+"*"))
	procs := procsIn(nss)
	data := l.Postgres().Data
	if len(nss) != 10 || len(procs) < 4 {
		t.Fatalf("before down: %d namespaces, %d processes; want 10 and the echo servers and postgres", len(nss), len(procs))
	}
	if err := l.Down(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(l.Name(), procs); len(left) > 0 {
		t.Errorf("left behind after down: %v", left)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("database data %s still there: %v", data, err)
	}
}

// TestKillRestart kills a process in a server host with SIGKILL and
// SIGTERM and restarts it from its record, with its argv and environment.
func TestKillRestart(t *testing.T) {
	l := labtest.New(t, 1, 1, labtest.WithServers(1))
	srv, from := l.Server(1), l.Pod(1, 1)
	argv, env, err := labtest.EchoCommand()
	if err != nil {
		t.Fatal(err)
	}
	addr := hostport(srv.Addr, "7000")
	first, err := srv.Start("server", append(argv, "--name", "s1", "--tcp", "7000", "--udp", "", "--http", ""), env...)
	if err != nil {
		t.Fatal(err)
	}
	waitTCP(t, from, addr)
	pid := first.PID
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		if err := srv.Kill("server", sig); err != nil {
			t.Fatalf("kill %s: %v", sig, err)
		}
		if srv.Running("server") {
			t.Fatalf("running after kill %s", sig)
		}
		if p, err := srv.Proc("server"); err != nil || p.PID != pid {
			t.Fatalf("record after kill %s: %+v %v, want pid %d kept", sig, p, err, pid)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := from.Dial(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			t.Fatalf("%s answers after kill %s", addr, sig)
		}
		p, err := srv.Restart("server")
		if err != nil {
			t.Fatalf("restart after kill %s: %v", sig, err)
		}
		if p.PID == pid || !slices.Equal(p.Argv, first.Argv) || !slices.Equal(p.Env, env) {
			t.Errorf("restarted as %+v, want a new pid with argv %v and env %v", p, first.Argv, env)
		}
		pid = p.PID
		waitTCP(t, from, addr)
		if r := ask(t, from, addr); r.Pod != "s1" {
			t.Errorf("answered by %q after restart, want s1", r.Pod)
		}
	}
	if _, err := srv.Restart("server"); err == nil {
		t.Error("restart of a running process accepted")
	}
	if err := srv.Kill("nosuch", syscall.SIGKILL); err == nil {
		t.Error("kill of an unknown process accepted")
	}
	if err := srv.Stop("server"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Restart("server"); err == nil {
		t.Error("restart after stop (record gone) accepted")
	}
}
