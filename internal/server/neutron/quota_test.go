package neutron

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// 50 load balancers created at once, through two replicas (each its own
// database handle and allocation hints), against a load-balancer quota
// of 10 make exactly 10, whether their VIPs come from one subnet (where
// the address claims already serialise them) or from several.
func TestLoadBalancerQuotaExactAcrossSubnets(t *testing.T) {
	for _, en := range storetest.Engines(t) {
		for _, subnets := range []int{1, 5} {
			t.Run(fmt.Sprintf("%s/%d-subnets", en.Name, subnets), func(t *testing.T) {
				e := &env{t: t, st: en.Store}
				n := e.network(AdminProject, true)
				var ids []string
				for i := range subnets {
					ids = append(ids, e.subnet(n.ID, fmt.Sprintf("10.%d.%d.0/24", 40+subnets, i)).ID)
				}
				log := slog.New(slog.NewTextHandler(io.Discard, nil))
				var replicas []*lbaas.Service
				for r, st := range []store.Store{en.Store, storetest.Reopen(t, en)} {
					svc, err := lbaas.New(st, NewAllocator(), []lbaas.Provider{flow.New(flow.Immediate{})},
						lbaas.Config{DefaultProvider: flow.Name, Replica: fmt.Sprint("r", r)}, log)
					if err != nil {
						t.Fatal(err)
					}
					replicas = append(replicas, svc)
				}
				project := fmt.Sprint("p", subnets) // the engine's store is shared by both cases
				ctx := identity.WithCaller(context.Background(), identity.Caller{ProjectID: project})
				ten := 10
				if _, err := replicas[0].SetQuota(ctx, project, lbaas.Quota{LoadBalancer: &ten}); err != nil {
					t.Fatal(err)
				}
				const racers = 50
				errs := make([]error, racers)
				var wg sync.WaitGroup
				for i := range racers {
					wg.Go(func() {
						_, errs[i] = replicas[i%2].CreateLoadBalancer(ctx, lbaas.LoadBalancerCreate{VIPSubnetID: ids[i%subnets]})
					})
				}
				wg.Wait()
				made := 0
				for i, err := range errs {
					switch {
					case err == nil:
						made++
					case !errors.Is(err, lbaas.ErrQuota):
						t.Errorf("create %d: %v, want success or the quota refusal", i, err)
					}
				}
				var have int
				if err := en.Store.View(ctx, func(tx store.ReadTx) (err error) {
					have, err = tx.Count(store.KindLoadBalancer, store.Filter{ProjectID: project})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if made != ten || have != ten {
					t.Fatalf("%d creates succeeded, %d load balancers stored, want exactly %d", made, have, ten)
				}
			})
		}
	}
}
