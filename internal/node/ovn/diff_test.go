package ovn

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
)

func TestDiff(t *testing.T) {
	tcp := "tcp"
	row := Row{Name: "flowlb-lb1-tcp", LoadBalancerID: "lb1", Protocol: "tcp", Vips: map[string]string{"198.18.0.10:80": "198.18.1.1:80"},
		Options: map[string]string{"reject": "true"}, ExternalIDs: map[string]string{LoadBalancerKey: "lb1", ProtocolKey: "tcp"}}
	db := func(uuid string, vips map[string]string) nbdb.LoadBalancer {
		return nbdb.LoadBalancer{UUID: uuid, Name: row.Name, Vips: vips, Protocol: &tcp, Options: row.Options, ExternalIDs: row.ExternalIDs}
	}
	rows := map[string]Row{row.Name: row}
	at := map[string]Attachment{row.Name: {Switches: []string{"sA"}, Routers: []string{"r1"}}}
	tests := []struct {
		name     string
		lbs      []nbdb.LoadBalancer
		switches []nbdb.LogicalSwitch
		routers  []nbdb.LogicalRouter
		want     Actions
	}{
		{
			name:     "new: created and attached by its named ref",
			switches: []nbdb.LogicalSwitch{{UUID: "sA"}, {UUID: "sB"}},
			routers:  []nbdb.LogicalRouter{{UUID: "r1"}},
			want: Actions{Create: []Row{row}, SwitchAttach: map[string][]Ref{"sA": {{Create: 0}}},
				RouterAttach: map[string][]Ref{"r1": {{Create: 0}}}},
		},
		{
			name:     "in place: nothing",
			lbs:      []nbdb.LoadBalancer{db("u1", row.Vips)},
			switches: []nbdb.LogicalSwitch{{UUID: "sA", LoadBalancer: []string{"u1", "foreign"}}},
			routers:  []nbdb.LogicalRouter{{UUID: "r1", LoadBalancer: []string{"u1"}}},
		},
		{
			name:     "changed vips rewritten, lost attachment restored, a stray one removed",
			lbs:      []nbdb.LoadBalancer{db("u1", map[string]string{"198.18.0.10:80": "198.18.9.9:80"})},
			switches: []nbdb.LogicalSwitch{{UUID: "sA"}, {UUID: "sB", LoadBalancer: []string{"u1"}}},
			routers:  []nbdb.LogicalRouter{{UUID: "r1", LoadBalancer: []string{"u1"}}},
			want: Actions{Update: []Update{{UUID: "u1", Row: row}}, SwitchAttach: map[string][]Ref{"sA": {{UUID: "u1"}}},
				SwitchDetach: map[string][]Ref{"sB": {{UUID: "u1"}}}},
		},
		{
			name:     "a duplicate of the name and a row no longer wanted deleted; the lowest UUID kept",
			lbs:      []nbdb.LoadBalancer{db("u2", row.Vips), db("u1", row.Vips), {UUID: "u3", Name: "flowlb-gone-tcp", ExternalIDs: map[string]string{LoadBalancerKey: "gone"}}},
			switches: []nbdb.LogicalSwitch{{UUID: "sA", LoadBalancer: []string{"u1", "u2", "u3"}}},
			routers:  []nbdb.LogicalRouter{{UUID: "r1", LoadBalancer: []string{"u1"}}},
			want:     Actions{Delete: []string{"u2", "u3"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Diff(rows, at, tc.lbs, tc.switches, tc.routers)
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(Row{}, "Addrs")); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if got.Empty() != (len(tc.want.Create)+len(tc.want.Update)+len(tc.want.Delete)+tc.want.attachments() == 0) {
				t.Errorf("Empty() = %v", got.Empty())
			}
		})
	}
}
