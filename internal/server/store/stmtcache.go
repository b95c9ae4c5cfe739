package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
)

// SQLite connections that keep their prepared statements. modernc's driver
// parses every statement of every Exec and Query anew, and parsing was
// about a sixth of the CPU of a load balancer create. database/sql cannot
// cache them for us: db.Prepare needs a free connection, and the writer
// pool's only one is the transaction's own. So each connection keeps a
// statement per query text, handed out while no one else uses it.

// maxCachedStmts bounds the statements one connection keeps; queries with
// a variable number of arguments (IN lists, multi-row inserts) are many
// texts, each rarely repeated.
const maxCachedStmts = 256

// openCachingSQLite opens a database of modernc's SQLite driver whose
// connections cache their statements.
func openCachingSQLite(dsn string) (*sql.DB, error) {
	probe, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	d := probe.Driver()
	probe.Close()
	return sql.OpenDB(stmtCachingConnector{d: d, dsn: dsn}), nil
}

type stmtCachingConnector struct {
	d   driver.Driver
	dsn string
}

func (c stmtCachingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.d.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return newCachingConn(conn)
}

func (c stmtCachingConnector) Driver() driver.Driver { return c.d }

// cachingConn is a driver connection without ExecerContext and
// QueryerContext, so database/sql prepares every query through
// PrepareContext, which answers from the cache. database/sql uses a
// connection from one goroutine at a time, so the cache needs no lock.
type cachingConn struct {
	conn  driver.Conn
	begin driver.ConnBeginTx
	prep  driver.ConnPrepareContext
	stmts map[string]*cachedStmt
}

func newCachingConn(conn driver.Conn) (*cachingConn, error) {
	begin, ok1 := conn.(driver.ConnBeginTx)
	prep, ok2 := conn.(driver.ConnPrepareContext)
	if !ok1 || !ok2 {
		conn.Close()
		return nil, errors.New("sqlite driver lacks BeginTx or PrepareContext")
	}
	return &cachingConn{conn: conn, begin: begin, prep: prep, stmts: map[string]*cachedStmt{}}, nil
}

func (c *cachingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if s, ok := c.stmts[query]; ok {
		if s.inUse {
			// The same query again while its rows are still open: a
			// statement of its own, finalized when closed.
			return c.prep.PrepareContext(ctx, query)
		}
		s.inUse = true
		return s, nil
	}
	st, err := c.prep.PrepareContext(ctx, query)
	if err != nil || len(c.stmts) >= maxCachedStmts {
		return st, err
	}
	_, execs := st.(driver.StmtExecContext)
	_, queries := st.(driver.StmtQueryContext)
	if !execs || !queries {
		return st, nil
	}
	s := &cachedStmt{Stmt: st, inUse: true}
	c.stmts[query] = s
	return s, nil
}

func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.begin.BeginTx(ctx, opts)
}

//lint:ignore SA1019 driver.Conn requires Begin; database/sql calls BeginTx.
func (c *cachingConn) Begin() (driver.Tx, error) { return c.conn.Begin() }

func (c *cachingConn) Close() error {
	var errs []error
	for q, s := range c.stmts {
		errs = append(errs, s.Stmt.Close())
		delete(c.stmts, q)
	}
	return errors.Join(append(errs, c.conn.Close())...)
}

// ResetSession and IsValid pass on what the pool asks the driver.
func (c *cachingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *cachingConn) IsValid() bool {
	if v, ok := c.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *cachingConn) Ping(ctx context.Context) error {
	if p, ok := c.conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// cachedStmt is a connection's statement for one query text; Close hands
// it back instead of finalizing it.
type cachedStmt struct {
	driver.Stmt
	inUse bool
}

func (s *cachedStmt) Close() error {
	s.inUse = false
	return nil
}

func (s *cachedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *cachedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}
