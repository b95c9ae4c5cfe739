package agent

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// tableOf builds a table from services.
func tableOf(services ...flows.Service) *table {
	t := newTable()
	for _, p := range services {
		t.set(p)
	}
	return t
}

// describeChange writes a change as "+VIP/LB/backends" and "-VIP" lines.
func describeChange(c change) []string {
	var out []string
	for _, s := range c.upserts {
		out = append(out, fmt.Sprintf("+%s/%s/%d", s.Key.VIP, s.LoadBalancerID, len(s.Backends)))
	}
	for _, k := range c.deletes {
		out = append(out, "-"+k.VIP.String())
	}
	return out
}

// TestPlan: the kernel change of one update on a table.
func TestPlan(t *testing.T) {
	const b1 = "198.18.17.2"
	held := []flows.Service{lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"), lbSvc("b", "198.19.0.3")}
	cases := []struct {
		name string
		held []flows.Service
		u    flows.Update
		want []string
	}{
		{"key upserts and deletes; an unchanged upsert and a delete of nothing do nothing", held,
			flows.Update{Upserts: []flows.Service{lbSvc("a", "198.19.0.1", b1), lbSvc("a", "198.19.0.2"), lbSvc("c", "198.19.0.4")},
				Deletes: []flows.Key{key("198.19.0.3"), key("198.19.0.9")}},
			[]string{"+198.19.0.1/a/1", "+198.19.0.4/c/0", "-198.19.0.3"}},
		{"a replacement deletes the keys it no longer lists and upserts what changed", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1", b1))}},
			[]string{"+198.19.0.1/a/1", "-198.19.0.2"}},
		{"an empty list deletes every key of its load balancer and no other", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("a")}},
			[]string{"-198.19.0.1", "-198.19.0.2"}},
		{"an unchanged replacement does nothing", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))}},
			nil},
		{"a load balancer the agent does not know yet", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("c", lbSvc("c", "198.19.0.4"))}},
			[]string{"+198.19.0.4/c/0"}},
		{"a key moves to a load balancer listed after the one it leaves", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.2")), lb("b", lbSvc("b", "198.19.0.1"), lbSvc("b", "198.19.0.3"))}},
			[]string{"+198.19.0.1/b/0"}},
		{"a key moves to a load balancer listed before the one it leaves", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("b", lbSvc("b", "198.19.0.1")), lb("a")}},
			[]string{"+198.19.0.1/b/0", "-198.19.0.2", "-198.19.0.3"}},
		{"a key two entries claim is the later one's", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("c", lbSvc("c", "198.19.0.4")), lb("d", lbSvc("d", "198.19.0.4"))}},
			[]string{"+198.19.0.4/d/0"}},
		{"a load balancer listed twice ends as its later entry says", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.4")), lb("a", lbSvc("a", "198.19.0.2"))}},
			[]string{"-198.19.0.1"}},
		{"key operations apply after the replacements", held,
			flows.Update{LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))},
				Deletes: []flows.Key{key("198.19.0.1")}, Upserts: []flows.Service{lbSvc("b", "198.19.0.2")}},
			[]string{"+198.19.0.2/b/0", "-198.19.0.1"}},
		{"a snapshot on an empty table lists replacements and upserts", nil,
			flows.Update{Snapshot: true, LoadBalancers: []flows.LoadBalancerServices{lb("a", lbSvc("a", "198.19.0.2"))},
				Upserts: []flows.Service{lbSvc("b", "198.19.0.1")}},
			[]string{"+198.19.0.1/b/0", "+198.19.0.2/a/0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeChange(plan(tableOf(tc.held...), tc.u)); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// reference applies one update to a table the plain way, one step after
// the other, as the protocol describes it.
func reference(held map[flows.Key]flows.Service, u flows.Update) map[flows.Key]flows.Service {
	out := maps.Clone(held)
	if u.Snapshot {
		out = map[flows.Key]flows.Service{}
	}
	for _, e := range u.LoadBalancers {
		id, services := e.ID, e.Services
		maps.DeleteFunc(out, func(_ flows.Key, s flows.Service) bool { return s.LoadBalancerID == id })
		for _, s := range services {
			s.LoadBalancerID = id
			out[s.Key] = s
		}
	}
	for _, p := range u.Deletes {
		delete(out, p)
	}
	for _, p := range u.Upserts {
		out[p.Key] = p
	}
	return out
}

// randomUpdate draws an update over few keys and load balancers, so that
// claims, moves and overrides collide often.
func randomUpdate(r *rand.Rand) flows.Update {
	lbs := []string{"a", "b", "c"}
	service := func(lbID string) flows.Service {
		backends := []string{"198.18.17.2", "198.18.17.3"}[:r.IntN(3)]
		return lbSvc(lbID, fmt.Sprintf("198.19.0.%d", 1+r.IntN(6)), backends...)
	}
	u := flows.Update{Snapshot: r.IntN(10) == 0}
	for range r.IntN(3) {
		e := lb(lbs[r.IntN(len(lbs))])
		for range r.IntN(4) {
			e.Services = append(e.Services, service(e.ID))
		}
		u.LoadBalancers = append(u.LoadBalancers, e)
	}
	for range r.IntN(3) {
		u.Deletes = append(u.Deletes, key(fmt.Sprintf("198.19.0.%d", 1+r.IntN(6))))
	}
	for range r.IntN(3) {
		u.Upserts = append(u.Upserts, service(lbs[r.IntN(len(lbs))]))
	}
	return u
}

// TestMergeEqualsSequence: on random tables and queues, programming the
// merged update gives what applying each update in turn gives, and every
// change names a key once, upserts only what differs and deletes only
// what is held.
func TestMergeEqualsSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		start := tableOf()
		start.apply(plan(start, randomUpdate(r)))
		batch := make([]flows.Update, 1+r.IntN(5))
		want := start.clone()
		for j := range batch {
			batch[j] = randomUpdate(r)
			want = reference(want, batch[j])
		}
		u := merge(batch)
		got := newTable()
		if !u.Snapshot {
			for _, s := range start.services {
				got.set(s)
			}
		}
		c := plan(got, u)
		checkChange(t, got, c)
		got.apply(c)
		if !maps.EqualFunc(got.services, want, flows.Service.Equal) {
			t.Fatalf("case %d: batch %v\nmerged %q\ngot  %v\nwant %v", i, batch, describe(u), got.services, want)
		}
	}
}

// checkChange fails on a change that names a key twice, upserts a
// service as held or deletes a key not held.
func checkChange(t *testing.T, held *table, c change) {
	t.Helper()
	seen := map[flows.Key]bool{}
	for _, s := range c.upserts {
		if old, ok := held.services[s.Key]; seen[s.Key] || (ok && old.Equal(s)) {
			t.Fatalf("upsert of %s: twice or unchanged", s.Key)
		}
		seen[s.Key] = true
	}
	for _, k := range c.deletes {
		if _, ok := held.services[k]; seen[k] || !ok {
			t.Fatalf("delete of %s: twice, upserted too or not held", k)
		}
		seen[k] = true
	}
}

// TestTableIndex: the per-load-balancer index follows moves and removals.
func TestTableIndex(t *testing.T) {
	tb := tableOf(lbSvc("a", "198.19.0.1"), lbSvc("a", "198.19.0.2"))
	tb.set((lbSvc("b", "198.19.0.1")))
	tb.remove((key("198.19.0.2")))
	tb.remove((key("198.19.0.9")))
	if len(tb.byLB) != 1 || len(tb.byLB["b"]) != 1 || len(tb.services) != 1 {
		t.Errorf("index %v, services %v: want only b with one key", tb.byLB, tb.services)
	}
}

// TestTableHealthIndex: the services with a health-check node port are
// the health index, whatever sets, replaces and removes them: it is what
// the health-check hook reads after every write.
func TestTableHealthIndex(t *testing.T) {
	checked := func(lb, vip string, port uint16) flows.Service {
		s := lbSvc(lb, vip)
		s.HealthCheckNodePort, s.HealthCheckService = port, "ns/"+lb
		return s
	}
	tb := tableOf(lbSvc("a", "198.19.0.1"), checked("b", "198.19.0.2", 30500), checked("c", "198.19.0.3", 30501))
	tb.set(checked("a", "198.19.0.1", 30502)) // gains a port
	tb.set(lbSvc("b", "198.19.0.2"))          // loses its port
	tb.remove(key("198.19.0.3"))              // leaves
	tb.set(checked("d", "198.19.0.4", 30503))
	tb.apply(change{upserts: []flows.Service{checked("d", "198.19.0.4", 30504)}})
	want := map[flows.Key]uint16{key("198.19.0.1"): 30502, key("198.19.0.4"): 30504}
	got := map[flows.Key]uint16{}
	for k, s := range tb.health {
		if !s.Equal(tb.services[k]) {
			t.Errorf("%s: the index holds %+v, the table %+v", k, s, tb.services[k])
		}
		got[k] = s.HealthCheckNodePort
	}
	if !maps.Equal(got, want) {
		t.Errorf("health index %v, want %v", got, want)
	}
}

func TestDiffWhole(t *testing.T) {
	a, b, b2, c := svc("198.19.0.1", "198.18.17.2"), svc("198.19.0.2", "198.18.17.3"), svc("198.19.0.2", "198.18.17.4"), svc("198.19.0.3", "198.18.17.5")
	table := func(ss ...flows.Service) map[flows.Key]flows.Service {
		out := map[flows.Key]flows.Service{}
		for _, s := range ss {
			out[s.Key] = s
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		held, next map[flows.Key]flows.Service
		upserts    []flows.Service
		deletes    []flows.Key
	}{
		{"the same", table(a, b), table(a, b), nil, nil},
		{"from nothing, in key order", table(), table(b, a), []flows.Service{a, b}, nil},
		{"to nothing", table(c, a), table(), nil, []flows.Key{a.Key, c.Key}},
		{"one changed, one gone, one kept", table(a, b, c), table(b2, c), []flows.Service{b2}, []flows.Key{a.Key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := diffWhole(tc.held, tc.next)
			if !slices.EqualFunc(got.upserts, tc.upserts, flows.Service.Equal) || !slices.Equal(got.deletes, tc.deletes) {
				t.Errorf("got +%v -%v, want +%v -%v", got.upserts, got.deletes, tc.upserts, tc.deletes)
			}
		})
	}
}
