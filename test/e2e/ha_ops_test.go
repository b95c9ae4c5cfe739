package e2e

import (
	"maps"
	"slices"
	"time"
)

// The writers' changes: each sends its request through change, records
// what it did in the writer's model, and waits until the load balancer
// has settled.

// pick returns n member addresses not in used, at random.
func (w *writer) pick(used map[string]bool, n int) []string {
	var free []string
	for _, a := range w.addrs {
		if !used[a] {
			free = append(free, a)
		}
	}
	w.rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	return free[:min(n, len(free))]
}

func (w *writer) createLB() {
	name := w.name("lb")
	var members []any
	sent := map[string]memberModel{}
	for _, addr := range w.pick(nil, 1+w.rng.IntN(2)) {
		m := memberModel{name: w.name("m"), addr: addr, weight: 1 + w.rng.IntN(5)}
		sent[m.name] = m
		members = append(members, map[string]any{"name": m.name, "address": addr, "protocol_port": 8080, "weight": m.weight})
	}
	body := map[string]any{"loadbalancer": map[string]any{"name": name, "vip_subnet_id": w.subnet,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members}}}}}
	out, since, ok := w.change("POST", "/v2/lbaas/loadbalancers", body, func() (map[string]any, bool) {
		code, out, ok := w.get("/v2/lbaas/loadbalancers?name=" + name)
		list, _ := out["loadbalancers"].([]any)
		if len(list) > 1 {
			w.t.Errorf("writer %d: %d load balancers named %s, created once", w.n, len(list), name)
		}
		if !ok || code != 200 || len(list) == 0 {
			return nil, false
		}
		return map[string]any{"loadbalancer": list[0]}, true
	})
	if !ok {
		return
	}
	lb := &lbModel{id: out["loadbalancer"].(map[string]any)["id"].(string), name: name, members: map[string]memberModel{}}
	if !w.settled(lb, since, false) {
		w.stuck = append(w.stuck, lb.id)
		return
	}
	_, got, ok := w.get("/v2/lbaas/loadbalancers/" + lb.id)
	if !ok {
		return
	}
	lb.pool = got["loadbalancer"].(map[string]any)["pools"].([]any)[0].(map[string]any)["id"].(string)
	have, ok := w.members(lb)
	if !ok {
		return
	}
	for id, m := range have {
		if sent[m.name] != m {
			w.t.Errorf("writer %d: %s was created with member %+v, the API has %+v", w.n, name, sent[m.name], m)
		}
		lb.members[id] = m
	}
	if len(have) != len(sent) {
		w.t.Errorf("writer %d: %s was created with members %v, the API has %v", w.n, name, sent, have)
	}
	w.lbs = append(w.lbs, lb)
}

// members reads a load balancer's members from the API, by id.
func (w *writer) members(lb *lbModel) (map[string]memberModel, bool) {
	code, out, ok := w.get("/v2/lbaas/pools/" + lb.pool + "/members")
	if !ok || code != 200 {
		w.t.Errorf("writer %d: members of %s: %d %v", w.n, lb.name, code, out)
		return nil, false
	}
	have := map[string]memberModel{}
	for _, m := range out["members"].([]any) {
		m := m.(map[string]any)
		have[m["id"].(string)] = memberModel{name: m["name"].(string), addr: m["address"].(string), weight: int(m["weight"].(float64))}
	}
	return have, true
}

func (w *writer) deleteLB(lb *lbModel) {
	path := "/v2/lbaas/loadbalancers/" + lb.id
	_, since, ok := w.change("DELETE", path+"?cascade=true", nil, func() (map[string]any, bool) {
		code, out, ok := w.get(path)
		return nil, ok && (code == 404 || status(out, "loadbalancer") == "PENDING_DELETE")
	})
	if !ok {
		return
	}
	w.drop(lb)
	if w.settled(lb, since, true) {
		w.deletedLBs = append(w.deletedLBs, lb.id)
	} else {
		w.stuck = append(w.stuck, lb.id)
	}
}

// status is the provisioning status of the object of an answer.
func status(out map[string]any, kind string) string {
	o, _ := out[kind].(map[string]any)
	s, _ := o["provisioning_status"].(string)
	return s
}

func (w *writer) addMember(lb *lbModel) {
	used := map[string]bool{}
	for _, m := range lb.members {
		used[m.addr] = true
	}
	m := memberModel{name: w.name("m"), addr: w.pick(used, 1)[0], weight: 1 + w.rng.IntN(5)}
	path := "/v2/lbaas/pools/" + lb.pool + "/members"
	out, since, ok := w.change("POST", path, map[string]any{"member": map[string]any{"name": m.name, "address": m.addr, "protocol_port": 8080, "weight": m.weight}},
		func() (map[string]any, bool) {
			code, out, ok := w.get(path + "?name=" + m.name)
			list, _ := out["members"].([]any)
			if !ok || code != 200 || len(list) == 0 {
				return nil, false
			}
			return map[string]any{"member": list[0]}, true
		})
	if !ok {
		return
	}
	lb.members[out["member"].(map[string]any)["id"].(string)] = m
	w.settle(lb, since)
}

// settle waits for lb after a change of its members; one that never
// settles is left behind.
func (w *writer) settle(lb *lbModel, since time.Time) {
	if !w.settled(lb, since, false) {
		w.drop(lb)
		w.stuck = append(w.stuck, lb.id)
	}
}

func (w *writer) setWeight(lb *lbModel, id string) {
	m := lb.members[id]
	weight := (m.weight + 1 + w.rng.IntN(5)) % 6 // 0…5, not the current one
	path := "/v2/lbaas/pools/" + lb.pool + "/members/" + id
	_, since, ok := w.change("PUT", path, map[string]any{"member": map[string]any{"weight": weight}}, func() (map[string]any, bool) {
		code, out, ok := w.get(path)
		m, _ := out["member"].(map[string]any)
		got, _ := m["weight"].(float64)
		return nil, ok && code == 200 && int(got) == weight
	})
	if !ok {
		return
	}
	m.weight = weight
	lb.members[id] = m
	w.settle(lb, since)
}

func (w *writer) deleteMember(lb *lbModel, id string) {
	path := "/v2/lbaas/pools/" + lb.pool + "/members/" + id
	_, since, ok := w.change("DELETE", path, nil, func() (map[string]any, bool) {
		code, out, ok := w.get(path)
		return nil, ok && (code == 404 || status(out, "member") == "PENDING_DELETE")
	})
	if !ok {
		return
	}
	delete(lb.members, id)
	w.deletedMembers = append(w.deletedMembers, path)
	w.settle(lb, since)
}

// verify checks, through the API, that every change the writer made is
// there: its load balancers ACTIVE with exactly the members and weights
// it gave them, and what it deleted gone.
func (w *writer) verify() {
	for _, lb := range w.lbs {
		code, out, ok := w.get("/v2/lbaas/loadbalancers/" + lb.id)
		if !ok {
			continue
		}
		if code != 200 || status(out, "loadbalancer") != "ACTIVE" {
			w.t.Errorf("writer %d: %s answers %d %s, want ACTIVE", w.n, lb.name, code, status(out, "loadbalancer"))
			continue
		}
		if have, ok := w.members(lb); ok && !maps.Equal(have, lb.members) {
			w.t.Errorf("writer %d: %s has members %v, the writes it was answered for make %v", w.n, lb.name, have, lb.members)
		}
	}
	for _, path := range append(slices.Clone(w.deletedMembers), prefixed("/v2/lbaas/loadbalancers/", w.deletedLBs)...) {
		if code, out, ok := w.get(path); ok && code != 404 {
			w.t.Errorf("writer %d: %s was deleted but answers %d %v", w.n, path, code, out)
		}
	}
}

func prefixed(prefix string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = prefix + id
	}
	return out
}

// known lists the load balancers the writer made and did not delete.
func (w *writer) known() []string {
	out := slices.Clone(w.stuck)
	for _, lb := range w.lbs {
		out = append(out, lb.id)
	}
	return out
}
