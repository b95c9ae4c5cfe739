package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

//go:embed migrations/*.sql
var migrations embed.FS

// engine hides the few differences between SQLite and PostgreSQL.
type engine interface {
	name() string
	rebind(q string) string
	isRetryable(err error) bool
	// now is the SQL expression of the database's clock in Unix
	// microseconds: leases compare against one clock, the database's.
	now() string
}

type sqliteEngine struct{}

func (sqliteEngine) name() string           { return "sqlite" }
func (sqliteEngine) rebind(q string) string { return q }
func (sqliteEngine) isRetryable(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "SQLITE_BUSY") || strings.Contains(err.Error(), "database is locked"))
}

func (sqliteEngine) now() string {
	return "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
}

type pgEngine struct{}

func (pgEngine) name() string { return "postgres" }

func (pgEngine) now() string { return "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT" }

// rebind turns ? placeholders into $1, $2, ... for PostgreSQL.
func (pgEngine) rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func (pgEngine) isRetryable(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// SQL is a Store on database/sql.
type SQL struct {
	eng    engine
	dsn    string
	writer *sql.DB // SQLite: one connection, so one writer at a time
	reader *sql.DB
	ckpt   *walCheckpointer // SQLite: folds the write-ahead log in
	log    *slog.Logger

	signals *signals
	epoch   string

	// lastChange: see LastChange (SQLite only).
	lastMu     sync.Mutex
	lastChange map[string]int64
	// grouped runs the changes on SQLite, the one writer (changes.go).
	grouped *Grouped
	// numbered: each write transaction gives its change-log entries
	// their revisions itself (SQLite, whose one writer commits in the
	// order it writes), so that no sequencing transaction follows each
	// commit; set once Open has numbered what an older server left.
	numbered bool
}

// Change runs a change (Changes): on SQLite in a transaction shared with
// the changes waiting for the writer beside it, on PostgreSQL, whose
// writers run in parallel, alone.
func (s *SQL) Change(ctx context.Context, fn func(tx Tx) error) (Commit, error) {
	if s.grouped != nil {
		return s.grouped.Change(ctx, fn)
	}
	return s.Update(ctx, fn)
}

// Keep keeps what change p built for its completion, on SQLite
// (Changes); on PostgreSQL, where other replicas write too, nothing.
func (s *SQL) Keep(p Pending, clone func() any) {
	if s.grouped != nil {
		s.grouped.Keep(p, clone)
	}
}

// Shared: on SQLite the changes waiting for the writer share its
// transaction (Changes).
func (s *SQL) Shared() bool { return s.grouped != nil }

// Built gives back what Keep kept for p, while p is its load balancer's
// last change (Changes).
func (s *SQL) Built(tx Tx, p Pending) (any, bool) {
	if s.grouped != nil {
		return s.grouped.Built(tx, p)
	}
	return nil, false
}

// LastChange is the change-log entry of the last write transaction that
// logged a change of load balancer lbID, as this process saw it. On
// SQLite, where this process is the one writer, that is every write's;
// on PostgreSQL, where other replicas write too, it is never known
// (false). An entry is noted before its transaction commits, under the
// single writer, so a later write transaction reads every earlier one's;
// one noted for a transaction that then failed can only make the entry a
// caller compares with not match.
func (s *SQL) LastChange(lbID string) (int64, bool) {
	if !s.SingleWriter() {
		return 0, false
	}
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	c, ok := s.lastChange[lbID]
	return c, ok
}

// maxLastChanges bounds the load balancers LastChange remembers.
const maxLastChanges = 200_000

func (s *SQL) noteChanges(changes map[string]int64) {
	if !s.SingleWriter() || len(changes) == 0 {
		return
	}
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	if s.lastChange == nil || len(s.lastChange) >= maxLastChanges {
		// Deleted load balancers' entries would stay: start again (what
		// is forgotten reads as unknown, never as unchanged).
		s.lastChange = map[string]int64{}
	}
	for lb, c := range changes {
		s.lastChange[lb] = c
	}
}

// Open opens (and migrates) the database named by dsn: a SQLite file path
// (optionally prefixed sqlite:// or file:) or a postgres:// URL.
func Open(ctx context.Context, dsn string, log *slog.Logger) (*SQL, error) {
	if log == nil {
		log = slog.Default()
	}
	var s *SQL
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		// Idle connections are kept (database/sql keeps 2 by default):
		// PostgreSQL forks a backend per connection, and a pool that
		// closes and reopens them under load spends more on that than
		// on the queries.
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(16)
		db.SetConnMaxIdleTime(5 * time.Minute)
		s = &SQL{eng: pgEngine{}, dsn: dsn, writer: db, reader: db, log: log}
	default:
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "file:")
		params := "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(OFF)&_pragma=temp_store(MEMORY)" +
			fmt.Sprintf("&_pragma=wal_autocheckpoint(0)&_pragma=journal_size_limit(%d)", walKeepBytes) // checkpoint.go
		w, err := openCachingSQLite("file:" + path + params + "&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		w.SetMaxOpenConns(1)
		r, err := openCachingSQLite("file:" + path + params)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		// All four stay open (database/sql keeps 2 idle by default):
		// a reopened connection runs its pragmas again and has lost its
		// prepared statements, which under concurrent reads took more
		// time than the reads.
		r.SetMaxOpenConns(4)
		r.SetMaxIdleConns(4)
		ckpt, err := startCheckpointer("file:"+path+params, log)
		if err != nil {
			w.Close()
			r.Close()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		s = &SQL{eng: sqliteEngine{}, dsn: dsn, writer: w, reader: r, ckpt: ckpt, log: log}
		s.grouped = NewGrouped(s, log)
	}
	s.signals = newSignals(s)
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, unavailable(err)
	}
	if err := s.readEpoch(ctx); err != nil {
		s.Close()
		return nil, unavailable(err)
	}
	if s.eng.name() == "sqlite" {
		// Entries an older server committed without revisions are
		// numbered first, so that revisions keep the commits' order.
		for {
			n, err := s.Sequence(ctx)
			if err != nil {
				s.Close()
				return nil, unavailable(err)
			}
			if n == 0 {
				break
			}
		}
		s.numbered = true
	}
	return s, nil
}

// migrate applies the embedded migrations in order, once each; on
// PostgreSQL under an advisory lock so that replicas starting together do
// not race.
func (s *SQL) migrate(ctx context.Context) error {
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if s.eng.name() == "postgres" {
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(735301)"); err != nil {
			return fmt.Errorf("migrate lock: %w", err)
		}
		defer conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock(735301)") //nolint:errcheck
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		return err
	}
	for _, e := range entries {
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: bad name", e.Name())
		}
		// NNN_what.sql is for both engines, NNN_what.<engine>.sql (same
		// version, one file per engine) for one.
		if eng := strings.TrimSuffix(e.Name(), ".sql"); strings.Contains(eng, ".") && !strings.HasSuffix(eng, "."+s.eng.name()) {
			continue
		}
		var n int
		if err := conn.QueryRowContext(ctx, s.eng.rebind("SELECT COUNT(*) FROM schema_migrations WHERE version = ?"), v).Scan(&n); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile("migrations/" + e.Name())
		if err != nil {
			return err
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for _, stmt := range strings.Split(string(body), ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				tx.Rollback()
				return fmt.Errorf("migration %s: %w", e.Name(), err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.eng.rebind("INSERT INTO schema_migrations (version) VALUES (?)"), v); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		s.log.Info("applied database migration", "version", v, "engine", s.eng.name())
	}
	return nil
}

// SingleWriter says whether the database runs one write transaction at a
// time (SQLite), whose changes then share transactions (Change).
func (s *SQL) SingleWriter() bool { return s.eng.name() == "sqlite" }

// Close closes the database handles.
func (s *SQL) Close() error {
	s.signals.close()
	var err error
	if s.ckpt != nil {
		// First, so that no checkpoint of the loop races the last
		// connection's, which folds the log in at close.
		if cerr := s.ckpt.close(); cerr != nil {
			s.log.Warn("sqlite checkpoint at close", "err", cerr)
		}
	}
	err = s.writer.Close()
	if s.reader != s.writer {
		if rerr := s.reader.Close(); err == nil {
			err = rerr
		}
	}
	return err
}

type sqlTx struct {
	s       *SQL
	tx      *sql.Tx
	conn    *sql.Conn // the write transaction's connection, for COPY on PostgreSQL
	batched bool      // PostgreSQL: objects_batch has rows of this transaction
	ctx     context.Context
	touched map[string]bool
	pend    map[string]string // load balancer → owner of its pending change
	write   bool
	// onRollback is called if the transaction does not commit.
	onRollback []func()
}

const cols = "kind, id, project_id, loadbalancer_id, parent_id, name, data, created_at"

func scan(row interface{ Scan(...any) error }) (Record, error) {
	var r Record
	var data string
	var created int64
	err := row.Scan(&r.Kind, &r.ID, &r.ProjectID, &r.LoadBalancerID, &r.ParentID, &r.Name, &data, &created)
	r.Data = []byte(data)
	r.CreatedAt = time.UnixMicro(created)
	return r, err
}

func (t *sqlTx) q(query string) string { return t.s.eng.rebind(query) }

// get reads a record; lock is a PostgreSQL row-locking clause or empty
// (SQLite's IMMEDIATE transaction already holds the writer lock).
func (t *sqlTx) get(kind Kind, id string, lock string) (Record, error) {
	q := "SELECT " + cols + " FROM objects WHERE kind = ? AND id = ?"
	if lock != "" && t.s.eng.name() == "postgres" {
		q += " " + lock
	}
	r, err := scan(t.tx.QueryRowContext(t.ctx, t.q(q), string(kind), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("get %s %s: %w", kind, id, err)
	}
	return r, nil
}

func (t *sqlTx) Get(kind Kind, id string) (Record, error) { return t.get(kind, id, "") }

// GetForUpdate locks the row: SQLite's writer lock is already held by the
// IMMEDIATE transaction; PostgreSQL takes a row lock.
func (t *sqlTx) GetForUpdate(kind Kind, id string) (Record, error) {
	return t.get(kind, id, "FOR UPDATE")
}

// GetForShare takes PostgreSQL's weakest shared row lock: it conflicts
// with DELETE and FOR UPDATE but not with other sharers or with an UPDATE
// that changes no key column (all of ours).
func (t *sqlTx) GetForShare(kind Kind, id string) (Record, error) {
	return t.get(kind, id, "FOR KEY SHARE")
}

// Lock takes a row lock on the key's row of the locks table, inserting
// the row the first time. SQLite needs none: the IMMEDIATE transaction
// holds the database's one writer lock from its start.
func (t *sqlTx) Lock(key string) error {
	if t.s.eng.name() != "postgres" {
		return nil
	}
	for range 2 {
		var got string
		err := t.tx.QueryRowContext(t.ctx, t.q("SELECT name FROM locks WHERE name = ? FOR UPDATE"), key).Scan(&got)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("lock %s: %w", key, err)
		}
		// A concurrent first insert of the key makes this one wait for
		// it to end; either way the row then exists for the SELECT.
		if _, err := t.tx.ExecContext(t.ctx, t.q("INSERT INTO locks (name) VALUES (?) ON CONFLICT DO NOTHING"), key); err != nil {
			return fmt.Errorf("lock %s: %w", key, err)
		}
	}
	return fmt.Errorf("lock %s: row vanished", key)
}

func where(f Filter) (string, []any) {
	var conds []string
	var args []any
	add := func(col, v string) {
		if v != "" {
			conds = append(conds, col+" = ?")
			args = append(args, v)
		}
	}
	add("project_id", f.ProjectID)
	add("loadbalancer_id", f.LoadBalancerID)
	add("parent_id", f.ParentID)
	add("name", f.Name)
	if len(f.LoadBalancerIDs) > 0 {
		conds = append(conds, "loadbalancer_id IN (?"+strings.Repeat(", ?", len(f.LoadBalancerIDs)-1)+")")
		for _, id := range f.LoadBalancerIDs {
			args = append(args, id)
		}
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " AND " + strings.Join(conds, " AND "), args
}

// ofKind is the condition on kind with the kind as a literal, not a
// parameter: the planners of both engines then use the partial index on
// load balancers' names (objects_lb_name), which a parameter cannot
// prove applies. Kinds are this package's constants, never input.
func ofKind(kind Kind) string {
	return "kind = " + kindLiteral(kind)
}

// ofKinds is ofKind for any of several kinds: both engines look each up
// in the (kind, …) indexes.
func ofKinds(kinds []Kind) string {
	lits := make([]string, len(kinds))
	for i, k := range kinds {
		lits[i] = kindLiteral(k)
	}
	return "kind IN (" + strings.Join(lits, ", ") + ")"
}

func kindLiteral(kind Kind) string {
	for _, c := range kind {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			panic(fmt.Sprintf("store: kind %q is not an identifier", kind))
		}
	}
	return "'" + string(kind) + "'"
}

func (t *sqlTx) List(kind Kind, f Filter) ([]Record, error) {
	out, err := t.list(ofKind(kind), f)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	return out, nil
}

func (t *sqlTx) ListKinds(kinds []Kind, f Filter) ([]Record, error) {
	switch len(kinds) {
	case 0:
		return nil, nil
	case 1:
		return t.List(kinds[0], f)
	}
	out, err := t.list(ofKinds(kinds), f)
	if err != nil {
		return nil, fmt.Errorf("list %v: %w", kinds, err)
	}
	return out, nil
}

// list returns the records that the condition on kind and f select.
func (t *sqlTx) list(kindCond string, f Filter) ([]Record, error) {
	w, args := where(f)
	rows, err := t.tx.QueryContext(t.ctx, t.q("SELECT "+cols+" FROM objects WHERE "+kindCond+w+" ORDER BY created_at, id"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *sqlTx) Count(kind Kind, f Filter) (int, error) {
	w, args := where(f)
	var n int
	err := t.tx.QueryRowContext(t.ctx, t.q("SELECT COUNT(*) FROM objects WHERE "+ofKind(kind)+w), args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", kind, err)
	}
	return n, nil
}

func (t *sqlTx) CountGrouped(kinds []Kind, fields []string) ([]GroupCount, error) {
	if len(kinds) == 0 {
		return nil, nil
	}
	// The field names are arguments, never SQL: '$.name' for SQLite's
	// json_extract, the bare key for PostgreSQL's ->>. Each is one parse
	// of the document.
	cols := make([]string, len(fields))
	args := make([]any, len(fields))
	for i, f := range fields {
		if t.s.eng.name() == "postgres" {
			cols[i] = "COALESCE(data::json->>?, '')"
			args[i] = f
		} else {
			cols[i] = "COALESCE(json_extract(data, ?), '')"
			args[i] = "$." + f
		}
	}
	sel := strings.Join(append([]string{"kind"}, cols...), ", ")
	group := make([]string, len(fields)+1)
	for i := range group {
		group[i] = strconv.Itoa(i + 1)
	}
	q := "SELECT " + sel + ", COUNT(*) FROM objects WHERE " + ofKinds(kinds) + " GROUP BY " + strings.Join(group, ", ")
	rows, err := t.tx.QueryContext(t.ctx, t.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("count %v by %v: %w", kinds, fields, err)
	}
	defer rows.Close()
	var out []GroupCount
	for rows.Next() {
		g := GroupCount{Values: make([]string, len(fields))}
		dest := []any{&g.Kind}
		for i := range g.Values {
			dest = append(dest, &g.Values[i])
		}
		dest = append(dest, &g.N)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("count %v by %v: %w", kinds, fields, err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

func (t *sqlTx) Insert(r Record) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now()
	}
	// ON CONFLICT DO NOTHING instead of catching the unique violation:
	// on PostgreSQL a failed statement aborts the whole transaction, and
	// callers may go on after ErrConflict.
	res, err := t.tx.ExecContext(t.ctx, t.q("INSERT INTO objects ("+cols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
		string(r.Kind), r.ID, r.ProjectID, r.LoadBalancerID, r.ParentID, r.Name, string(r.Data), r.CreatedAt.UnixMicro())
	if err != nil {
		return fmt.Errorf("insert %s %s: %w", r.Kind, r.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrConflict
	}
	return nil
}

// insertChunk bounds the rows of one INSERT (SQLite allows 32766 bound
// parameters; 8 per row).
const insertChunk = 500

// stamped gives the records without a creation time now plus their
// position in microseconds, so that listing keeps input order across the
// whole batch.
func stamped(rs []Record) []Record {
	now := time.Now()
	out := slices.Clone(rs)
	for i := range out {
		if out[i].CreatedAt.IsZero() {
			out[i].CreatedAt = now.Add(time.Duration(i) * time.Microsecond)
		}
	}
	return out
}

func (t *sqlTx) InsertMany(rs []Record) error {
	rs = stamped(rs)
	if t.s.eng.name() == "postgres" {
		return t.pgInsertMany(rs)
	}
	return t.insertChunks(rs)
}

// insertChunks adds rs with multi-row INSERTs of insertChunk rows.
func (t *sqlTx) insertChunks(rs []Record) error {
	for len(rs) > 0 {
		n := min(len(rs), insertChunk)
		chunk := rs[:n]
		rs = rs[n:]
		var b strings.Builder
		b.WriteString("INSERT INTO objects (" + cols + ") VALUES ")
		args := make([]any, 0, 8*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, string(r.Kind), r.ID, r.ProjectID, r.LoadBalancerID, r.ParentID, r.Name, string(r.Data), r.CreatedAt.UnixMicro())
		}
		b.WriteString(" ON CONFLICT DO NOTHING")
		res, err := t.tx.ExecContext(t.ctx, t.q(b.String()), args...)
		if err != nil {
			return fmt.Errorf("insert %d records: %w", len(chunk), err)
		}
		if got, _ := res.RowsAffected(); got != int64(len(chunk)) {
			return ErrConflict // the caller abandons the transaction
		}
	}
	return nil
}

func (t *sqlTx) Update(r Record) error {
	res, err := t.tx.ExecContext(t.ctx, t.q("UPDATE objects SET project_id = ?, loadbalancer_id = ?, parent_id = ?, name = ?, data = ? WHERE kind = ? AND id = ?"),
		r.ProjectID, r.LoadBalancerID, r.ParentID, r.Name, string(r.Data), string(r.Kind), r.ID)
	if err != nil {
		return fmt.Errorf("update %s %s: %w", r.Kind, r.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// UpdateMany rewrites many rows in few statements: on SQLite an UPDATE …
// FROM (VALUES …) per chunk, on PostgreSQL see pgUpdateMany. It sets only
// data and name. SQLite rewrites the entries of every index over a column
// an UPDATE sets, whether or not its value changes: the data of all in
// one statement, then the names that differ (a load balancer's name is
// indexed, and a random page of that index per completion is what
// setting it to the same value cost).
func (t *sqlTx) UpdateMany(rs []Record) error {
	if t.s.eng.name() == "postgres" {
		return t.pgUpdateMany(rs)
	}
	for len(rs) > 0 {
		n := min(len(rs), insertChunk)
		chunk := rs[:n]
		rs = rs[n:]
		var values strings.Builder
		args := make([]any, 0, 3*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				values.WriteString(", ")
			}
			values.WriteString("(?, ?, ?)")
			args = append(args, string(r.Kind), r.ID, string(r.Data))
		}
		res, err := t.tx.ExecContext(t.ctx, "UPDATE objects SET data = v.column3 FROM (VALUES "+values.String()+") AS v WHERE objects.kind = v.column1 AND objects.id = v.column2", args...)
		if err != nil {
			return fmt.Errorf("update %d records: %w", len(chunk), err)
		}
		if got, _ := res.RowsAffected(); got != int64(len(chunk)) {
			return ErrNotFound
		}
		for i, r := range chunk {
			args[3*i+2] = r.Name
		}
		if _, err := t.tx.ExecContext(t.ctx, "UPDATE objects SET name = v.column3 FROM (VALUES "+values.String()+") AS v WHERE objects.kind = v.column1 AND objects.id = v.column2 AND objects.name <> v.column3", args...); err != nil {
			return fmt.Errorf("update the names of %d records: %w", len(chunk), err)
		}
	}
	return nil
}

func (t *sqlTx) Delete(kind Kind, id string) error {
	res, err := t.tx.ExecContext(t.ctx, t.q("DELETE FROM objects WHERE kind = ? AND id = ?"), string(kind), id)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

func (t *sqlTx) DeleteMany(kind Kind, ids []string) error {
	if t.s.eng.name() == "postgres" && len(ids) > 0 {
		// One statement for any number, the ids as an array.
		if _, err := t.tx.ExecContext(t.ctx, "DELETE FROM objects WHERE kind = $1 AND id = ANY($2::text[])", string(kind), ids); err != nil {
			return fmt.Errorf("delete %d %s: %w", len(ids), kind, err)
		}
		return nil
	}
	for len(ids) > 0 {
		n := min(len(ids), insertChunk)
		args := make([]any, 0, n+1)
		args = append(args, string(kind))
		for _, id := range ids[:n] {
			args = append(args, id)
		}
		ids = ids[n:]
		q := "DELETE FROM objects WHERE kind = ? AND id IN (?" + strings.Repeat(", ?", n-1) + ")"
		if _, err := t.tx.ExecContext(t.ctx, t.q(q), args...); err != nil {
			return fmt.Errorf("delete %d %s: %w", n, kind, err)
		}
	}
	return nil
}

func (t *sqlTx) Touch(lbID string) {
	if lbID != "" {
		t.touched[lbID] = true
	}
}

func (t *sqlTx) Pend(lbID, owner string) {
	t.Touch(lbID)
	t.pend[lbID] = owner
}

func (t *sqlTx) Pending(lbID string) (Pending, bool, error) {
	p := Pending{LoadBalancerID: lbID}
	err := t.tx.QueryRowContext(t.ctx, t.q("SELECT owner, change FROM pending_changes WHERE loadbalancer_id = ?"), lbID).Scan(&p.Owner, &p.Change)
	if errors.Is(err, sql.ErrNoRows) {
		return Pending{}, false, nil
	}
	if err != nil {
		return Pending{}, false, fmt.Errorf("pending change of %s: %w", lbID, err)
	}
	return p, true, nil
}

func (t *sqlTx) Settle(p Pending) error {
	res, err := t.tx.ExecContext(t.ctx, t.q("DELETE FROM pending_changes WHERE loadbalancer_id = ? AND owner = ? AND change = ?"), p.LoadBalancerID, p.Owner, p.Change)
	if err != nil {
		return fmt.Errorf("settle pending change of %s: %w", p.LoadBalancerID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrConflict
	}
	return nil
}

func (t *sqlTx) OnRollback(fn func()) { t.onRollback = append(t.onRollback, fn) }

func (t *sqlTx) rolledBack() {
	for _, fn := range t.onRollback {
		fn()
	}
}

// Update runs fn in a write transaction and commits it with its change-log
// entries; it retries serialization failures.
func (s *SQL) Update(ctx context.Context, fn func(tx Tx) error) (Commit, error) {
	const attempts = 5
	var err error
	for i := 0; i < attempts; i++ {
		var c Commit
		c, err = s.update(ctx, fn)
		if err == nil || !s.eng.isRetryable(err) {
			if err == nil && len(c.Changes) > 0 {
				if s.numbered {
					s.Notify(ctx, TopicLog)
				} else {
					s.Notify(ctx, TopicPending)
				}
			}
			return c, unavailable(err)
		}
		time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
	}
	return Commit{}, unavailable(err)
}

func (s *SQL) update(ctx context.Context, fn func(tx Tx) error) (Commit, error) {
	// The transaction's own connection, so that a COPY can go on it.
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return Commit{}, fmt.Errorf("begin: %w", err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		conn.Close()
		return Commit{}, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		// The connection goes back to the pool only once the transaction
		// is over (Close waits for it): end it if fn panicked.
		_ = tx.Rollback()
		conn.Close()
	}()
	t := &sqlTx{s: s, tx: tx, conn: conn, ctx: ctx, touched: map[string]bool{}, pend: map[string]string{}, write: true}
	committed := false
	defer func() {
		if !committed {
			t.rolledBack()
		}
	}()
	if err := fn(t); err != nil {
		tx.Rollback()
		return Commit{}, err
	}
	c, err := t.logChanges()
	if err != nil {
		tx.Rollback()
		return Commit{}, err
	}
	if err := tx.Commit(); err != nil {
		return Commit{}, fmt.Errorf("commit: %w", err)
	}
	committed = true
	return c, nil
}

// logChanges writes the transaction's change-log entries and the pending
// changes it leaves. On PostgreSQL the entries have no revisions yet (the
// sequencer gives them after commit, in commit order); on SQLite the
// transaction numbers them after the log's head, which it moves (its
// IMMEDIATE transaction holds the one writer's lock from the start).
func (t *sqlTx) logChanges() (Commit, error) {
	c := Commit{Changes: map[string]int64{}}
	if len(t.touched) == 0 {
		return c, nil
	}
	ids := make([]string, 0, len(t.touched))
	for id := range t.touched {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var head int64
	if t.s.numbered {
		if err := t.tx.QueryRowContext(t.ctx, "SELECT head FROM log_head WHERE id = 1").Scan(&head); err != nil {
			return c, fmt.Errorf("log head: %w", err)
		}
	}
	var b strings.Builder
	args := make([]any, 0, 3*len(ids))
	at := time.Now().UnixMicro()
	if t.s.numbered {
		b.WriteString("INSERT INTO change_log (loadbalancer_id, at, revision) VALUES ")
	} else {
		b.WriteString("INSERT INTO change_log (loadbalancer_id, at) VALUES ")
	}
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		if t.s.numbered {
			// Ids grow in the order of the values: revisions follow them.
			b.WriteString("(?, ?, ?)")
			args = append(args, id, at, head+int64(i)+1)
		} else {
			b.WriteString("(?, ?)")
			args = append(args, id, at)
		}
	}
	b.WriteString(" RETURNING id, loadbalancer_id")
	rows, err := t.tx.QueryContext(t.ctx, t.q(b.String()), args...)
	if err != nil {
		return c, fmt.Errorf("log changes: %w", err)
	}
	for rows.Next() {
		var entry int64
		var lb string
		if err := rows.Scan(&entry, &lb); err != nil {
			rows.Close()
			return c, fmt.Errorf("log changes: %w", err)
		}
		c.Changes[lb] = entry
	}
	if err := rows.Close(); err != nil {
		return c, fmt.Errorf("log changes: %w", err)
	}
	if t.s.numbered {
		if _, err := t.tx.ExecContext(t.ctx, "UPDATE log_head SET head = ? WHERE id = 1", head+int64(len(ids))); err != nil {
			return c, fmt.Errorf("advance log head: %w", err)
		}
	}
	t.s.noteChanges(c.Changes)
	for lb, owner := range t.pend {
		if _, err := t.tx.ExecContext(t.ctx, t.q("INSERT INTO pending_changes (loadbalancer_id, owner, change) VALUES (?, ?, ?) "+
			"ON CONFLICT (loadbalancer_id) DO UPDATE SET owner = excluded.owner, change = excluded.change"), lb, owner, c.Changes[lb]); err != nil {
			return c, fmt.Errorf("record pending change of %s: %w", lb, err)
		}
	}
	return c, nil
}

// View runs fn in a read-only transaction on a consistent snapshot.
func (s *SQL) View(ctx context.Context, fn func(tx ReadTx) error) error {
	opts := &sql.TxOptions{ReadOnly: true}
	if s.eng.name() == "postgres" {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.reader.BeginTx(ctx, opts)
	if err != nil {
		return unavailable(fmt.Errorf("begin read: %w", err))
	}
	defer tx.Rollback()
	return unavailable(fn(&sqlTx{s: s, tx: tx, ctx: ctx}))
}

var _ Store = (*SQL)(nil)
