package lbaas

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// lbWith is a create on sub-1 with n TCP listeners and a pool of m members.
func lbWith(t *testing.T, listeners, members int) LoadBalancerCreate {
	ls := make([]string, listeners)
	for i := range ls {
		ls[i] = fmt.Sprintf(`{"protocol": "TCP", "protocol_port": %d}`, i+1)
	}
	return lbReq(t, fmt.Sprintf(`"listeners": [%s], "pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": %s}]`,
		strings.Join(ls, ","), membersJSON(members)))
}

func membersJSON(n int) string {
	ms := make([]string, n)
	for j := range ms {
		ms[j] = fmt.Sprintf(`{"address": "198.18.%d.%d", "protocol_port": 80}`, 16+j/250, 2+j%250)
	}
	return "[" + strings.Join(ms, ",") + "]"
}

// The documented bounds: 1,000 listeners per load balancer and 20,000
// members per pool, whichever path makes them, refused as Octavia
// refuses invalid input (400, "Validation failure: ...").
func TestTreeLimits(t *testing.T) {
	e := newEnv(t, true, memstore.New())
	_, err := e.svc.CreateLoadBalancer(e.ctx, lbWith(t, MaxListenersPerLoadBalancer+1, 0))
	wantErr(t, err, ErrInvalid, "at most 1000 listeners")
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbWith(t, 0, MaxMembersPerPool+1))
	wantErr(t, err, ErrInvalid, "at most 20000 members")

	tr, err := e.svc.CreateLoadBalancer(e.ctx, lbWith(t, MaxListenersPerLoadBalancer, MaxMembersPerPool))
	if err != nil {
		t.Fatalf("at the limits: %v", err)
	}
	e.waitActive(tr.LB.ID)
	_, _, err = e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: tr.LB.ID, Protocol: "UDP", ProtocolPort: 1})
	wantErr(t, err, ErrInvalid, "at most 1000 listeners")
	_, _, err = e.svc.CreateMember(e.ctx, tr.Pools[0].ID, MemberCreate{Address: "198.18.200.2", ProtocolPort: 80})
	wantErr(t, err, ErrInvalid, "at most 20000 members")
	// A batch is bounded by what the pool has after it: replacing all
	// members is fine, adding one to a full pool is not.
	batch := req[[]MemberCreate](t, membersJSON(MaxMembersPerPool))
	err = e.svc.BatchUpdateMembers(e.ctx, tr.Pools[0].ID, append(batch, MemberCreate{Address: "198.18.200.2", ProtocolPort: 80}), true)
	wantErr(t, err, ErrInvalid, "at most 20000 members")
	batch[0].Address = "198.18.200.3"
	if err := e.svc.BatchUpdateMembers(e.ctx, tr.Pools[0].ID, batch, false); err != nil {
		t.Fatalf("a batch replacing one of 20000 members: %v", err)
	}
	e.waitActive(tr.LB.ID)
}
