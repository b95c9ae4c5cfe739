package fanout

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// Two replicas folding the changes they read from one store into what
// they hold agree, after every step of a random run, with a full read:
// the other live replicas' agents and which of them take no probes, the
// lowest revision, whether the nodes (or those that take probes)
// changed, which nodes left, and the nodes that take probes. The run has
// agents recording and leaving on three replicas (one of them the
// reader's own), some of them taking no probes, nodes moving between
// replicas at lower revisions (a reconnect), nodes that start or stop
// taking probes and nothing else, a replica retired and back, and agents
// streaming to the reader itself, some without probes, some flipping.
func TestFoldFollowsTheStore(t *testing.T) {
	ctx := context.Background()
	engines := append([]storetest.Engine{{Name: "memstore", Store: memstore.New()}}, storetest.Engines(t)...)
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			replicas := []string{"r1", "r2", "r3"}
			for _, r := range replicas {
				if err := s.Renew(ctx, store.Replica{ID: r}, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			type reader struct {
				a     *acks
				since int64
				local map[string]*agent
			}
			readers := []*reader{{a: newAcks("r1", time.Second), local: map[string]*agent{}}, {a: newAcks("r2", time.Second), local: map[string]*agent{}}}
			rng := rand.New(rand.NewPCG(3, 4))
			steps := 400
			if e.Name != "memstore" {
				steps = 150
			}
			full, mixed := 0, 0
			for step := range steps {
				switch op := rng.IntN(12); {
				case op < 5:
					r := replicas[rng.IntN(3)]
					var acks []store.AgentAck
					for range rng.IntN(4) {
						acks = append(acks, store.AgentAck{Node: fmt.Sprint("n", rng.IntN(12)), Revision: rng.Int64N(20), NoProbes: rng.IntN(4) == 0})
					}
					var gone []string
					for range rng.IntN(3) {
						gone = append(gone, fmt.Sprint("n", rng.IntN(12)))
					}
					if err := s.RecordAgents(ctx, r, dedup(acks), gone); err != nil {
						t.Fatal(err)
					}
				case op == 5:
					if err := s.Retire(ctx, "r3"); err != nil {
						t.Fatal(err)
					}
				case op == 6:
					if err := s.Renew(ctx, store.Replica{ID: "r3"}, time.Hour); err != nil {
						t.Fatal(err)
					}
				case op == 7:
					rd := readers[rng.IntN(2)]
					n := fmt.Sprint("n", rng.IntN(12))
					if l, ok := rd.local[n]; ok {
						rd.a.part(l)
						delete(rd.local, n)
					} else {
						l := &agent{node: n, noProbes: rng.IntN(3) == 0}
						rd.local[n] = l
						rd.a.join(l, rng.Int64N(20))
					}
				case op == 8:
					// A live agent's row flips its flag and nothing else.
					all, err := s.Agents(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if len(all) > 0 {
						c := all[rng.IntN(len(all))]
						c.NoProbes = !c.NoProbes
						if err := s.RecordAgents(ctx, c.Replica, []store.AgentAck{c}, nil); err != nil {
							t.Fatal(err)
						}
					}
				case op == 9:
					// A streaming agent reconnects with the other flag: the
					// new stream comes before the old one goes.
					rd := readers[rng.IntN(2)]
					if len(rd.local) > 0 {
						ns := slices.Sorted(maps.Keys(rd.local))
						n := ns[rng.IntN(len(ns))]
						l := rd.local[n]
						nl := &agent{node: n, noProbes: !l.noProbes}
						rd.a.join(nl, l.acked)
						rd.a.part(l)
						rd.local[n] = nl
					}
				}
				for i, rd := range readers {
					since := rd.since
					if rng.IntN(20) == 0 {
						since = 0
					}
					before := maps.Clone(rd.a.remote)
					beforeNP := maps.Clone(rd.a.remoteNoProbes)
					d, err := s.AgentsSince(ctx, since)
					if err != nil {
						t.Fatal(err)
					}
					if d.Full {
						full++
					}
					rd.since = d.Seq
					ch := rd.a.readDone(rd.a.startRead(), d)

					// What a full read gives.
					all, err := s.Agents(ctx)
					if err != nil {
						t.Fatal(err)
					}
					want, wantNP := map[string]int64{}, map[string]bool{}
					for _, c := range all {
						if c.Replica != rd.a.replica {
							want[c.Node] = c.Revision
							if c.NoProbes {
								wantNP[c.Node] = true
							}
						}
					}
					if !maps.Equal(rd.a.remote, want) {
						t.Fatalf("step %d, reader %d: holds %v, a full read %v", step, i, rd.a.remote, want)
					}
					if !maps.Equal(rd.a.remoteNoProbes, wantNP) {
						t.Fatalf("step %d, reader %d: holds %v without probes, a full read %v", step, i, rd.a.remoteNoProbes, wantNP)
					}
					nodes := !slices.Equal(slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(want))) || !maps.Equal(beforeNP, wantNP)
					if ch.nodes != nodes {
						t.Fatalf("step %d, reader %d: nodes changed %v, from %v (no probes %v) to %v (%v)", step, i, ch.nodes, before, beforeNP, want, wantNP)
					}
					// The nodes that take probes: a streaming node as its
					// agent here says, any other as its row.
					var probers []string
					for n := range rd.a.revisions() {
						if l, ok := rd.local[n]; ok && l.noProbes || !ok && wantNP[n] {
							continue
						}
						probers = append(probers, n)
					}
					slices.Sort(probers)
					if got := rd.a.probers(); !slices.Equal(got, probers) {
						t.Fatalf("step %d, reader %d: probers %v, from scratch %v", step, i, got, probers)
					}
					if len(probers) > 0 && len(probers) < len(rd.a.revisions()) {
						mixed++
					}
					for _, n := range ch.left {
						if _, ok := want[n]; ok {
							t.Fatalf("step %d, reader %d: %s left, still there", step, i, n)
						}
					}
					for n := range before {
						if _, ok := want[n]; !ok && !slices.Contains(ch.left, n) {
							t.Fatalf("step %d, reader %d: %s not said to have left", step, i, n)
						}
					}
					scratch, scratchAny := int64(0), false
					for _, r := range rd.a.revisions() {
						if !scratchAny || r < scratch {
							scratch, scratchAny = r, true
						}
					}
					rd.a.mu.Lock()
					low, anyAgent := rd.a.lowest()
					rd.a.mu.Unlock()
					if low != scratch || anyAgent != scratchAny {
						t.Fatalf("step %d, reader %d: lowest %d %v, counted from scratch %d %v", step, i, low, anyAgent, scratch, scratchAny)
					}
				}
			}
			if full > steps/4 {
				t.Errorf("%d full reads of %d", full, 2*steps)
			}
			if mixed < steps/4 {
				t.Errorf("%d reads of %d with nodes both taking probes and not", mixed, 2*steps)
			}
		})
	}
}

// dedup keeps one ack per node (the last), as a replica's flush has.
func dedup(acks []store.AgentAck) []store.AgentAck {
	seen := map[string]int{}
	var out []store.AgentAck
	for _, a := range acks {
		if i, ok := seen[a.Node]; ok {
			out[i] = a
			continue
		}
		seen[a.Node] = len(out)
		out = append(out, a)
	}
	return out
}

// A node that leaves leaves every replica's view, and one that comes
// back on another replica at an older revision holds the changes back
// again: the delta a replica folds is the same as a full read.
func TestFoldRemovedAndMovedBack(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	for _, r := range []string{"r1", "r2", "r3"} {
		if err := s.Renew(ctx, store.Replica{ID: r}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	a, b := newAcks("r1", time.Hour), newAcks("r2", time.Hour)
	var sinceA, sinceB int64
	read := func() (clusterChange, clusterChange) {
		t.Helper()
		da, err := s.AgentsSince(ctx, sinceA)
		if err != nil {
			t.Fatal(err)
		}
		db, err := s.AgentsSince(ctx, sinceB)
		if err != nil {
			t.Fatal(err)
		}
		sinceA, sinceB = da.Seq, db.Seq
		return a.readDone(a.startRead(), da), b.readDone(b.startRead(), db)
	}
	if err := s.RecordAgents(ctx, "r3", []store.AgentAck{{Node: "x", Revision: 9}, {Node: "y", Revision: 9}}, nil); err != nil {
		t.Fatal(err)
	}
	read()
	if err := s.RecordAgents(ctx, "r3", nil, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	ca, cb := read()
	if ca.all != nil || cb.all != nil {
		t.Fatal("a read of the changes was a full read")
	}
	if fmt.Sprint(ca.left, cb.left) != "[x] [x]" || !ca.nodes || !cb.nodes {
		t.Fatalf("x left: %+v %+v", ca, cb)
	}
	if fmt.Sprint(a.probers(), b.probers()) != "[y] [y]" {
		t.Fatalf("nodes %v %v", a.probers(), b.probers())
	}
	// y reconnects to r2 from an older state: r1 waits for it at 4.
	if err := s.RecordAgents(ctx, "r2", []store.AgentAck{{Node: "y", Revision: 4}}, nil); err != nil {
		t.Fatal(err)
	}
	ca, _ = read()
	a.mu.Lock()
	low, _ := a.lowest()
	a.mu.Unlock()
	if low != 4 || ca.nodes || fmt.Sprint(ca.acked) != "[{y r2 4 false}]" {
		t.Fatalf("after y moved back: lowest %d, change %+v", low, ca)
	}
	// r2 holds y as its own: not among the others' agents.
	if len(b.remote) != 0 {
		t.Fatalf("r2 holds its own agent as another's: %v", b.remote)
	}
}
