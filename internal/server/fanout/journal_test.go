package fanout

import (
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

func TestJournalTraces(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var j journal
	j.applied([]store.LogEntry{{ID: 7, Revision: 3, LoadBalancerID: "lb1", At: at(0)}}, at(5))
	j.applied([]store.LogEntry{{ID: 9, Revision: 4, LoadBalancerID: "lb2", At: at(10)}}, at(12))
	j.acked("n1", 2, at(1))
	j.acked("n1", 3, at(8))
	j.acked("n1", 3, at(9)) // no raise: ignored
	j.acked("n1", 4, at(20))
	j.acked("n2", 4, at(30)) // joined past both
	j.settled(7, at(40))

	got := j.traces(map[string]int64{"n1": 4, "n2": 4, "n3": 3})
	if len(got) != 2 || got[0].Entry != 9 || got[1].Entry != 7 {
		t.Fatalf("traces not newest first: %+v", got)
	}
	want := map[int64]map[string]time.Time{
		9: {"n1": at(20), "n2": at(30)},
		// n3 is at 3 but no ack of it was seen here: no time is made up.
		7: {"n1": at(8), "n2": at(30)},
	}
	for _, c := range got {
		if len(c.Programmed) != len(want[c.Entry]) {
			t.Errorf("entry %d programmed %v, want %v", c.Entry, c.Programmed, want[c.Entry])
		}
		for n, w := range want[c.Entry] {
			if !c.Programmed[n].Equal(w) {
				t.Errorf("entry %d node %s at %v, want %v", c.Entry, n, c.Programmed[n], w)
			}
		}
	}
	if !got[1].Settled.Equal(at(40)) || !got[0].Settled.IsZero() {
		t.Errorf("settled: %v %v", got[0].Settled, got[1].Settled)
	}
	if !got[1].Written.Equal(at(0)) || !got[1].Applied.Equal(at(5)) {
		t.Errorf("written/applied: %+v", got[1])
	}
}

func TestJournalBounded(t *testing.T) {
	var j journal
	var es []store.LogEntry
	for i := int64(1); i <= 3*journalChanges; i++ {
		es = append(es, store.LogEntry{ID: i, Revision: i})
	}
	j.applied(es[:journalChanges+5], time.Now())
	j.applied(es[journalChanges+5:], time.Now())
	if len(j.changes) != journalChanges || j.changes[0].Entry != 2*journalChanges+1 || j.changes[journalChanges-1].Entry != 3*journalChanges {
		t.Fatalf("kept %d entries from %d", len(j.changes), j.changes[0].Entry)
	}
	for i := int64(1); i <= 2*journalAcks; i++ {
		j.acked("n", i, time.Now())
	}
	if ps := j.progress["n"]; len(ps) != journalAcks || ps[0].rev != journalAcks+1 {
		t.Fatalf("kept %d ack points from %d", len(ps), ps[0].rev)
	}
}

// The other replicas' acks are recorded from the store's view; a node gone
// from the cluster is forgotten unless it streams to this replica.
func TestJournalNoteCluster(t *testing.T) {
	var j journal
	now := time.Unix(2000, 0)
	j.acked("local", 5, now)
	j.acked("gone", 5, now)
	j.noteCluster([]store.AgentAck{{Replica: "r2", Node: "remote", Revision: 7}, {Replica: "r1", Node: "mine", Revision: 9}}, "r1",
		map[string]bool{"local": true}, now.Add(time.Second))
	if ps := j.progress["remote"]; len(ps) != 1 || ps[0].rev != 7 || !ps[0].at.Equal(now.Add(time.Second)) {
		t.Errorf("remote node: %+v", ps)
	}
	if _, ok := j.progress["mine"]; ok {
		t.Error("this replica's own row in the store was taken for an ack; its agents' acks come from their streams")
	}
	if _, ok := j.progress["gone"]; ok {
		t.Error("a node gone from the cluster is kept")
	}
	if _, ok := j.progress["local"]; !ok {
		t.Error("a node streaming here, not yet in the store, was forgotten")
	}
}

// A read of the changes records the other replicas' new acks and forgets
// the nodes that left them, but for those streaming here.
func TestJournalNoteChanges(t *testing.T) {
	var j journal
	now := time.Unix(2000, 0)
	for _, n := range []string{"left", "moved", "kept"} {
		j.acked(n, 5, now)
	}
	j.noteChanges(clusterChange{acked: []store.AgentAck{{Replica: "r2", Node: "remote", Revision: 7}}, left: []string{"left", "moved"}},
		"r1", map[string]bool{"moved": true}, now.Add(time.Second))
	if ps := j.progress["remote"]; len(ps) != 1 || ps[0].rev != 7 {
		t.Errorf("remote node: %+v", ps)
	}
	if _, ok := j.progress["left"]; ok {
		t.Error("a node that left the cluster is kept")
	}
	for _, n := range []string{"moved", "kept"} {
		if _, ok := j.progress[n]; !ok {
			t.Errorf("%s forgotten", n)
		}
	}
}
