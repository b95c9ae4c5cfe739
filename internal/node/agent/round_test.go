package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// samePortListeners listens on 127.0.0.1 and 127.0.0.2 at one port, as
// two replicas behind one name would.
func samePortListeners(t *testing.T) (net.Listener, net.Listener, string) {
	for range 20 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(a.Addr().(*net.TCPAddr).Port)
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", port))
		if err == nil {
			return a, b, port
		}
		a.Close()
	}
	t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil, ""
}

// TestFailover: an agent given a name that resolves to two replicas is,
// within a second of losing the one it streams from, on the other, whose
// Hello carries the last acknowledged revision and epoch; the other then
// sends deltas, not a snapshot.
func TestFailover(t *testing.T) {
	log := newChangeLog("db-1")
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1")))
	log.publish(wireLB("b", lbSvc("b", "198.19.0.2")))
	lnA, lnB, port := samePortListeners(t)
	replicas := []*replica{startReplica(t, log, lnA), startReplica(t, log, lnB)}
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host != "replicas.test" {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []string{"127.0.0.1", "127.0.0.2"}, nil
	}
	dp := &recorder{}
	a := New(Config{Servers: []string{"replicas.test:" + port}, LookupHost: lookup, Node: "n1", NoHealth: true,
		Metrics: prometheus.NewRegistry()}, dp, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	atRevision := func(rev int64) func() (bool, string) {
		return func() (bool, string) {
			epoch, got := a.Revision()
			return epoch == "db-1" && got == rev, fmt.Sprintf("epoch %q revision %d", epoch, got)
		}
	}
	testutil.Eventually(t, 5*time.Second, "first revisions programmed", atRevision(2))
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1", "198.18.17.2")))
	testutil.Eventually(t, 5*time.Second, "revision 3 programmed", atRevision(3))

	first := a.Server()
	i := slices.IndexFunc(replicas, func(r *replica) bool { return r.addr == first })
	if i < 0 {
		t.Fatalf("agent on %q, not on a replica", first)
	}
	lost, other := replicas[i], replicas[1-i]
	start := time.Now()
	lost.kill()
	testutil.Eventually(t, time.Second, "agent on the other replica", func() (bool, string) {
		return a.Server() == other.addr, "on " + a.Server()
	})
	t.Logf("failover from %s to %s in %s", lost.addr, other.addr, time.Since(start))
	testutil.Eventually(t, time.Second, "hello received", func() (bool, string) { return other.lastHello() != nil, "" })
	if h := other.lastHello(); h.GetNode() != "n1" || h.GetLastRevision() != 3 || h.GetEpoch() != "db-1" {
		t.Errorf("hello %v: want node n1 at revision 3 of db-1", h)
	}

	log.publish(wireLB("a"), wireLB("c", lbSvc("c", "198.19.0.3")))
	testutil.Eventually(t, 5*time.Second, "revision 4 programmed", atRevision(4))
	syncs, applies, vips := dp.calls()
	if syncs != 1 || applies < 2 || !slices.Equal(vips, []string{"198.19.0.2/b", "198.19.0.3/c"}) {
		t.Errorf("%d syncs, %d applies, table %v: want one snapshot, then deltas to b and c", syncs, applies, vips)
	}
	if n := promtest.ToFloat64(a.m.switches); n != 1 {
		t.Errorf("%v server switches, want 1", n)
	}
	if n := promtest.CollectAndCount(a.m.server); n != 1 || promtest.ToFloat64(a.m.server.WithLabelValues(other.addr)) != 1 {
		t.Errorf("server info: %d series, want one for %s", n, other.addr)
	}
}

// TestSessionGivesUpOnASilentServer: a server that takes the connection
// and never answers costs the handshake timeout, not gRPC's 20 s.
func TestSessionGivesUpOnASilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	a := New(Config{NoHealth: true}, &recorder{}, quiet)
	start := time.Now()
	useful, err := a.session(context.Background(), ln.Addr().String())
	if useful || err == nil || time.Since(start) > 3*HandshakeTimeout {
		t.Errorf("useful %v, err %v after %s: want a failure after about %s", useful, err, time.Since(start), HandshakeTimeout)
	}
}

// TestSlowHandshakeIsWaitedFor: a server whose handshakes take longer
// than HandshakeTimeout, busy but alive (as a replica is while the
// agents of one that died all move to it at once), is waited for longer
// at the next attempt, and the agent subscribes; with a fixed wait it
// gave up on every handshake under way and never did.
func TestSlowHandshakeIsWaitedFor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := newChangeLog("db-1")
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1")))
	slow := startReplica(t, log, ln)
	// Each connection is ready only this long after it was asked for.
	delay := HandshakeTimeout + 300*time.Millisecond
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	a := New(Config{Server: slow.addr, Node: "n1", NoHealth: true, Dialer: dial}, &recorder{}, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 5*time.Second, "agent subscribed to the slow server", func() (bool, string) {
		_, rev := a.Revision()
		return a.Server() == slow.addr && rev == 1, fmt.Sprintf("on %q at %d", a.Server(), rev)
	})
}

// TestRoundSkipsDeadServers: a round passes over a refusing address to
// a live one.
func TestRoundSkipsDeadServers(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := newChangeLog("db-1")
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1")))
	live := startReplica(t, log, ln)
	a := New(Config{Servers: []string{deadAddr}, Server: live.addr, Node: "n1", NoHealth: true}, &recorder{}, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 2*time.Second, "agent on the live server", func() (bool, string) {
		_, rev := a.Revision()
		return a.Server() == live.addr && rev == 1, fmt.Sprintf("on %q at %d", a.Server(), rev)
	})
}

func TestResolve(t *testing.T) {
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host == "replicas.test" {
			return []string{"198.18.0.2", "2001:2::2"}, nil
		}
		return nil, errors.New("no such host")
	}
	for _, tc := range []struct {
		entry string
		want  []string
		err   bool
	}{
		{"198.18.0.1:9877", []string{"198.18.0.1:9877"}, false},
		{"[2001:2::1]:9877", []string{"[2001:2::1]:9877"}, false},
		{"replicas.test:9877", []string{"198.18.0.2:9877", "[2001:2::2]:9877"}, false},
		{"unknown.test:9877", nil, true},
		{"replicas.test", nil, true},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			got, err := resolve(context.Background(), tc.entry, lookup)
			if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
				t.Errorf("got %q, %v; want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestOrder(t *testing.T) {
	keep := func(int, func(i, j int)) {}
	reverse := func(n int, swap func(i, j int)) {
		for i := range n / 2 {
			swap(i, n-1-i)
		}
	}
	for _, tc := range []struct {
		name    string
		addrs   []string
		avoid   string
		shuffle func(int, func(i, j int))
		want    []string
	}{
		{"duplicates go", []string{"b:1", "a:1", "b:1"}, "", keep, []string{"a:1", "b:1"}},
		{"the shuffle orders", []string{"a:1", "b:1", "c:1"}, "", reverse, []string{"c:1", "b:1", "a:1"}},
		{"the server just lost goes last", []string{"a:1", "b:1", "c:1"}, "a:1", keep, []string{"b:1", "c:1", "a:1"}},
		{"a lost server no longer listed stays out", []string{"a:1", "b:1"}, "z:1", keep, []string{"a:1", "b:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := order(tc.addrs, tc.avoid, tc.shuffle); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCandidatesKeepLastResolution: a name that stops resolving keeps
// the addresses it had; every entry (Servers and Server) is used.
func TestCandidatesKeepLastResolution(t *testing.T) {
	fail := false
	lookup := func(context.Context, string) ([]string, error) {
		if fail {
			return nil, errors.New("resolver down")
		}
		return []string{"198.18.0.2"}, nil
	}
	a := New(Config{Servers: []string{"replicas.test:9877"}, Server: "198.18.0.1:9877", LookupHost: lookup, NoHealth: true}, nil, quiet)
	want := []string{"198.18.0.1:9877", "198.18.0.2:9877"}
	for _, f := range []bool{false, true} {
		fail = f
		got := a.candidates(context.Background(), "")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("lookup failing %v: %q, want %q", f, got, want)
		}
	}
}

func TestParseServers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   []string
		err    bool
	}{
		{"one", []string{"127.0.0.1:9877"}, []string{"127.0.0.1:9877"}, false},
		{"a list, repeated, with spaces and empties", []string{"a.test:9877, b.test:9877,", "[2001:2::1]:9877"},
			[]string{"a.test:9877", "b.test:9877", "[2001:2::1]:9877"}, false},
		{"no port", []string{"a.test"}, nil, true},
		{"no host", []string{":9877"}, nil, true},
		{"nothing", []string{" , "}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseServers(tc.values)
			if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
				t.Errorf("got %q, %v; want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}
