package lab

// The lab's database: a PostgreSQL cluster from Debian's packages, run by
// the lab in the database host on the fabric, for flowlb server replicas
// (docs/lab.md, "Server hosts and the database").

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowlb/flowlb/internal/shared/pgserver"
)

// The database's address, name and limits.
const (
	PostgresPort = 5432
	PostgresDB   = "flowlb"
	// ProcPostgres is the postmaster's process name on the database host.
	ProcPostgres = "postgres"
	// PostgresMaxConnections leaves room for several server replicas, each
	// with its pool, and the tests' own connections.
	PostgresMaxConnections = 300
	// postgresTimeout bounds a start (crash recovery included) and a stop.
	postgresTimeout = time.Minute
)

// PostgresDSN is how processes in the lab's namespaces reach the lab's
// database.
var PostgresDSN = "postgres://postgres@" + net.JoinHostPort(DBAddr.String(), strconv.Itoa(PostgresPort)) + "/" + PostgresDB + "?sslmode=disable"

// PostgresState describes the lab's database.
type PostgresState struct {
	Version string `json:"version"` // major version of Debian's package
	DSN     string `json:"dsn"`
	Dir     string `json:"dir"`    // owned by the postgres user: data/ and the socket
	Data    string `json:"data"`   // the cluster's data directory
	Socket  string `json:"socket"` // unix socket directory (psql -h DIR -U postgres flowlb)
}

// PostgresStop is how StopPostgres shuts the database down.
type PostgresStop string

const (
	// PostgresFast ends the sessions, checkpoints and exits (SIGINT).
	PostgresFast PostgresStop = "fast"
	// PostgresImmediate exits at once, as a crash would; the next start
	// recovers from the write-ahead log (SIGQUIT).
	PostgresImmediate PostgresStop = "immediate"
)

// Postgres returns the database's state, or nil if the lab has none.
func (l *Lab) Postgres() *PostgresState { return l.snapshot().Postgres }

// StartPostgres starts the lab's database and returns once it accepts
// connections at PostgresDSN. The first call adds the database host (db,
// DBAddr on the fabric) and makes the cluster in the lab's directory with
// the database flowlb; later calls, after StopPostgres, start it again on
// the same data. `lab down` stops it and removes its data.
func (l *Lab) StartPostgres(ctx context.Context) (*PostgresState, error) {
	install, err := pgserver.Find()
	if err != nil {
		return nil, fmt.Errorf("lab database: %w", err)
	}
	db, err := l.ensureDBHost(install)
	if err != nil {
		return nil, err
	}
	if err := initPostgres(install, db); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, postgresTimeout)
	defer cancel()
	if err := l.waitDBHostIdle(ctx); err != nil {
		return nil, err
	}
	if _, err := l.startProc(HostDB, ProcPostgres, postgresSpec(install, db)); err != nil {
		return nil, err
	}
	if err := l.waitPostgres(ctx); err != nil {
		return nil, err
	}
	return db, nil
}

// StopPostgres shuts the database down and waits until it has exited.
func (l *Lab) StopPostgres(mode PostgresStop) error {
	sig, ok := map[PostgresStop]syscall.Signal{PostgresFast: syscall.SIGINT, PostgresImmediate: syscall.SIGQUIT}[mode]
	if !ok {
		return fmt.Errorf("stop mode %q: want %s or %s", mode, PostgresFast, PostgresImmediate)
	}
	if l.Postgres() == nil {
		return ErrNoPostgres
	}
	return l.signalProc(HostDB, ProcPostgres, sig, postgresTimeout)
}

// PostgresRunning reports whether the database's server process runs.
func (l *Lab) PostgresRunning() bool {
	p, err := l.proc(HostDB, ProcPostgres)
	return err == nil && p.alive()
}

// ErrNoPostgres is returned by lab methods that need the database in a
// lab without it.
var ErrNoPostgres = errors.New("the lab runs no database (lab up --postgres)")

// unixSocketMax is the longest path a unix socket address holds.
const unixSocketMax = 107

// ensureDBHost adds the database host and records the database the first
// time, and returns the record.
func (l *Lab) ensureDBHost(install *pgserver.Install) (*PostgresState, error) {
	dir := filepath.Join(l.dir, "postgres")
	if sock := filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(PostgresPort)); len(sock) > unixSocketMax {
		return nil, fmt.Errorf("lab database: socket path %s longer than %d bytes (shorter state directory?)", sock, unixSocketMax)
	}
	err := l.update(func(s *State) error {
		if s.Postgres != nil {
			return nil
		}
		if err := l.addFabricHost(s, HostDB, DBAddr, DBAddr6); err != nil {
			return err
		}
		s.Postgres = &PostgresState{Version: filepath.Base(filepath.Dir(install.Bin)), DSN: PostgresDSN,
			Dir: dir, Data: filepath.Join(dir, "data"), Socket: dir}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l.Postgres(), nil
}

// postgresHBA lets in the lab's fabric network and the unix socket only.
const postgresHBA = `# The flowlb lab's database: trust from the lab (198.18.0.0/15) and the
# unix socket in the lab's directory, nothing else.
local all all trust
host  all all 198.18.0.0/15 trust
`

// initPostgres makes the cluster of db unless it exists.
func initPostgres(install *pgserver.Install, db *PostgresState) error {
	if _, err := os.Stat(filepath.Join(db.Data, "PG_VERSION")); err == nil {
		return nil
	}
	if err := install.MkdirOwned(db.Dir); err != nil {
		return err
	}
	if err := install.InitDB(db.Data, "-E", "UTF8", "--locale=C"); err != nil {
		return fmt.Errorf("lab database: %w", err)
	}
	// The file initdb made is the postgres user's; rewriting keeps that.
	if err := os.WriteFile(filepath.Join(db.Data, "pg_hba.conf"), []byte(postgresHBA), 0o600); err != nil {
		return fmt.Errorf("lab database: %w", err)
	}
	return nil
}

// postgresSpec is how the postmaster runs: as the postgres user, in its
// own IPC namespace, listening on DBAddr and the socket in the lab's
// directory. Dynamic shared memory goes in the data directory and System
// V memory in the IPC namespace, so even a SIGKILL (lab down) leaves
// nothing outside the lab's directory. fsync is off: the lab survives
// killed processes, not machine crashes, and syncing only costs time.
func postgresSpec(install *pgserver.Install, db *PostgresState) ProcState {
	return ProcState{
		Argv: []string{install.Path("postgres"), "-D", db.Data, "-p", strconv.Itoa(PostgresPort),
			"-c", "listen_addresses=" + DBAddr.String(),
			"-c", "unix_socket_directories=" + db.Socket,
			"-c", "max_connections=" + strconv.Itoa(PostgresMaxConnections),
			"-c", "dynamic_shared_memory_type=mmap",
			"-c", "fsync=off"},
		User:   &ProcUser{UID: install.User.Uid, GID: install.User.Gid},
		OwnIPC: true,
		Dir:    db.Data,
	}
}

// waitDBHostIdle waits until no process is left in the database host,
// such as the backends of a server killed with SIGKILL. Each server runs
// in its own IPC namespace, so PostgreSQL's own guard against starting
// while those still run (its System V shared memory) cannot see them.
func (l *Lab) waitDBHostIdle(ctx context.Context) error {
	ino, err := nsInode(NSName(l.name, HostDB))
	if err != nil {
		return fmt.Errorf("database host: %w", err)
	}
	for {
		pids := pidsInNS(map[uint64]bool{ino: true})
		if len(pids) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab database: processes %v of an earlier server still run in host %s: %w", pids, HostDB, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitPostgres waits until the database answers on DBAddr from the fabric
// and makes sure the database flowlb exists.
func (l *Lab) waitPostgres(ctx context.Context) error {
	var last error
	for {
		if last = l.ensurePostgresDB(ctx); last == nil {
			return nil
		}
		if !l.PostgresRunning() {
			return fmt.Errorf("lab database exited (log %s): %v", l.LogPath(HostDB, ProcPostgres), last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab database not ready (log %s): %w (last: %v)", l.LogPath(HostDB, ProcPostgres), ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ensurePostgresDB connects from the fabric and creates the database
// flowlb if it is missing.
func (l *Lab) ensurePostgresDB(ctx context.Context) error {
	cfg, err := pgx.ParseConfig("postgres://postgres@" + net.JoinHostPort(DBAddr.String(), strconv.Itoa(PostgresPort)) + "/postgres?sslmode=disable&connect_timeout=2")
	if err != nil {
		return err
	}
	cfg.DialFunc = l.Fabric().Dial
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", PostgresDB).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+PostgresDB)
	return err
}
