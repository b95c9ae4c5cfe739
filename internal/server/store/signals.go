package store

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// signals carries news between the parts of a replica (at once) and, on
// PostgreSQL, between replicas (LISTEN/NOTIFY on one connection of its
// own). A signal only says "look again": every reader still reads the
// database, and polls besides, so a lost notification costs latency,
// never correctness.
type signals struct {
	s *SQL

	mu     sync.Mutex
	subs   map[Topic][]chan struct{}
	sends  map[Topic]*coalescer
	listen sync.Once
	stop   context.CancelFunc
	done   chan struct{}
}

// coalescer keeps at most one pg_notify of a topic in flight, and one
// more queued behind it: news is news, however many writers have it.
type coalescer struct {
	inflight, again bool
}

var topics = []Topic{TopicPending, TopicLog, TopicAgents}

func newSignals(s *SQL) *signals {
	return &signals{s: s, subs: map[Topic][]chan struct{}{}, sends: map[Topic]*coalescer{}}
}

// Watch subscribes to a topic.
func (s *SQL) Watch(topic Topic) <-chan struct{} {
	g := s.signals
	ch := make(chan struct{}, 1)
	g.mu.Lock()
	g.subs[topic] = append(g.subs[topic], ch)
	g.mu.Unlock()
	if s.eng.name() == "postgres" {
		g.listen.Do(g.startListener)
	}
	return ch
}

// Notify tells this replica's watchers at once and, on PostgreSQL, the
// other replicas.
func (s *SQL) Notify(_ context.Context, topic Topic) {
	g := s.signals
	g.broadcast(topic)
	if s.eng.name() != "postgres" {
		return
	}
	g.mu.Lock()
	c := g.sends[topic]
	if c == nil {
		c = &coalescer{}
		g.sends[topic] = c
	}
	if c.inflight {
		c.again = true
		g.mu.Unlock()
		return
	}
	c.inflight = true
	g.mu.Unlock()
	go g.send(topic, c)
}

// send runs pg_notify for topic until no more news is queued. A failure
// is not retried: the readers' polling covers it.
func (g *signals) send(topic Topic, c *coalescer) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := g.s.writer.ExecContext(ctx, "SELECT pg_notify($1, '')", string(topic))
		cancel()
		if err != nil {
			g.s.log.Debug("pg_notify", "topic", topic, "err", err)
		}
		g.mu.Lock()
		if !c.again {
			c.inflight = false
			g.mu.Unlock()
			return
		}
		c.again = false
		g.mu.Unlock()
	}
}

func (g *signals) broadcast(topic Topic) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ch := range g.subs[topic] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// startListener LISTENs on every topic on a connection of its own,
// reconnecting with backoff; after each (re)connection every topic is
// signalled, since news may have been missed meanwhile.
func (g *signals) startListener() {
	ctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.stop, g.done = cancel, make(chan struct{})
	g.mu.Unlock()
	go func() {
		defer close(g.done)
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := g.listenOnce(ctx)
			if ctx.Err() != nil {
				return
			}
			g.s.log.Warn("database notifications lost; reconnecting", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}()
}

func (g *signals) listenOnce(ctx context.Context) error {
	conn, err := g.s.writer.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		for _, t := range topics {
			if _, err := pc.Exec(ctx, "LISTEN "+string(t)); err != nil {
				return err
			}
		}
		for _, t := range topics {
			g.broadcast(t)
		}
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			g.broadcast(Topic(n.Channel))
		}
	})
}

func (g *signals) close() {
	g.mu.Lock()
	stop, done := g.stop, g.done
	g.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}
