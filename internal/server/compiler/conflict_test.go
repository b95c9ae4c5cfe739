package compiler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// poolVIPs gives every load balancer the address it asks for, or one of a
// small pool: load balancers share addresses all the time, as they could
// through subnets that overlapped before flowlb refused them, or the noop
// network. Nothing vouches for an address, so the domain checks listeners.
type poolVIPs struct {
	mu   sync.Mutex
	rand *rand.Rand
	n    int
}

var vipPool = []string{"198.19.0.1", "198.19.0.2", "198.19.0.3"}

func (p *poolVIPs) Allocate(_ store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	addr := r.Address
	if addr == "" {
		addr = vipPool[p.rand.IntN(len(vipPool))]
	}
	return lbaas.VIP{Address: addr, PortID: fmt.Sprint("port-", p.n), SubnetID: r.SubnetID, NetworkID: "net", Owned: true}, nil
}

func (p *poolVIPs) Release(store.Tx, string) error { return nil }

// fuzz drives the domain with random requests.
type fuzz struct {
	t        *testing.T
	rand     *rand.Rand
	svc      *lbaas.Service
	ctx      context.Context
	accepted int
	clashes  int // refused for another load balancer's port
}

var (
	protocols = []string{"TCP", "UDP", "SCTP"}
	ports     = []int{53, 80, 81}
)

func (f *fuzz) pick(xs []string) string { return xs[f.rand.IntN(len(xs))] }

// listenerJSON is a random listener, sometimes disabled.
func (f *fuzz) listenerJSON() string {
	return fmt.Sprintf(`{"protocol": %q, "protocol_port": %d, "admin_state_up": %v}`,
		f.pick(protocols), ports[f.rand.IntN(len(ports))], f.rand.IntN(4) > 0)
}

// createLB creates a load balancer on a pool address, sometimes with an
// additional VIP and listeners.
func (f *fuzz) createLB() error {
	i := f.rand.IntN(len(vipPool))
	body := fmt.Sprintf(`{"vip_subnet_id": "s1", "vip_address": %q`, vipPool[i])
	if f.rand.IntN(3) == 0 {
		// Another subnet, so another address (Neutron's subnets do not
		// overlap).
		other := vipPool[(i+1+f.rand.IntN(len(vipPool)-1))%len(vipPool)]
		body += fmt.Sprintf(`, "additional_vips": [{"subnet_id": "s2", "ip_address": %q}]`, other)
	}
	if n := f.rand.IntN(3); n > 0 {
		var ls []string
		for range n {
			ls = append(ls, f.listenerJSON())
		}
		body += `, "listeners": [` + strings.Join(ls, ", ") + `]`
	}
	var req lbaas.LoadBalancerCreate
	if err := json.Unmarshal([]byte(body+"}"), &req); err != nil {
		f.t.Fatal(err)
	}
	_, err := f.svc.CreateLoadBalancer(f.ctx, req)
	return err
}

// change adds, toggles or deletes a listener of a random load balancer, or
// toggles the load balancer.
func (f *fuzz) change(trees []*lbaas.Tree) error {
	t := trees[f.rand.IntN(len(trees))]
	switch op := f.rand.IntN(4); {
	case op == 0 || len(t.Listeners) == 0:
		var req lbaas.ListenerCreate
		if err := json.Unmarshal([]byte(f.listenerJSON()), &req); err != nil {
			f.t.Fatal(err)
		}
		req.LoadBalancerID = t.LB.ID
		_, _, err := f.svc.CreateListener(f.ctx, req)
		return err
	case op == 1:
		l := t.Listeners[f.rand.IntN(len(t.Listeners))]
		_, _, err := f.svc.UpdateListener(f.ctx, l.ID, lbaas.ListenerUpdate{AdminStateUp: lbaas.Some(!l.AdminStateUp)})
		return err
	case op == 2:
		return f.svc.DeleteListener(f.ctx, t.Listeners[f.rand.IntN(len(t.Listeners))].ID)
	default:
		_, err := f.svc.UpdateLoadBalancer(f.ctx, t.LB.ID, lbaas.LoadBalancerUpdate{AdminStateUp: lbaas.Some(!t.LB.AdminStateUp)})
		return err
	}
}

// step makes one random request; a refusal is fine, and counted when it
// is the one for another load balancer's port.
func (f *fuzz) step() {
	trees, err := f.svc.Trees(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(trees) < 4 || f.rand.IntN(4) == 0 {
		err = f.createLB()
	} else {
		err = f.change(trees)
	}
	var refusal *lbaas.Error
	switch {
	case err == nil:
		f.accepted++
	case errors.As(err, &refusal) && strings.HasPrefix(refusal.Detail, "Another Load Balancer's Listener"):
		f.clashes++
	case !errors.As(err, &refusal):
		f.t.Fatal(err)
	}
}

// checkUnique compiles every tree on its own and fails if two load
// balancers yield one key, and checks that CompileAll keeps every service.
func (f *fuzz) checkUnique() {
	trees, err := f.svc.Trees(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	owner := map[flows.Key]string{}
	n := 0
	for _, t := range trees {
		for _, s := range compiler.Compile(t) {
			if o, taken := owner[s.Key]; taken && o != t.LB.ID {
				f.t.Fatalf("%v compiled for %s and %s", s.Key, o, t.LB.ID)
			}
			owner[s.Key] = t.LB.ID
			n++
		}
	}
	if got := len(compiler.CompileAll(trees, 1).Services); got != n {
		f.t.Fatalf("CompileAll holds %d services, the trees compile to %d", got, n)
	}
}

// Random load balancers on a pool of three addresses, random listeners on
// three ports of three protocols: whatever the domain accepts, no key is
// ever compiled for two load balancers.
func TestAcceptedTreesNeverShareAKey(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 15))
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			svc, err := lbaas.New(memstore.New(), &poolVIPs{rand: r}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
			if err != nil {
				t.Fatal(err)
			}
			f := &fuzz{t: t, rand: r, svc: svc, ctx: identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p", IsAdmin: true})}
			for range 300 {
				f.step()
				f.checkUnique()
			}
			// The run met the rule, and did not only refuse.
			if f.clashes == 0 || f.accepted < 100 {
				t.Fatalf("%d accepted, %d refused for another's port: the run proves little", f.accepted, f.clashes)
			}
		})
	}
}
