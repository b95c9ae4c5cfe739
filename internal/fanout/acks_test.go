package fanout

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flowlb/flowlb/internal/store"
)

// The lowest acknowledged revision kept as acks come agrees, after every
// step of a long random run, with the one counted from scratch: agents
// joining and leaving this replica (a node twice, as when it reconnects
// before its old stream is gone), acks, and the other replicas' agents
// read from the store (a node on both sides, as when it moved).
func TestLowestFollowsEveryStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 14))
	a := newAcks()
	var streams []*agent
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op == 0 && len(streams) < 12:
			l := &agent{node: fmt.Sprint("n", rng.IntN(8)), acked: rng.Int64N(5)}
			streams = append(streams, l)
			a.join(l)
		case op == 1 && len(streams) > 0:
			i := rng.IntN(len(streams))
			a.part(streams[i])
			streams = append(streams[:i], streams[i+1:]...)
		case op == 2:
			var all []store.AgentAck
			for n := range rng.IntN(6) {
				all = append(all, store.AgentAck{Node: fmt.Sprint("n", 4+n), Replica: "other", Revision: rng.Int64N(40)})
			}
			a.setCluster(all, "me")
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
		if got, any := a.lowest(); got != want || any != wantAny {
			t.Fatalf("step %d: lowest %d %v, counted from scratch %d %v", step, got, any, want, wantAny)
		}
	}
}

// A node's stream that leaves while another of its streams stays is still
// an agent of this replica: the store does not forget it.
func TestPartKeepsNodeWithAnotherStream(t *testing.T) {
	a := newAcks()
	old, fresh := &agent{node: "n1"}, &agent{node: "n1"}
	a.join(old)
	a.join(fresh)
	if a.part(old) || a.gone["n1"] {
		t.Fatal("n1 left though a stream of it stays")
	}
	if !a.part(fresh) || !a.gone["n1"] {
		t.Fatal("n1's last stream left and the store is not told")
	}
}
