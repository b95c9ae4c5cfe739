package neutron

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// A member's subnet_id must name a subnet its creator may use: a missing
// one and another project's private one are refused alike, with
// Octavia's "Subnet <id> not found.", on every path that makes members.
func TestMemberSubnetValidated(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		shared := e.subnet(e.network(AdminProject, true).ID, "10.50.0.0/24")
		own := e.subnet(e.network("p1", false).ID, "10.51.0.0/24")
		foreign := e.subnet(e.network("p2", false).ID, "10.52.0.0/24")
		svc, err := lbaas.New(e.st, NewAllocator(), []lbaas.Provider{flow.New(flow.Immediate{})},
			lbaas.Config{DefaultProvider: flow.Name}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ctx := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1"})
		member := func(subnet string) lbaas.MemberCreate {
			return lbaas.MemberCreate{Address: "198.18.17.2", ProtocolPort: 80, SubnetID: &subnet}
		}
		// lb is a create on the shared subnet with a pool, with a member
		// on subnet unless it is empty.
		lb := func(subnet string) lbaas.LoadBalancerCreate {
			members := "[]"
			if subnet != "" {
				members = fmt.Sprintf(`[{"address": "198.18.17.2", "protocol_port": 80, "subnet_id": %q}]`, subnet)
			}
			var r lbaas.LoadBalancerCreate
			body := fmt.Sprintf(`{"vip_subnet_id": %q, "pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": %s}]}`, shared.ID, members)
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatal(err)
			}
			return r
		}
		for _, c := range []struct{ subnet, refusal string }{
			{"missing", "Subnet missing not found."},
			{foreign.ID, "Subnet " + foreign.ID + " not found."},
			{own.ID, ""},
			{shared.ID, ""},
		} {
			_, err := svc.CreateLoadBalancer(ctx, lb(c.subnet))
			checkRefusal(t, "fully populated create", err, c.refusal)
			tr, err := svc.CreateLoadBalancer(ctx, lb(""))
			if err != nil {
				t.Fatal(err)
			}
			poolID := tr.Pools[0].ID
			testutil.Eventually(t, 5*time.Second, "load balancer ACTIVE", func() (bool, string) {
				got, err := svc.Tree(ctx, store.KindLoadBalancer, tr.LB.ID)
				if err != nil {
					return false, err.Error()
				}
				return got.LB.ProvisioningStatus == lbaas.Active, got.LB.ProvisioningStatus
			})
			_, _, err = svc.CreateMember(ctx, poolID, member(c.subnet))
			checkRefusal(t, "member create", err, c.refusal)
			if c.refusal == "" {
				continue // the LB is busy with the member now
			}
			err = svc.BatchUpdateMembers(ctx, poolID, []lbaas.MemberCreate{member(c.subnet)}, false)
			checkRefusal(t, "batch update", err, c.refusal)
		}
		// An admin may use any project's subnet.
		admin := identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p1", IsAdmin: true})
		if _, err := svc.CreateLoadBalancer(admin, lb(foreign.ID)); err != nil {
			t.Fatalf("admin with another project's subnet: %v", err)
		}
	})
}

func checkRefusal(t *testing.T, what string, err error, refusal string) {
	t.Helper()
	if refusal == "" {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
	var de *lbaas.Error
	if !errors.As(err, &de) || !errors.Is(err, lbaas.ErrInvalid) || de.Error() != refusal {
		t.Fatalf("%s: %v, want the invalid refusal %q", what, err, refusal)
	}
}
