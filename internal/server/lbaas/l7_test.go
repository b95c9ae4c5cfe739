package lbaas

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
)

// Deleting an L7 policy leaves the listener's other policies numbered
// from 1 in their order once the provider has removed it, as Octavia's
// repository does; while the deletion is pending, and when the provider
// fails it, the positions stay.
func TestDeletePolicyRenumbers(t *testing.T) { eachEngine(t, testDeletePolicyRenumbers) }

func testDeletePolicyRenumbers(t *testing.T, st store.Store) {
	cases := []struct {
		name    string
		delete  []string // policy names, one deletion (and completion) each
		fail    bool     // the provider fails the (only) deletion
		want    string   // name:position in order after the deletions
		pending string   // with the deletion pending
	}{
		{name: "first", delete: []string{"a"}, want: "b:1 c:2 d:3", pending: "a:1 b:2 c:3 d:4"},
		{name: "middle", delete: []string{"b"}, want: "a:1 c:2 d:3", pending: "a:1 b:2 c:3 d:4"},
		{name: "last", delete: []string{"d"}, want: "a:1 b:2 c:3", pending: "a:1 b:2 c:3 d:4"},
		{name: "two in turn", delete: []string{"b", "c"}, want: "a:1 d:2"},
		{name: "all", delete: []string{"a", "b", "c", "d"}, want: ""},
		{name: "provider fails", delete: []string{"b"}, fail: true, want: "a:1 b:2 c:3 d:4", pending: "a:1 b:2 c:3 d:4"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, false, st)
			var pols []string
			for _, n := range []string{"a", "b", "c", "d"} {
				pols = append(pols, fmt.Sprintf(`{"name": %q, "action": "REJECT"}`, n))
			}
			// A port per case: the cases share the store, and their
			// load balancers a VIP.
			tr, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, fmt.Sprintf(`"listeners": [{"name": "l", "protocol": "HTTP", "protocol_port": %d,
				"l7policies": [%s]}]`, 80+i, strings.Join(pols, ", "))))
			if err != nil {
				t.Fatal(err)
			}
			e.prov.finish(nil)
			e.waitActive(tr.LB.ID)
			positions := func() string {
				t.Helper()
				tr, err := e.svc.Tree(e.ctx, store.KindLoadBalancer, tr.LB.ID)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, p := range tr.listenerPolicies(tr.Listeners[0].ID) {
					out = append(out, fmt.Sprintf("%s:%d", p.Name, p.Position))
				}
				return strings.Join(out, " ")
			}
			id := func(name string) string {
				t.Helper()
				tr, err := e.svc.Tree(e.ctx, store.KindLoadBalancer, tr.LB.ID)
				if err != nil {
					t.Fatal(err)
				}
				i := slices.IndexFunc(tr.L7Policies, func(p *L7Policy) bool { return p.Name == name })
				if i < 0 {
					t.Fatalf("no policy %s", name)
				}
				return tr.L7Policies[i].ID
			}
			for _, n := range c.delete {
				if err := e.svc.DeletePolicy(e.ctx, id(n)); err != nil {
					t.Fatal(err)
				}
				if c.pending != "" {
					if got := positions(); got != c.pending {
						t.Errorf("pending: %q, want %q", got, c.pending)
					}
				}
				if c.fail {
					e.prov.finish(errors.New("provider failed"))
				} else {
					e.prov.finish(nil)
				}
			}
			if got := positions(); got != c.want {
				t.Errorf("after deleting %v: %q, want %q", c.delete, got, c.want)
			}
		})
	}
}
