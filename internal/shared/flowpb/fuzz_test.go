package flowpb

import (
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// FuzzUpdate decodes arbitrary bytes as the agent protocol's Update, as
// an agent does with what its stream brings, and translates it into the
// flow model (UpdateFromProto): that never panics, and what it yields
// survives the wire unchanged (encoding a translated update and
// translating it again gives the same values).
func FuzzUpdate(f *testing.F) {
	s := fullService()
	seeds := []*agentv1.Update{
		{Revision: 1, Snapshot: true, Upserts: []*agentv1.Service{ServiceToProto(s)}},
		{Revision: 2, Deletes: []*agentv1.ServiceKey{KeyToProto(s.Key)}, ProbesSet: true, Probes: []*agentv1.Probe{ProbeToProto(fullProbe())}},
		{Revision: 3, Upserts: []*agentv1.Service{{PersistenceTimeoutMs: 1 << 62, ConnectionLimit: -1}}},
		// A negative interval wrapped in the product and lost its last
		// digits on the way back (found by fuzzing in CI).
		{Revision: 5, ProbesSet: true, Probes: []*agentv1.Probe{{TimeoutMs: 9_300_000_000_000, DelayMs: -9_300_000_000_000}, {TimeoutMs: math.MaxInt64, DelayMs: math.MinInt64}}},
		{Revision: 4, Loadbalancers: []*agentv1.LoadBalancerServices{LoadBalancerServicesToProto("lb", []flows.Service{s})}},
	}
	for _, u := range seeds {
		b, err := proto.Marshal(u)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var u agentv1.Update
		if proto.Unmarshal(b, &u) != nil {
			return
		}
		got := UpdateFromProto(&u)
		if again := UpdateFromProto(wire(t, UpdateToProto(got))); !updatesEqual(again, got) {
			t.Fatalf("update changed on the wire:\n %+v\n %+v", got, again)
		}
	})
}
