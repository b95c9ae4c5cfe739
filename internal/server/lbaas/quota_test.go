package lbaas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// racers creates race against a quota of quotaLimit.
const (
	racers     = 50
	quotaLimit = 10
)

// quotaRace is one object kind's race: setup gives each racer its own
// ACTIVE load balancer tree (a child create locks its load balancer, so
// racers on one load balancer would mostly be refused as immutable
// instead of reaching the quota check), create makes one object in it.
type quotaRace struct {
	kind   store.Kind
	name   string
	limit  func(q *Quota, n *int)
	setup  string // nested attributes of each racer's load balancer
	create func(tb testing.TB, ctx context.Context, s *Service, t *Tree, i int) error
}

var quotaRaces = []quotaRace{
	{store.KindLoadBalancer, "Load Balancer", func(q *Quota, n *int) { q.LoadBalancer = n }, "", nil},
	{store.KindListener, "Listener", func(q *Quota, n *int) { q.Listener = n }, "",
		func(tb testing.TB, ctx context.Context, s *Service, t *Tree, _ int) error {
			_, _, err := s.CreateListener(ctx, ListenerCreate{LoadBalancerID: t.LB.ID, Protocol: "TCP", ProtocolPort: 80})
			return err
		}},
	{store.KindPool, "Pool", func(q *Quota, n *int) { q.Pool = n }, "",
		func(tb testing.TB, ctx context.Context, s *Service, t *Tree, _ int) error {
			_, _, err := s.CreatePool(ctx, req[PoolCreate](tb, fmt.Sprintf(`{"loadbalancer_id": %q, "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}`, t.LB.ID)))
			return err
		}},
	{store.KindMember, "Member", func(q *Quota, n *int) { q.Member = n },
		`"pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}]`,
		func(tb testing.TB, ctx context.Context, s *Service, t *Tree, i int) error {
			_, _, err := s.CreateMember(ctx, t.Pools[0].ID, MemberCreate{Address: fmt.Sprintf("198.18.17.%d", i+2), ProtocolPort: 80})
			return err
		}},
	{store.KindHealthMonitor, "Health Monitor", func(q *Quota, n *int) { q.HealthMonitor = n },
		`"pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}]`,
		func(tb testing.TB, ctx context.Context, s *Service, t *Tree, _ int) error {
			_, _, err := s.CreateMonitor(ctx, req[MonitorCreate](tb, fmt.Sprintf(`{"pool_id": %q, "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 3}`, t.Pools[0].ID)))
			return err
		}},
	{store.KindL7Policy, "L7 Policy", func(q *Quota, n *int) { q.L7Policy = n },
		`"listeners": [{"name": "l", "protocol": "HTTP", "protocol_port": 80}]`,
		func(tb testing.TB, ctx context.Context, s *Service, t *Tree, _ int) error {
			_, _, err := s.CreatePolicy(ctx, req[L7PolicyCreate](tb, fmt.Sprintf(`{"listener_id": %q, "action": "REJECT"}`, t.Listeners[0].ID)))
			return err
		}},
	{store.KindL7Rule, "L7 Rule", func(q *Quota, n *int) { q.L7Rule = n },
		`"listeners": [{"name": "l", "protocol": "HTTP", "protocol_port": 80, "l7policies": [{"action": "REJECT"}]}]`,
		func(tb testing.TB, ctx context.Context, s *Service, t *Tree, _ int) error {
			_, _, err := s.CreateRule(ctx, t.L7Policies[0].ID, req[L7RuleCreate](tb, `{"type": "PATH", "compare_type": "STARTS_WITH", "value": "/x"}`))
			return err
		}},
}

func ptr[T any](v T) *T { return &v }

// 50 concurrent creates of each kind against a quota of 10 make exactly
// 10, the others refused with Octavia's quota error, on every engine.
func TestQuotaExactUnderConcurrency(t *testing.T) {
	eachEngine(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, true, st)
		for _, r := range quotaRaces {
			t.Run(string(r.kind), func(t *testing.T) {
				project := "race-" + string(r.kind)
				ctx := identity.WithCaller(context.Background(), identity.Caller{ProjectID: project})
				var trees []*Tree
				if r.create != nil {
					for range racers {
						tr, err := e.svc.CreateLoadBalancer(ctx, lbReq(t, r.setup))
						if err != nil {
							t.Fatal(err)
						}
						e.waitActive(tr.LB.ID)
						trees = append(trees, tr)
					}
				}
				var q Quota
				r.limit(&q, ptr(quotaLimit))
				if _, err := e.svc.SetQuota(e.ctx, project, q); err != nil {
					t.Fatal(err)
				}
				errs := make([]error, racers)
				var wg sync.WaitGroup
				for i := range racers {
					wg.Go(func() {
						if r.create == nil {
							// Several VIP subnets: nothing the allocator
							// claims serialises these creates.
							_, errs[i] = e.svc.CreateLoadBalancer(ctx, req[LoadBalancerCreate](t, fmt.Sprintf(`{"vip_subnet_id": "sub-%d"}`, i%5)))
							return
						}
						errs[i] = r.create(t, ctx, e.svc, trees[i], i)
					})
				}
				wg.Wait()
				made := 0
				for i, err := range errs {
					var de *Error
					switch {
					case err == nil:
						made++
					case errors.As(err, &de) && errors.Is(err, ErrQuota) && de.Resource == r.name:
					default:
						t.Errorf("racer %d: %v, want success or the %s quota refusal", i, err, r.name)
					}
				}
				var have int
				if err := st.View(context.Background(), func(tx store.ReadTx) (err error) {
					have, err = tx.Count(r.kind, store.Filter{ProjectID: project})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if made != quotaLimit || have != quotaLimit {
					t.Fatalf("%d creates succeeded and %d %s stored, want exactly %d", made, have, r.kind, quotaLimit)
				}
			})
		}
	})
}
