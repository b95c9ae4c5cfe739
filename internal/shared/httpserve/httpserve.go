// Package httpserve is how every flowlb daemon serves HTTP: with timeouts
// on every phase of a request and a cap on connections below the process's
// descriptor limit, so that slow, idle or plentiful clients cannot keep
// others out. At the cap a new connection takes the place of the one idle
// the longest (or of one that has not sent its request line for a
// second); only when every connection is busy is the newcomer closed.
package httpserve

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// Limits bound one server. Zero fields take the defaults.
type Limits struct {
	// ReadHeader bounds the wait for a request's headers (default 10 s).
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included (default 60 s).
	Read time.Duration
	// Write bounds writing a response (default 60 s).
	Write time.Duration
	// Idle bounds a keep-alive connection's wait for the next request
	// (default 60 s).
	Idle time.Duration
	// MaxHeaderBytes bounds a request's headers (default 64 KiB).
	MaxHeaderBytes int
	// MaxConns caps open connections (default: the descriptor limit less
	// a reserve for the database, the agents and the logs).
	MaxConns int
}

// descriptorReserve is kept free of client connections.
const descriptorReserve = 256

// withDefaults fills in the zero fields.
func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&l.ReadHeader, 10*time.Second)
	def(&l.Read, 60*time.Second)
	def(&l.Write, 60*time.Second)
	def(&l.Idle, 60*time.Second)
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxConns == 0 {
		l.MaxConns = connsForDescriptors(descriptorLimit())
	}
	return l
}

// connsForDescriptors is the default cap for a descriptor limit.
func connsForDescriptors(limit uint64) int {
	if limit <= descriptorReserve+64 {
		return 64
	}
	return int(min(limit-descriptorReserve, 1<<20))
}

func descriptorLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 1024
	}
	return r.Cur
}

// Serve prepares srv (its handler set) with the limits and returns the
// listener to serve it on: ln, capped. For TLS, serve srv.Serve on
// tls.NewListener of the returned listener (not ServeTLS on it).
func Serve(srv *http.Server, ln net.Listener, l Limits, log *slog.Logger) net.Listener {
	l = l.withDefaults()
	srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = l.ReadHeader, l.Read, l.Write, l.Idle
	srv.MaxHeaderBytes = l.MaxHeaderBytes
	c := &capped{Listener: ln, max: l.MaxConns, conns: map[net.Conn]*connState{}, log: log}
	prev := srv.ConnState
	srv.ConnState = func(conn net.Conn, state http.ConnState) {
		c.track(conn, state)
		if prev != nil {
			prev(conn, state)
		}
	}
	return c
}

// connState is what the cap knows of a connection.
type connState struct {
	state http.ConnState
	since time.Time
}

// capped is a listener that keeps at most max connections open.
type capped struct {
	net.Listener
	max int
	log *slog.Logger

	mu       sync.Mutex
	conns    map[net.Conn]*connState
	lastWarn time.Time
}

// newGrace is how long a connection may sit without a request line before
// it counts as evictable at the cap.
const newGrace = time.Second

// Accept takes the next connection, making room for it at the cap.
func (c *capped) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c.admit(conn, time.Now()) {
			return conn, nil
		}
		conn.Close()
	}
}

// admit registers conn, closing an evictable connection if the cap is
// reached; false if every connection is busy.
func (c *capped) admit(conn net.Conn, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.conns) >= c.max {
		victim := c.evictable(now)
		if victim == nil {
			c.warn(now, "connection cap reached with every connection busy; refusing a new one", "cap", c.max)
			return false
		}
		delete(c.conns, victim)
		victim.Close()
		c.warn(now, "connection cap reached; closed the connection idle the longest", "cap", c.max)
	}
	c.conns[conn] = &connState{state: http.StateNew, since: now}
	return true
}

// evictable is the connection idle the longest, or one that has sent
// nothing for newGrace; nil if none. Called with c.mu held.
func (c *capped) evictable(now time.Time) net.Conn {
	var victim net.Conn
	var since time.Time
	for conn, s := range c.conns {
		ok := s.state == http.StateIdle || (s.state == http.StateNew && now.Sub(s.since) >= newGrace)
		if ok && (victim == nil || s.since.Before(since)) {
			victim, since = conn, s.since
		}
	}
	return victim
}

// track follows the server's view of each connection.
func (c *capped) track(conn net.Conn, state http.ConnState) {
	// Under TLS the server sees the TLS connection around the one
	// accepted here.
	if inner, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = inner.NetConn()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		delete(c.conns, conn)
	case http.StateNew:
		// Registered at Accept.
	default:
		if s, ok := c.conns[conn]; ok {
			s.state, s.since = state, time.Now()
		}
	}
}

// warn logs at most once a second. Called with c.mu held.
func (c *capped) warn(now time.Time, msg string, args ...any) {
	if c.log == nil || now.Sub(c.lastWarn) < time.Second {
		return
	}
	c.lastWarn = now
	c.log.Warn(msg, args...)
}
