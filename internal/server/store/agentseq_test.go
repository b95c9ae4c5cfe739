package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// TestAgentsSince: a read from a sequence value returns only the rows
// written after it, the agents that left as gone (not those that moved
// on to another replica), a revision that moved back, a retired
// replica's agents, each row's no_probes (a flip of it alone is a
// change), and the live replicas; from 0 it reads every row.
func TestAgentsSince(t *testing.T) {
	ctx := context.Background()
	engines := append([]storetest.Engine{{Name: "memstore", Store: memstore.New()}}, storetest.Engines(t)...)
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			record := func(replica string, acks []store.AgentAck, gone []string) {
				t.Helper()
				if err := s.RecordAgents(ctx, replica, acks, gone); err != nil {
					t.Fatal(err)
				}
			}
			var since int64
			read := func(want string) store.AgentChanges {
				t.Helper()
				d, err := s.AgentsSince(ctx, since)
				if err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprintf("full=%v acks=%v gone=%v live=%v", d.Full, d.Acks, d.Gone, d.Live); got != want {
					t.Errorf("since %d: %s, want %s", since, got, want)
				}
				if d.Seq < since {
					t.Errorf("since %d: seq %d went back", since, d.Seq)
				}
				since = d.Seq
				return d
			}
			for _, r := range []string{"a", "b"} {
				if err := s.Renew(ctx, store.Replica{ID: r}, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			read("full=true acks=[] gone=[] live=[a b]")
			record("a", []store.AgentAck{{Node: "n1", Revision: 5}, {Node: "n2", Revision: 6}}, nil)
			// Nothing was ever written before: still from 0, a full read.
			read("full=true acks=[{n1 a 5 false} {n2 a 6 false}] gone=[] live=[a b]")
			read("full=false acks=[] gone=[] live=[a b]")
			record("b", []store.AgentAck{{Node: "n3", Revision: 4, NoProbes: true}, {Node: "n2", Revision: 7}}, nil)
			read("full=false acks=[{n2 b 7 false} {n3 b 4 true}] gone=[] live=[a b]")
			// n2 moved to b: a forgetting it changes nothing.
			record("a", nil, []string{"n2"})
			read("full=false acks=[] gone=[] live=[a b]")
			record("a", nil, []string{"n1"})
			read("full=false acks=[] gone=[{n1 a 5 false}] live=[a b]")
			// n1 back, on b, at an older revision.
			record("b", []store.AgentAck{{Node: "n1", Revision: 3}}, nil)
			last := read("full=false acks=[{n1 b 3 false}] gone=[] live=[a b]")
			since = 0
			if full := read("full=true acks=[{n1 b 3 false} {n2 b 7 false} {n3 b 4 true}] gone=[] live=[a b]"); full.Seq != last.Seq {
				t.Errorf("a full read reaches %d, the last delta %d", full.Seq, last.Seq)
			}
			if err := s.Retire(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			read("full=false acks=[] gone=[{n1 b 3 false} {n2 b 7 false} {n3 b 4 true}] live=[a]")
			if got, _ := s.Agents(ctx); len(got) != 0 {
				t.Errorf("agents once b retired: %v", got)
			}
			record("a", []store.AgentAck{{Node: "n3", Revision: 9}}, nil)
			read("full=false acks=[{n3 a 9 false}] gone=[] live=[a]")
			// Its flag alone flips: a changed row.
			record("a", []store.AgentAck{{Node: "n3", Revision: 9, NoProbes: true}}, nil)
			read("full=false acks=[{n3 a 9 true}] gone=[] live=[a]")
			if got, _ := s.Agents(ctx); fmt.Sprint(got) != "[{n3 a 9 true}]" {
				t.Errorf("agents once n3 took no probes: %v", got)
			}
		})
	}
}

// TestAgentsSincePurged: a reader whose last read is older than a purged
// tombstone reads every row again; one past it, only what changed.
func TestAgentsSincePurged(t *testing.T) {
	ctx := context.Background()
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			if err := s.Renew(ctx, store.Replica{ID: "a"}, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := s.RecordAgents(ctx, "a", []store.AgentAck{{Node: "n1", Revision: 1}, {Node: "n2", Revision: 1}}, nil); err != nil {
				t.Fatal(err)
			}
			before, err := s.AgentsSince(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RecordAgents(ctx, "a", nil, []string{"n1"}); err != nil {
				t.Fatal(err)
			}
			gone, err := s.AgentsSince(ctx, before.Seq)
			if err != nil || gone.Full || fmt.Sprint(gone.Gone) != "[{n1 a 1 false}]" {
				t.Fatalf("after n1 left: %+v %v", gone, err)
			}
			if err := s.RecordAgents(ctx, "a", []store.AgentAck{{Node: "n2", Revision: 2}}, nil); err != nil {
				t.Fatal(err)
			}
			if err := store.PurgeAgentTombstones(e.Store.(*store.SQL), gone.Seq); err != nil {
				t.Fatal(err)
			}
			// The reader before the tombstone cannot learn of n1 leaving
			// from the changes any more: it reads every row.
			d, err := s.AgentsSince(ctx, before.Seq)
			if err != nil || !d.Full || fmt.Sprint(d.Acks) != "[{n2 a 2 false}]" || d.Seq <= gone.Seq {
				t.Errorf("from before the purge: %+v %v", d, err)
			}
			// The reader that saw it reads only n2's change.
			d, err = s.AgentsSince(ctx, gone.Seq)
			if err != nil || d.Full || fmt.Sprint(d.Acks) != "[{n2 a 2 false}]" || len(d.Gone) != 0 {
				t.Errorf("from after the tombstone: %+v %v", d, err)
			}
			// Nothing left to purge: the horizon stays.
			if err := store.PurgeAgentTombstones(e.Store.(*store.SQL), d.Seq); err != nil {
				t.Fatal(err)
			}
			if d, err := s.AgentsSince(ctx, gone.Seq); err != nil || d.Full {
				t.Errorf("after a purge that deleted nothing: %+v %v", d, err)
			}
		})
	}
}
