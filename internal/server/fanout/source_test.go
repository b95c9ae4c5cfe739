package fanout_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// securityOf is a PortSecurity giving every load balancer the same rules.
type securityOf struct{ rules *lbaas.SecurityRules }

func (s securityOf) VIPSecurity(tx store.ReadTx, f store.Filter) (map[string]*lbaas.SecurityRules, error) {
	out := map[string]*lbaas.SecurityRules{}
	for _, id := range f.LoadBalancerIDs {
		out[id] = s.rules
	}
	if f.LoadBalancerIDs == nil {
		recs, err := tx.List(store.KindLoadBalancer, store.Filter{})
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			out[r.ID] = s.rules
		}
	}
	return out, nil
}

// TestStoreSourceReadsEveryProject: the fan-out's source reads the trees
// of every project from the store, with no caller in its context, with
// their children and their VIP ports' security rules; by id, only those
// asked for (none for an empty list).
func TestStoreSourceReadsEveryProject(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	_, subnet, err := neutron.EnsureDefault(ctx, st, "flowlb-vip", "198.19.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lbaas.New(st, neutron.Allocator{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, project := range []string{"p1", "p2"} {
		as := identity.WithCaller(ctx, identity.Caller{ProjectID: project})
		tr, err := svc.CreateLoadBalancer(as, lbaas.LoadBalancerCreate{VIPSubnetID: subnet.ID,
			Listeners: lbaas.Opt[[]lbaas.ListenerCreate]{Set: true, Value: []lbaas.ListenerCreate{{Protocol: "TCP", ProtocolPort: 80}}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tr.LB.ID)
	}
	rules := &lbaas.SecurityRules{Ingress: []lbaas.IngressRule{}}
	src := fanout.StoreSource{Store: st, Security: securityOf{rules}}
	all, err := src.Trees(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range all {
		got = append(got, tr.LB.ID)
		if len(tr.Listeners) != 1 || tr.Security != rules {
			t.Errorf("tree %s: %d listeners, security %v", tr.LB.ID, len(tr.Listeners), tr.Security)
		}
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(ids))) {
		t.Fatalf("every tree: %v, want %v", got, ids)
	}
	one, err := src.TreesByID(ctx, []string{ids[1], "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 1 || one[ids[1]] == nil || one[ids[1]].Security != rules || len(one[ids[1]].Listeners) != 1 {
		t.Fatalf("by id: %v", one)
	}
	if none, err := src.TreesByID(ctx, []string{}); err != nil || len(none) != 0 {
		t.Fatalf("no id: %v, %v", none, err)
	}
}
