package fanout

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// The lowest acknowledged revision kept as acks come agrees, after every
// step of a long random run, with the one counted from scratch: agents
// joining and leaving this replica (a node twice, as when it reconnects
// before its old stream is gone), acks, and the other replicas' agents
// read from the store (a node on both sides, as when it moved).
func TestLowestFollowsEveryStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 14))
	a := newAcks("me", time.Second)
	var streams []*agent
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op == 0 && len(streams) < 12:
			l := &agent{node: fmt.Sprint("n", rng.IntN(8))}
			streams = append(streams, l)
			a.join(l, rng.Int64N(5))
		case op == 1 && len(streams) > 0:
			i := rng.IntN(len(streams))
			a.part(streams[i])
			streams = append(streams[:i], streams[i+1:]...)
		case op == 2:
			var all []store.AgentAck
			for n := range rng.IntN(6) {
				all = append(all, store.AgentAck{Node: fmt.Sprint("n", 4+n), Replica: "other", Revision: rng.Int64N(40)})
			}
			a.readDone(a.startRead(), store.AgentChanges{Full: true, Acks: all, Live: []string{"other"}})
		case len(streams) > 0:
			l := streams[rng.IntN(len(streams))]
			a.raise(l, l.acked+rng.Int64N(3))
		}
		want, wantAny := int64(0), false
		for _, r := range a.revisions() {
			if !wantAny || r < want {
				want, wantAny = r, true
			}
		}
		a.mu.Lock()
		got, any := a.lowest()
		a.mu.Unlock()
		if got != want || any != wantAny {
			t.Fatalf("step %d: lowest %d %v, counted from scratch %d %v", step, got, any, want, wantAny)
		}
	}
}

// A node's stream that leaves while another of its streams stays is still
// an agent of this replica: the store does not forget it.
func TestPartKeepsNodeWithAnotherStream(t *testing.T) {
	a := newAcks("me", time.Second)
	old, fresh := &agent{node: "n1"}, &agent{node: "n1"}
	a.join(old, 0)
	a.join(fresh, 0)
	if a.part(old) || a.gone["n1"] {
		t.Fatal("n1 left though a stream of it stays")
	}
	if !a.part(fresh) || !a.gone["n1"] {
		t.Fatal("n1's last stream left and the store is not told")
	}
}

// settledWith waits for a waiter's callback.
func settledWith(t *testing.T, done <-chan []string) []string {
	t.Helper()
	select {
	case behind := <-done:
		return behind
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never settled")
		return nil
	}
}

func newWaiter(change, rev int64) (*waiter, chan []string) {
	done := make(chan []string, 1)
	return &waiter{lb: "lb", change: change, rev: rev, start: time.Now(), done: func(b []string) { done <- b }}, done
}

// A waiter settles once its revision is known, the table holds it, the
// cluster's agents were read after it came and every live agent acked
// it; or when its time is up, naming the nodes behind.
func TestWaitersSettle(t *testing.T) {
	a := newAcks("me", time.Hour)
	n1, n2 := &agent{node: "n1"}, &agent{node: "n2"}
	a.join(n1, 0)
	a.join(n2, 0)
	var settled []int64
	a.settled = func(w *waiter, _ time.Time) { settled = append(settled, w.change) }
	w, done := newWaiter(7, 0)
	a.add(w)
	steps := []struct {
		name string
		do   func()
	}{
		{"its revision is known", func() { a.tableAt(3, []store.LogEntry{{ID: 7, Revision: 3}}) }},
		{"the agents were read", func() { a.readDone(a.startRead(), store.AgentChanges{Full: true}) }},
		{"n1 acked", func() { a.raise(n1, 3) }},
	}
	for _, s := range steps {
		s.do()
		select {
		case <-done:
			t.Fatalf("settled when %s only", s.name)
		default:
		}
	}
	a.raise(n2, 4)
	if behind := settledWith(t, done); len(behind) != 0 || a.pending() != 0 || len(settled) != 1 {
		t.Fatalf("behind %v, %d pending, settled %v", behind, a.pending(), settled)
	}

	// Past the timeout, it settles with the nodes behind.
	a.timeout = 0
	w, done = newWaiter(8, 5)
	a.add(w)
	if behind := settledWith(t, done); len(behind) != 2 {
		t.Fatalf("timed out with %v behind", behind)
	}
	// With no agent anywhere a change settles once the table holds it.
	b := newAcks("me", time.Hour)
	w, done = newWaiter(9, 2)
	b.add(w)
	b.readDone(b.startRead(), store.AgentChanges{Full: true})
	select {
	case <-done:
		t.Fatal("settled before the table held it")
	default:
	}
	b.tableAt(2, nil)
	settledWith(t, done)
}

// A replica alone on its database (SQLite) settles a waiter on its own
// agents' acks, with no read of the cluster's agents after it came, and
// asks for none; a replica that shares the database waits for one.
func TestWaitersSettleAloneWithoutARead(t *testing.T) {
	for _, alone := range []bool{true, false} {
		a := newAcks("me", time.Hour)
		a.alone = alone
		n1 := &agent{node: "n1"}
		a.join(n1, 0)
		w, done := newWaiter(7, 0)
		a.add(w)
		select {
		case <-a.readNow:
			if alone {
				t.Error("alone: a waiter asked for a read of the cluster's agents")
			}
		default:
			if !alone {
				t.Error("shared: a waiter asked for no read of the cluster's agents")
			}
		}
		a.tableAt(3, []store.LogEntry{{ID: 7, Revision: 3}})
		a.raise(n1, 3)
		if alone {
			settledWith(t, done)
			continue
		}
		select {
		case <-done:
			t.Fatal("shared: settled before the cluster's agents were read")
		case <-time.After(100 * time.Millisecond):
		}
		a.readDone(a.startRead(), store.AgentChanges{Full: true})
		settledWith(t, done)
	}
}
