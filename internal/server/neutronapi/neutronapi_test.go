package neutronapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// serviceProject is the project of the server's service user, which
// the fake gives what the caller makes without naming a project.
const serviceProject = "service"

// fakeNeutron serves the part of Neutron's API the allocator uses, from
// memory: one network with one subnet, ports made on it.
type fakeNeutron struct {
	mu      sync.Mutex
	ports   map[string]map[string]any
	next    int
	creates []map[string]any
	deletes []string
	lists   []string // query strings of the port lists
	url     string
	// failList makes lists of ports fail (500).
	failList bool
	// dropCreateTags drops the tags of a create, as Neutron does without
	// ML2's extension driver tag_ports_during_bulk_creation; tagCalls
	// counts the tags added to ports afterwards.
	dropCreateTags bool
	tagCalls       int
	// tokens records the X-Auth-Token of each request, by method and
	// path ("" without one: the service's client here); strangerToken's
	// caller sees no subnet, network or port, as Neutron answers a
	// project that does not own them and has no share of them.
	tokens map[string][]string

	// groups and rules are the security groups (without their rules)
	// and the rules, by id; calls lists every write to either, and to
	// ports, in order ("POST security-group-rules", ...).
	groups map[string]map[string]any
	rules  map[string]map[string]any
	gnext  int
	calls  []string
	// failRuleCreates fails that many rule creates (500);
	// refuseRuleCreates refuses them all (403, a quota).
	failRuleCreates   int
	refuseRuleCreates bool
	// refuseGroupCreates refuses group creates (409, the quota).
	refuseGroupCreates bool
	// dropGroupTags leaves a new group's tag out (a crash between the
	// group's create and its tag).
	dropGroupTags bool
}

// groupView is group g as Neutron shows it: with its rules.
func (f *fakeNeutron) groupView(g map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range g {
		out[k] = v
	}
	rs := []any{}
	for _, r := range f.rules {
		if r["security_group_id"] == g["id"] {
			rs = append(rs, r)
		}
	}
	out["security_group_rules"] = rs
	return out
}

// ingress is group id's ingress rules as "IPv4 tcp 80 <remote>", sorted.
func (f *fakeNeutron) ingress(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.rules {
		if r["security_group_id"] == id && r["direction"] == "ingress" {
			remote, _ := r["remote_ip_prefix"].(string)
			out = append(out, fmt.Sprintf("%v %v %v %s", r["ethertype"], r["protocol"], r["port_range_min"], remote))
		}
	}
	slices.Sort(out)
	return out
}

const strangerToken = "token-of-another-project"

// matches says whether port p passes the filters of a port list's query.
func matches(p map[string]any, q url.Values) bool {
	for _, k := range []string{"name", "device_owner", "network_id", "device_id"} {
		if v, ok := q[k]; ok && p[k] != v[0] {
			return false
		}
	}
	if want := q.Get("tags"); want != "" {
		tags, _ := p["tags"].([]any)
		for _, w := range strings.Split(want, ",") {
			if !slices.Contains(tags, any(w)) {
				return false
			}
		}
	}
	return true
}

const (
	netID    = "net-1"
	subnetID = "subnet-1"
)

func (f *fakeNeutron) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	notFound := func() {
		reply(404, map[string]any{"NeutronError": map[string]any{"type": "NotFound", "message": "not found"}})
	}
	path := strings.TrimPrefix(r.URL.Path, "/v2.0/")
	tok := r.Header.Get("X-Auth-Token")
	if f.tokens == nil {
		f.tokens = map[string][]string{}
	}
	f.tokens[r.Method+" "+path] = append(f.tokens[r.Method+" "+path], tok)
	if tok == strangerToken && r.Method == "GET" && strings.Contains(path, "/") {
		notFound()
		return
	}
	if r.Method != "GET" {
		f.calls = append(f.calls, r.Method+" "+strings.SplitN(path, "/", 2)[0])
	}
	if f.serveGroups(r, path, reply, notFound) {
		return
	}
	switch {
	case r.Method == "GET" && path == "subnets/"+subnetID:
		reply(200, map[string]any{"subnet": map[string]any{"id": subnetID, "network_id": netID, "cidr": "198.18.225.0/24"}})
	case r.Method == "GET" && path == "networks/"+netID:
		reply(200, map[string]any{"network": map[string]any{"id": netID}})
	case r.Method == "GET" && path == "ports":
		f.lists = append(f.lists, r.URL.RawQuery)
		if f.failList {
			reply(500, map[string]any{"NeutronError": map[string]any{"type": "HTTPInternalServerError", "message": "down"}})
			return
		}
		out := []any{}
		for _, p := range f.ports {
			if matches(p, r.URL.Query()) {
				out = append(out, p)
			}
		}
		reply(200, map[string]any{"ports": out})
	case r.Method == "POST" && path == "ports":
		var in struct {
			Port map[string]any `json:"port"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.creates = append(f.creates, in.Port)
		addr := fmt.Sprintf("198.18.225.%d", 10+f.next)
		if fi, ok := in.Port["fixed_ips"].([]any); ok && len(fi) > 0 {
			if a, ok := fi[0].(map[string]any)["ip_address"].(string); ok && a != "" {
				addr = a
			}
		}
		for _, p := range f.ports {
			if p["fixed_ips"].([]any)[0].(map[string]any)["ip_address"] == addr {
				reply(409, map[string]any{"NeutronError": map[string]any{"type": "IpAddressAlreadyAllocated",
					"message": "IP address " + addr + " already allocated in subnet " + subnetID}})
				return
			}
		}
		f.next++
		p := map[string]any{}
		for k, v := range in.Port {
			p[k] = v
		}
		if f.dropCreateTags {
			p["tags"] = []any{}
		}
		p["id"] = fmt.Sprintf("port-%d", f.next)
		p["created_at"] = "2026-11-29T10:00:00Z"
		p["fixed_ips"] = []any{map[string]any{"subnet_id": subnetID, "ip_address": addr}}
		f.ports[p["id"].(string)] = p
		reply(201, map[string]any{"port": p})
	case r.Method == "PUT" && strings.HasPrefix(path, "ports/") && strings.Contains(path, "/tags/"):
		id, tag, _ := strings.Cut(strings.TrimPrefix(path, "ports/"), "/tags/")
		p, ok := f.ports[id]
		if !ok {
			notFound()
			return
		}
		tags, _ := p["tags"].([]any)
		p["tags"] = append(tags, tag)
		f.tagCalls++
		w.WriteHeader(201)
	case r.Method == "PUT" && strings.HasPrefix(path, "ports/"):
		p, ok := f.ports[strings.TrimPrefix(path, "ports/")]
		if !ok {
			notFound()
			return
		}
		var in struct {
			Port map[string]any `json:"port"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		for k, v := range in.Port {
			p[k] = v
		}
		reply(200, map[string]any{"port": p})
	case r.Method == "GET" && strings.HasPrefix(path, "ports/"):
		p, ok := f.ports[strings.TrimPrefix(path, "ports/")]
		if !ok {
			notFound()
			return
		}
		reply(200, map[string]any{"port": p})
	case r.Method == "DELETE" && strings.HasPrefix(path, "ports/"):
		id := strings.TrimPrefix(path, "ports/")
		if _, ok := f.ports[id]; !ok {
			notFound()
			return
		}
		delete(f.ports, id)
		f.deletes = append(f.deletes, id)
		w.WriteHeader(204)
	default:
		notFound()
	}
}

// serveGroups serves security groups and their rules; false: not theirs.
func (f *fakeNeutron) serveGroups(r *http.Request, path string, reply func(int, any), notFound func()) bool {
	switch {
	case r.Method == "GET" && path == "security-groups":
		out := []any{}
		for _, g := range f.groups {
			if matches(g, r.URL.Query()) {
				out = append(out, f.groupView(g))
			}
		}
		reply(200, map[string]any{"security_groups": out})
	case r.Method == "POST" && path == "security-groups" && f.refuseGroupCreates:
		reply(409, map[string]any{"NeutronError": map[string]any{"type": "OverQuota", "message": "Quota exceeded for resources: ['security_group']."}})
	case r.Method == "POST" && path == "security-groups":
		var in struct {
			Group map[string]any `json:"security_group"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.gnext++
		g := in.Group
		if g["project_id"] == nil {
			g["project_id"] = serviceProject // the caller's, as Neutron does
		}
		g["id"] = fmt.Sprintf("sg-%d", f.gnext)
		g["tags"] = []any{}
		g["created_at"] = "2026-11-29T10:00:00Z"
		f.groups[g["id"].(string)] = g
		for _, e := range []string{"IPv4", "IPv6"} {
			f.gnext++
			id := fmt.Sprintf("rule-%d", f.gnext)
			f.rules[id] = map[string]any{"id": id, "security_group_id": g["id"], "direction": "egress", "ethertype": e}
		}
		reply(201, map[string]any{"security_group": f.groupView(g)})
	case r.Method == "PUT" && strings.HasPrefix(path, "security-groups/") && strings.Contains(path, "/tags/"):
		id, tag, _ := strings.Cut(strings.TrimPrefix(path, "security-groups/"), "/tags/")
		g, ok := f.groups[id]
		if !ok {
			notFound()
			return true
		}
		if !f.dropGroupTags {
			tags, _ := g["tags"].([]any)
			g["tags"] = append(tags, tag)
		}
		reply(201, nil)
	case r.Method == "DELETE" && strings.HasPrefix(path, "security-groups/"):
		id := strings.TrimPrefix(path, "security-groups/")
		if _, ok := f.groups[id]; !ok {
			notFound()
			return true
		}
		for _, p := range f.ports {
			if gs, _ := p["security_groups"].([]any); slices.Contains(gs, any(id)) {
				reply(409, map[string]any{"NeutronError": map[string]any{"type": "SecurityGroupInUse", "message": "in use"}})
				return true
			}
		}
		delete(f.groups, id)
		for rid, rule := range f.rules {
			if rule["security_group_id"] == id {
				delete(f.rules, rid)
			}
		}
		f.deletes = append(f.deletes, id)
		reply(204, nil)
	case r.Method == "POST" && path == "security-group-rules":
		var in struct {
			Rule map[string]any `json:"security_group_rule"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		switch {
		case f.refuseRuleCreates:
			reply(403, map[string]any{"NeutronError": map[string]any{"type": "OverQuota", "message": "Quota exceeded for resources: ['security_group_rule']."}})
			return true
		case f.failRuleCreates > 0:
			f.failRuleCreates--
			reply(500, map[string]any{"NeutronError": map[string]any{"type": "HTTPInternalServerError", "message": "down"}})
			return true
		}
		if _, ok := f.groups[fmt.Sprint(in.Rule["security_group_id"])]; !ok {
			notFound()
			return true
		}
		for _, rule := range f.rules {
			same := true
			for _, k := range []string{"security_group_id", "direction", "ethertype", "protocol", "port_range_min", "port_range_max", "remote_ip_prefix"} {
				same = same && fmt.Sprint(rule[k]) == fmt.Sprint(in.Rule[k])
			}
			if same {
				reply(409, map[string]any{"NeutronError": map[string]any{"type": "SecurityGroupRuleExists", "message": "exists"}})
				return true
			}
		}
		f.gnext++
		in.Rule["id"] = fmt.Sprintf("rule-%d", f.gnext)
		f.rules[in.Rule["id"].(string)] = in.Rule
		reply(201, map[string]any{"security_group_rule": in.Rule})
	case r.Method == "DELETE" && strings.HasPrefix(path, "security-group-rules/"):
		id := strings.TrimPrefix(path, "security-group-rules/")
		if _, ok := f.rules[id]; !ok {
			notFound()
			return true
		}
		delete(f.rules, id)
		reply(204, nil)
	default:
		return false
	}
	return true
}

func newFake(t *testing.T) (*fakeNeutron, *Allocator) {
	t.Helper()
	f := &fakeNeutron{ports: map[string]map[string]any{}, groups: map[string]map[string]any{}, rules: map[string]map[string]any{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	a, err := New(context.Background(), Options{Endpoint: srv.URL, DeploymentID: "dep-a"})
	if err != nil {
		t.Fatal(err)
	}
	return f, a
}

// fakeTx holds load balancers for the overlap check; nothing else of a
// transaction is used.
type fakeTx struct {
	store.Tx
	lbs []lbaas.LoadBalancer
}

func (tx fakeTx) List(kind store.Kind, _ store.Filter) ([]store.Record, error) {
	var out []store.Record
	for _, lb := range tx.lbs {
		b, _ := json.Marshal(lb)
		out = append(out, store.Record{Kind: kind, ID: lb.ID, Data: b})
	}
	return out, nil
}

// TestAllocateMakesVIPPort: a VIP on a subnet is a port made as Octavia's
// allowed-address-pairs driver makes it, with flowlb's device_owner; a
// retried transaction finds it instead of making a second; Release
// deletes it.
func TestAllocateMakesVIPPort(t *testing.T) {
	f, a := newFake(t)
	req := lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb1", SubnetID: subnetID}
	v, err := a.Allocate(fakeTx{}, req)
	if err != nil {
		t.Fatal(err)
	}
	want := lbaas.VIP{Address: "198.18.225.10", PortID: "port-1", SubnetID: subnetID, NetworkID: netID, Owned: true}
	if v != want {
		t.Fatalf("VIP %+v, want %+v", v, want)
	}
	c := f.creates[0]
	for k, w := range map[string]any{"name": "flowlb-lb-lb1", "network_id": netID, "admin_state_up": false,
		"device_id": "lb-lb1", "device_owner": DeviceOwner, "project_id": "p1", "port_security_enabled": true} {
		if c[k] != w {
			t.Errorf("port %s = %v, want %v", k, c[k], w)
		}
	}
	// Port security without any group (not the project's default):
	// the load balancer's own group comes with the first sync.
	if gs, ok := c["security_groups"].([]any); !ok || len(gs) != 0 {
		t.Errorf("port security_groups %v, want [] given", c["security_groups"])
	}
	if len(f.groups) != 0 {
		t.Errorf("groups %v made in the allocation", f.groups)
	}
	again, err := a.Allocate(fakeTx{}, req)
	if err != nil || again != want || len(f.creates) != 1 {
		t.Fatalf("retry: %+v %v, %d creates; want the same port", again, err, len(f.creates))
	}
	if err := a.Release(nil, v.PortID); err != nil {
		t.Fatal(err)
	}
	if len(f.ports) != 0 {
		t.Fatalf("ports left after release: %v", f.ports)
	}
	if err := a.Release(nil, v.PortID); err != nil {
		t.Fatalf("release of a port already gone: %v", err)
	}
	if err := a.ReleaseVIPGroup(nil, "lb1"); err != nil {
		t.Fatalf("release of a group never made: %v", err)
	}
}

// TestAllocateOVNStyle: with PortsOVN the VIP port is named as
// ovn-octavia-provider names its own, with no device_owner (Neutron's
// ML2/OVN then writes no switch-port addresses for it); it is found
// again by a retry and released by its mark. An unmarked port of that
// shape (ovn-octavia-provider's) is kept, and an unknown style refused.
func TestAllocateOVNStyle(t *testing.T) {
	f, flowlbStyle := newFake(t)
	a, err := New(context.Background(), Options{Endpoint: f.url, DeploymentID: "dep-a", Ports: PortsOVN})
	if err != nil {
		t.Fatal(err)
	}
	req := lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb1", SubnetID: subnetID}
	v, err := a.Allocate(fakeTx{}, req)
	if err != nil {
		t.Fatal(err)
	}
	c := f.creates[0]
	if c["name"] != OVNPortPrefix+"lb1" || c["device_id"] != "lb-lb1" {
		t.Errorf("port name %v, device_id %v; want %slb1, lb-lb1", c["name"], c["device_id"], OVNPortPrefix)
	}
	if o, given := c["device_owner"]; given && o != "" {
		t.Errorf("device_owner %v given, want none", o)
	}
	again, err := a.Allocate(fakeTx{}, req)
	if err != nil || again != v || len(f.creates) != 1 {
		t.Fatalf("retry: %+v %v, %d creates; want the same port", again, err, len(f.creates))
	}
	// Made ahead of the create for another Octavia's provider driver,
	// the port comes back as the create's vip_port_id: this load
	// balancer's own, not another's.
	if !a.MakesPortsAhead() || flowlbStyle.MakesPortsAhead() {
		t.Error("ports made ahead with flowlb's style, or not with OVN's")
	}
	named, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb1", PortID: v.PortID})
	if err != nil || !named.Owned || named.PortID != v.PortID {
		t.Fatalf("the port made ahead, named by the create: %+v %v; want it owned", named, err)
	}
	if other, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb2", PortID: v.PortID}); err != nil || other.Owned {
		t.Fatalf("lb1's port named by lb2's create: %+v %v; want it used, not owned", other, err)
	}
	// A port of the older style, made before the deployment changed
	// styles, is still released.
	old, err := flowlbStyle.Allocate(fakeTx{}, lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb0", SubnetID: subnetID})
	if err != nil {
		t.Fatal(err)
	}
	f.ports["provider"] = map[string]any{"id": "provider", "name": OVNPortPrefix + "lb9", "device_id": "lb-lb9", "network_id": netID}
	for _, id := range []string{v.PortID, old.PortID, "provider"} {
		if err := a.Release(nil, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, kept := f.ports["provider"]; !kept || len(f.ports) != 1 {
		t.Fatalf("ports after release %v, want only the unmarked one of ovn-octavia-provider's shape", f.ports)
	}
	if _, err := New(context.Background(), Options{Endpoint: "http://127.0.0.1:1", DeploymentID: "dep-a", Ports: "amphora"}); err == nil {
		t.Error("an unknown port style accepted")
	}
}

// TestReleaseKeepsOthersPorts: a port given as vip_port_id is the user's:
// it is used but neither owned nor deleted.
func TestReleaseKeepsOthersPorts(t *testing.T) {
	f, a := newFake(t)
	f.ports["user-port"] = map[string]any{"id": "user-port", "network_id": netID, "device_owner": "compute:nova",
		"fixed_ips": []any{map[string]any{"subnet_id": subnetID, "ip_address": "198.18.225.99"}}}
	v, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{LoadBalancerID: "lb1", PortID: "user-port"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Owned || v.Address != "198.18.225.99" || v.NetworkID != netID {
		t.Fatalf("VIP %+v", v)
	}
	if err := a.Release(nil, "user-port"); err != nil {
		t.Fatal(err)
	}
	if len(f.deletes) != 0 {
		t.Fatalf("deleted %v", f.deletes)
	}
	if len(f.groups) != 0 || len(f.calls) != 0 {
		t.Fatalf("a user's port: groups %v made, writes %v; want nothing added", f.groups, f.calls)
	}
}

// TestAllocateRefusals: what Neutron does not have or refuses is the
// caller's error, worded as Octavia words it.
func TestAllocateRefusals(t *testing.T) {
	f, a := newFake(t)
	for _, tc := range []struct {
		req  lbaas.VIPRequest
		kind error
		msg  string
	}{
		{lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: "nope"}, lbaas.ErrInvalid, "Subnet nope not found."},
		{lbaas.VIPRequest{LoadBalancerID: "lb1", NetworkID: "nope"}, lbaas.ErrInvalid, "Network nope not found."},
		{lbaas.VIPRequest{LoadBalancerID: "lb1", PortID: "nope"}, lbaas.ErrInvalid, "Port nope not found."},
		{lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: subnetID, NetworkID: "other"}, lbaas.ErrInvalid, "Subnet subnet-1 is not on network other."},
	} {
		_, err := a.Allocate(fakeTx{}, tc.req)
		if !errors.Is(err, tc.kind) || err.Error() != tc.msg {
			t.Errorf("%+v: %v, want %q", tc.req, err, tc.msg)
		}
	}
	if _, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: subnetID, Address: "198.18.225.50"}); err != nil {
		t.Fatal(err)
	}
	_, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{LoadBalancerID: "lb2", SubnetID: subnetID, Address: "198.18.225.50"})
	if !errors.Is(err, lbaas.ErrConflict) || !strings.Contains(err.Error(), "198.18.225.50 already allocated") {
		t.Fatalf("address in use: %v", err)
	}
	if len(f.ports) != 1 {
		t.Fatalf("ports %v", f.ports)
	}
}

// TestCallersTokenDecides: with the caller's token, the subnet, network
// or port asked for is read as the caller (Neutron answers another
// project's as not found, and so does flowlb, in Octavia's words); the
// port is still made with the service's credentials.
func TestCallersTokenDecides(t *testing.T) {
	f, a := newFake(t)
	f.ports["user-port"] = map[string]any{"id": "user-port", "network_id": netID, "device_owner": "compute:nova",
		"fixed_ips": []any{map[string]any{"subnet_id": subnetID, "ip_address": "198.18.225.99"}}}
	for _, tc := range []struct {
		req lbaas.VIPRequest
		msg string
	}{
		{lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: subnetID, Token: strangerToken}, "Subnet subnet-1 not found."},
		{lbaas.VIPRequest{LoadBalancerID: "lb1", NetworkID: netID, Token: strangerToken}, "Network net-1 not found."},
		{lbaas.VIPRequest{LoadBalancerID: "lb1", PortID: "user-port", Token: strangerToken}, "Port user-port not found."},
	} {
		_, err := a.Allocate(fakeTx{}, tc.req)
		if !errors.Is(err, lbaas.ErrInvalid) || err.Error() != tc.msg {
			t.Errorf("%+v: %v, want %q", tc.req, err, tc.msg)
		}
	}
	if err := a.CheckSubnet(nil, lbaas.Access{Project: "p2", Token: strangerToken}, subnetID); !errors.Is(err, lbaas.ErrInvalid) {
		t.Errorf("member subnet of another project: %v, want not found", err)
	}
	if len(f.creates) != 0 {
		t.Fatalf("ports made for a stranger: %v", f.creates)
	}

	if _, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{ProjectID: "p1", LoadBalancerID: "lb1", SubnetID: subnetID, Token: "owners-token"}); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckSubnet(nil, lbaas.Access{Project: "p1", Token: "owners-token"}, subnetID); err != nil {
		t.Fatal(err)
	}
	if got := f.tokens["GET subnets/"+subnetID]; !slices.Equal(got, []string{strangerToken, strangerToken, "owners-token", "owners-token"}) {
		t.Errorf("subnet reads with tokens %q, want the callers'", got)
	}
	if got := f.tokens["POST ports"]; !slices.Equal(got, []string{""}) {
		t.Errorf("port create with tokens %q, want the service's", got)
	}
}

// TestAllocateRefusesOverlap: an address another load balancer holds on
// another network (overlapping tenant subnets) is refused, naming both,
// and the port just made is deleted again.
func TestAllocateRefusesOverlap(t *testing.T) {
	f, a := newFake(t)
	tx := fakeTx{lbs: []lbaas.LoadBalancer{{Base: lbaas.Base{ID: "lb0"}, VIPAddress: "198.18.225.10", VIPPortID: "elsewhere", VIPNetworkID: "net-0"}}}
	_, err := a.Allocate(tx, lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: subnetID})
	if !errors.Is(err, lbaas.ErrConflict) {
		t.Fatalf("got %v, want a conflict", err)
	}
	for _, w := range []string{"198.18.225.10", "network " + netID, "load balancer lb0", "network net-0"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not name %q", err, w)
		}
	}
	if len(f.ports) != 0 || !slices.Equal(f.deletes, []string{"port-1"}) {
		t.Fatalf("ports %v, deleted %v: want the new port deleted", f.ports, f.deletes)
	}
}

func TestOverlap(t *testing.T) {
	lb := &lbaas.LoadBalancer{Base: lbaas.Base{ID: "lb0"}, VIPAddress: "198.18.225.10", VIPPortID: "p0", VIPNetworkID: "n0",
		AdditionalVIPs: []lbaas.AdditionalVIP{{IPAddress: "2001:2::10", PortID: "p0b"}}}
	for _, tc := range []struct {
		v    lbaas.VIP
		want string // "" or a word of the refusal
	}{
		{lbaas.VIP{Address: "198.18.225.11", PortID: "p1", NetworkID: "n1"}, ""},
		{lbaas.VIP{Address: "198.18.225.10", PortID: "p0", NetworkID: "n0"}, ""}, // the same port: shared
		{lbaas.VIP{Address: "198.18.225.10", PortID: "p1", NetworkID: "n1"}, "overlapping"},
		{lbaas.VIP{Address: "198.18.225.10", PortID: "p1", NetworkID: "n0"}, "on port p0"},
		{lbaas.VIP{Address: "2001:2:0::10", PortID: "p2", NetworkID: "n2"}, "2001:2:0::10 of network n2"},
	} {
		got := Overlap(lb, tc.v)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Overlap(%+v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
