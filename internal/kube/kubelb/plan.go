package kubelb

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
)

// Call is one request of a plan: Plan decides the calls, Octavia.Apply
// sends them in order.
type Call struct {
	Method string // POST, PUT or DELETE
	// Path is below the API's root, with its query:
	// "lbaas/pools/<id>/members". A "{name}" in it is the id that an
	// earlier call of the plan Creates.
	Path string
	// Body is the request's JSON object (nil: none). A Ref value within
	// its objects (not within a list) is resolved like a path reference.
	Body map[string]any
	// Creates names the id of the object the call creates (read from the
	// response) for later calls to refer to; "" for none.
	Creates Ref
	// Await is what the executor waits for after the call, on the load
	// balancer LB (an id, or a reference such as "{loadbalancer}").
	Await Await
	LB    string
}

// Await is the state of the load balancer the executor waits for after a
// call.
type Await int

const (
	AwaitNothing Await = iota
	// AwaitActive: ACTIVE again; Octavia refuses the next change while the
	// load balancer is PENDING_UPDATE, and ACTIVE means the change is
	// served. ERROR fails the apply.
	AwaitActive
	// AwaitGone: deleted. A 404 answer to the call itself means it
	// already is.
	AwaitGone
)

func (a Await) String() string {
	switch a {
	case AwaitActive:
		return "ACTIVE"
	case AwaitGone:
		return "gone"
	}
	return "nothing"
}

// Ref names the id of an object that an earlier call of the same plan
// creates (Call.Creates): the executor resolves it. It is written, in a
// path and as JSON, "{name}".
type Ref string

// RefLoadBalancer is the load balancer a plan creates.
const RefLoadBalancer Ref = "loadbalancer"

func (r Ref) String() string { return "{" + string(r) + "}" }

// MarshalJSON writes a reference as it stands in a path, so that a plan
// reads the same in tests and logs; the executor sends ids instead.
func (r Ref) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

func listenerRef(l Listener) Ref { return Ref("listener " + listenerKey(l)) }
func poolRef(l Listener) Ref     { return Ref("pool " + listenerKey(l)) }

// Plan is the calls that take Octavia from actual (as Load read it for
// want) to want, in the order they must be sent, each waiting for the
// load balancer to settle:
//   - no load balancer: one fully populated create;
//   - one whose VIPs are not want's: it is deleted and created again (a
//     VIP cannot change in place);
//   - otherwise one update per object that differs, one batch update of a
//     pool's members, each new listener created with its pool, members
//     and monitor, and the listeners want no longer has deleted with
//     their pool.
func Plan(actual *Actual, want *LB) []Call {
	cur := actual.LB
	switch {
	case cur == nil:
		return []Call{createLB(want)}
	case !sameVIPs(cur, want):
		return []Call{deleteLB(cur.ID), createLB(want)}
	}
	var calls []Call
	if !sameSet(cur.Tags, want.Tags) {
		calls = append(calls, change(cur.ID, http.MethodPut, "loadbalancers/"+cur.ID, map[string]any{"loadbalancer": map[string]any{"tags": want.Tags}}))
	}
	return append(calls, planListeners(cur.ID, actual.Listeners, want.Listeners)...)
}

// PlanMembers is the calls that take a load balancer (lbID) holding
// have, as a reconcile applied it, to want when the two differ in their
// members alone: one batch member update per pool whose members changed,
// found by its listener's key in pools (as Result.Pools names them),
// without reading anything back. ok is false when anything else differs
// or a changed pool's id is not known: the caller then loads what Octavia
// holds and plans in full. The batch update sets a pool's members to the
// list, so a stale have costs at most a call that changes nothing.
func PlanMembers(lbID string, pools map[string]string, have, want *LB) (calls []Call, ok bool) {
	if lbID == "" || have == nil || want == nil || !reflect.DeepEqual(withoutMembers(have), withoutMembers(want)) {
		return nil, false
	}
	for i, l := range want.Listeners {
		if sameMemberList(have.Listeners[i].Pool.Members, l.Pool.Members) {
			continue
		}
		id := pools[listenerKey(l)]
		if id == "" {
			return nil, false
		}
		calls = append(calls, change(lbID, http.MethodPut, "pools/"+id+"/members", map[string]any{"members": membersBody(l.Pool.Members)}))
	}
	return calls, true
}

// withoutMembers is lb with its pools' members left out.
func withoutMembers(lb *LB) *LB {
	out := *lb
	out.Listeners = slices.Clone(lb.Listeners)
	for i := range out.Listeners {
		out.Listeners[i].Pool.Members = nil
	}
	return &out
}

// sameMemberList compares two desired member lists as sameMembers
// compares an actual one with a desired one: in any order.
func sameMemberList(a, b []Member) bool {
	cur := make([]ActualMember, len(a))
	for i, m := range a {
		cur[i] = ActualMember{Name: m.Name, Address: m.Address, ProtocolPort: m.Port, Tags: m.Tags}
	}
	return sameMembers(cur, b)
}

func createLB(want *LB) Call {
	return Call{Method: http.MethodPost, Path: "lbaas/loadbalancers", Body: map[string]any{"loadbalancer": createBody(want)},
		Creates: RefLoadBalancer, Await: AwaitActive, LB: RefLoadBalancer.String()}
}

func deleteLB(id string) Call {
	return Call{Method: http.MethodDelete, Path: "lbaas/loadbalancers/" + id + "?cascade=true", Await: AwaitGone, LB: id}
}

// change is a call on an object of load balancer lbID, after which it
// must be ACTIVE again.
func change(lbID, method, path string, body map[string]any) Call {
	return Call{Method: method, Path: "lbaas/" + path, Body: body, Await: AwaitActive, LB: lbID}
}

// planListeners matches listeners by protocol and port: the wanted ones
// in their order, created or brought up to date, then the unwanted ones,
// in the order Octavia listed them, deleted.
func planListeners(lbID string, have []ActualListener, want []Listener) []Call {
	unmatched := map[string]ActualListener{}
	for _, l := range have {
		unmatched[l.key()] = l
	}
	var calls []Call
	for _, l := range want {
		cl, ok := unmatched[listenerKey(l)]
		delete(unmatched, listenerKey(l))
		if !ok {
			calls = append(calls, addListener(lbID, l)...)
			continue
		}
		calls = append(calls, syncListener(lbID, cl, l)...)
	}
	for _, cl := range have {
		if _, gone := unmatched[cl.key()]; !gone {
			continue
		}
		if cl.DefaultPoolID != "" {
			calls = append(calls, change(lbID, http.MethodDelete, "pools/"+cl.DefaultPoolID, nil))
		}
		calls = append(calls, change(lbID, http.MethodDelete, "listeners/"+cl.ID, nil))
	}
	return calls
}

// addListener creates a listener, then its pool, members and monitor.
func addListener(lbID string, l Listener) []Call {
	body := listenerBody(l)
	body["loadbalancer_id"], body["protocol"], body["protocol_port"] = lbID, l.Protocol, l.Port
	create := change(lbID, http.MethodPost, "listeners", map[string]any{"listener": body})
	create.Creates = listenerRef(l)
	return append([]Call{create}, addPool(lbID, listenerRef(l), l)...)
}

// addPool creates l's pool on listener (an id or a Ref), then sets its
// members in one batch and creates its monitor.
func addPool(lbID string, listener any, l Listener) []Call {
	p, ref := l.Pool, poolRef(l)
	body := poolBody(p)
	body["listener_id"], body["protocol"] = listener, p.Protocol
	create := change(lbID, http.MethodPost, "pools", map[string]any{"pool": body})
	create.Creates = ref
	calls := []Call{create}
	if len(p.Members) > 0 {
		calls = append(calls, change(lbID, http.MethodPut, "pools/"+ref.String()+"/members", map[string]any{"members": membersBody(p.Members)}))
	}
	if p.Monitor != nil {
		mb := monitorBody(*p.Monitor, true)
		mb["pool_id"] = ref
		calls = append(calls, change(lbID, http.MethodPost, "healthmonitors", map[string]any{"healthmonitor": mb}))
	}
	return calls
}

// syncListener brings an existing listener and its pool to l. Load has
// read the pool of every listener that l matches.
func syncListener(lbID string, cl ActualListener, l Listener) []Call {
	var calls []Call
	timeouts := Timeouts{ClientData: cl.ClientData, MemberConnect: cl.MemberConnect, MemberData: cl.MemberData, TCPInspect: cl.TCPInspect}
	if cl.Name != l.Name || !sameSet(cl.AllowedCIDRs, l.AllowedCIDRs) || !sameSet(cl.Tags, l.Tags) || timeouts != l.Timeouts {
		calls = append(calls, change(lbID, http.MethodPut, "listeners/"+cl.ID, map[string]any{"listener": listenerBody(l)}))
	}
	if cl.DefaultPoolID == "" {
		return append(calls, addPool(lbID, cl.ID, l)...)
	}
	p := cl.Pool
	if p.LBAlgorithm != l.Pool.Algorithm || p.Name != l.Pool.Name || !samePersistence(p.SessionPersistence, l.Pool.Persistence) {
		calls = append(calls, change(lbID, http.MethodPut, "pools/"+p.ID, map[string]any{"pool": poolBody(l.Pool)}))
	}
	if !sameMembers(p.Members, l.Pool.Members) {
		calls = append(calls, change(lbID, http.MethodPut, "pools/"+p.ID+"/members", map[string]any{"members": membersBody(l.Pool.Members)}))
	}
	return append(calls, syncMonitor(lbID, p, l.Pool.Monitor)...)
}

// syncMonitor updates the pool's monitor in place, or replaces it when
// its type changes (Octavia cannot change a monitor's type).
func syncMonitor(lbID string, p *ActualPool, want *Monitor) []Call {
	var calls []Call
	cur := p.Monitor
	if cur != nil && (want == nil || cur.Type != want.Type) {
		calls = append(calls, change(lbID, http.MethodDelete, "healthmonitors/"+cur.ID, nil))
		cur = nil
	}
	switch {
	case want == nil:
	case cur == nil:
		mb := monitorBody(*want, true)
		mb["pool_id"] = p.ID
		calls = append(calls, change(lbID, http.MethodPost, "healthmonitors", map[string]any{"healthmonitor": mb}))
	case cur.Delay != want.Delay || cur.Timeout != want.Timeout || cur.MaxRetries != want.MaxRetries || cur.MaxRetriesDown != want.MaxRetriesDown:
		calls = append(calls, change(lbID, http.MethodPut, "healthmonitors/"+cur.ID, map[string]any{"healthmonitor": monitorBody(*want, false)}))
	}
	return calls
}

func sameVIPs(cur *ActualLB, want *LB) bool {
	if cur.VIPSubnetID != want.VIP.SubnetID || (want.VIP.Address != "" && cur.VIPAddress != want.VIP.Address) {
		return false
	}
	if len(cur.AdditionalVIPs) != len(want.AdditionalVIPs) {
		return false
	}
	for i, v := range want.AdditionalVIPs {
		if cur.AdditionalVIPs[i].SubnetID != v.SubnetID || (v.Address != "" && cur.AdditionalVIPs[i].IPAddress != v.Address) {
			return false
		}
	}
	return true
}

func samePersistence(cur *ActualPersistence, want *Persistence) bool {
	if cur == nil || want == nil {
		return (cur == nil) == (want == nil)
	}
	return cur.Type == want.Type && cur.PersistenceTimeout == want.Timeout
}

func sameMembers(cur []ActualMember, want []Member) bool {
	if len(cur) != len(want) {
		return false
	}
	have := map[string]ActualMember{}
	for _, m := range cur {
		have[hostPort(m.Address, m.ProtocolPort)] = m
	}
	for _, m := range want {
		c, ok := have[m.Key()]
		if !ok || c.Name != m.Name || !sameSet(c.Tags, m.Tags) {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
