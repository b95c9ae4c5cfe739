package kubelb

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// planWeb is the desired load balancer the Plan cases start from: one
// TCP port with two pods.
func planWeb() *LB {
	return &LB{Name: "kube_service_lab_default_web", Description: "Kubernetes Service default/web",
		Tags: []string{"flowlb:kube-cluster=lab", "flowlb:kube-service=default/web"}, VIP: VIP{SubnetID: "sub-c", Address: "198.19.64.10"},
		Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: DefaultTimeouts,
			Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
				Members: []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.18.2", 8080, "web-2", "n2")}}}}}
}

// planWebActual is what Octavia holds once planWeb is applied, as Load
// reads it.
func planWebActual() *Actual {
	return &Actual{
		LB: &ActualLB{ID: "lb-1", Name: "kube_service_lab_default_web", VIPAddress: "198.19.64.10", VIPSubnetID: "sub-c",
			ProvisioningStatus: "ACTIVE", Provider: "flow", Tags: []string{"flowlb:kube-service=default/web", "flowlb:kube-cluster=lab"}},
		Listeners: []ActualListener{actualListener("l-80", "http", "TCP", 80, "p-80",
			ActualMember{"web-2", "198.18.18.2", 8080, []string{"flowlb:node=n2"}},
			ActualMember{"web-1", "198.18.17.2", 8080, []string{"flowlb:node=n1"}})},
	}
}

func actualListener(id, name, proto string, port int, poolID string, members ...ActualMember) ActualListener {
	return ActualListener{ID: id, Name: name, Protocol: proto, ProtocolPort: port, Tags: []string{}, DefaultPoolID: poolID,
		ClientData: 50000, MemberConnect: 5000, MemberData: 50000, TCPInspect: 0,
		Pool: &ActualPool{ID: poolID, Name: name, LBAlgorithm: "ROUND_ROBIN", Members: members}}
}

// call is a Call as the cases write it: the body as JSON, and what is
// awaited on which load balancer ("ACTIVE lb-1").
type call struct {
	method, path, body, creates, await string
}

// put and del are the calls on lb-1's objects, which wait for it to be
// ACTIVE again.
func put(path, body string) call { return call{"PUT", path, body, "", "ACTIVE lb-1"} }
func del(path string) call       { return call{"DELETE", path, "", "", "ACTIVE lb-1"} }
func post(path, body, creates string) call {
	return call{"POST", path, body, creates, "ACTIVE lb-1"}
}

// webCreate is the fully populated create of planWeb.
const webCreate = `{"loadbalancer": {"name": "kube_service_lab_default_web", "description": "Kubernetes Service default/web",
	"tags": ["flowlb:kube-cluster=lab", "flowlb:kube-service=default/web"], "vip_subnet_id": "sub-c", "vip_address": "198.19.64.10",
	"listeners": [{"name": "http", "protocol": "TCP", "protocol_port": 80, "tags": [], "allowed_cidrs": null,
		"timeout_client_data": 50000, "timeout_member_connect": 5000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0,
		"default_pool": {"name": "http", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "session_persistence": null,
			"members": [{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]},
				{"name": "web-2", "address": "198.18.18.2", "protocol_port": 8080, "tags": ["flowlb:node=n2"]}]}}]}}`

const listener80 = `"name": "http", "tags": [], "timeout_client_data": 50000, "timeout_member_connect": 5000,
	"timeout_member_data": 50000, "timeout_tcp_inspect": 0`

func TestPlan(t *testing.T) {
	dns := func(members ...Member) Listener {
		return Listener{Name: "dns", Protocol: "UDP", Port: 53, Timeouts: DefaultTimeouts,
			Pool: Pool{Name: "dns", Protocol: "UDP", Algorithm: "ROUND_ROBIN", Members: members}}
	}
	cases := []struct {
		name   string
		actual func(*Actual) // edits planWebActual
		want   func(*LB)     // edits planWeb
		calls  []call
	}{
		{name: "new Service: one fully populated create",
			actual: func(a *Actual) { *a = Actual{} },
			calls:  []call{{"POST", "lbaas/loadbalancers", webCreate, "loadbalancer", "ACTIVE {loadbalancer}"}}},
		{name: "nothing changed: no call"},
		{name: "tags and members in another order: no call",
			actual: func(a *Actual) {
				a.LB.Tags = []string{"flowlb:kube-cluster=lab", "flowlb:kube-service=default/web"}
				m := a.Listeners[0].Pool.Members
				m[0], m[1] = m[1], m[0]
			}},
		{name: "endpoints: members added and removed in one batch",
			want: func(lb *LB) {
				lb.Listeners[0].Pool.Members = []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.19.2", 8080, "web-3", "n3")}
			},
			calls: []call{put("lbaas/pools/p-80/members", `{"members": [
				{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]},
				{"name": "web-3", "address": "198.18.19.2", "protocol_port": 8080, "tags": ["flowlb:node=n3"]}]}`)}},
		{name: "an endpoint moved to another node: its tags, one batch",
			want: func(lb *LB) { lb.Listeners[0].Pool.Members[1].Tags = []string{"flowlb:node=n3"} },
			calls: []call{put("lbaas/pools/p-80/members", `{"members": [
				{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]},
				{"name": "web-2", "address": "198.18.18.2", "protocol_port": 8080, "tags": ["flowlb:node=n3"]}]}`)}},
		{name: "no endpoints left: an empty batch",
			want:  func(lb *LB) { lb.Listeners[0].Pool.Members = nil },
			calls: []call{put("lbaas/pools/p-80/members", `{"members": []}`)}},
		{name: "algorithm: one pool update",
			want:  func(lb *LB) { lb.Listeners[0].Pool.Algorithm = "SOURCE_IP" },
			calls: []call{put("lbaas/pools/p-80", `{"pool": {"name": "http", "lb_algorithm": "SOURCE_IP", "session_persistence": null}}`)}},
		{name: "session affinity on: one pool update",
			want: func(lb *LB) { lb.Listeners[0].Pool.Persistence = &Persistence{"SOURCE_IP", 600} },
			calls: []call{put("lbaas/pools/p-80",
				`{"pool": {"name": "http", "lb_algorithm": "ROUND_ROBIN", "session_persistence": {"type": "SOURCE_IP", "persistence_timeout": 600}}}`)}},
		{name: "session affinity timeout changed",
			actual: func(a *Actual) { a.Listeners[0].Pool.SessionPersistence = &ActualPersistence{"SOURCE_IP", 10800} },
			want:   func(lb *LB) { lb.Listeners[0].Pool.Persistence = &Persistence{"SOURCE_IP", 600} },
			calls: []call{put("lbaas/pools/p-80",
				`{"pool": {"name": "http", "lb_algorithm": "ROUND_ROBIN", "session_persistence": {"type": "SOURCE_IP", "persistence_timeout": 600}}}`)}},
		{name: "session affinity off",
			actual: func(a *Actual) { a.Listeners[0].Pool.SessionPersistence = &ActualPersistence{"SOURCE_IP", 10800} },
			calls:  []call{put("lbaas/pools/p-80", `{"pool": {"name": "http", "lb_algorithm": "ROUND_ROBIN", "session_persistence": null}}`)}},
		{name: "a port added: listener, pool on it, members on the pool, monitor on the pool",
			want: func(lb *LB) {
				l := dns(member("198.18.17.2", 5353, "web-1", "n1"))
				l.Pool.Monitor = &Monitor{"UDP-CONNECT", 5, 3, 1, 3}
				lb.Listeners = append(lb.Listeners, l)
			},
			calls: []call{
				post("lbaas/listeners", `{"listener": {"name": "dns", "loadbalancer_id": "lb-1", "protocol": "UDP", "protocol_port": 53, "tags": [], "allowed_cidrs": null,
					"timeout_client_data": 50000, "timeout_member_connect": 5000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}`, "listener UDP/53"),
				post("lbaas/pools", `{"pool": {"name": "dns", "listener_id": "{listener UDP/53}", "protocol": "UDP", "lb_algorithm": "ROUND_ROBIN", "session_persistence": null}}`, "pool UDP/53"),
				put("lbaas/pools/{pool UDP/53}/members", `{"members": [{"name": "web-1", "address": "198.18.17.2", "protocol_port": 5353, "tags": ["flowlb:node=n1"]}]}`),
				post("lbaas/healthmonitors", `{"healthmonitor": {"pool_id": "{pool UDP/53}", "type": "UDP-CONNECT", "delay": 5, "timeout": 3, "max_retries": 1, "max_retries_down": 3}}`, ""),
			}},
		{name: "a port added without endpoints: no member call",
			want: func(lb *LB) { lb.Listeners = append(lb.Listeners, dns()) },
			calls: []call{
				post("lbaas/listeners", `{"listener": {"name": "dns", "loadbalancer_id": "lb-1", "protocol": "UDP", "protocol_port": 53, "tags": [], "allowed_cidrs": null,
					"timeout_client_data": 50000, "timeout_member_connect": 5000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}`, "listener UDP/53"),
				post("lbaas/pools", `{"pool": {"name": "dns", "listener_id": "{listener UDP/53}", "protocol": "UDP", "lb_algorithm": "ROUND_ROBIN", "session_persistence": null}}`, "pool UDP/53"),
			}},
		{name: "ports removed: pool then listener, in Octavia's order",
			actual: func(a *Actual) {
				a.Listeners = []ActualListener{actualListener("l-443", "https", "TCP", 443, "p-443"), a.Listeners[0],
					actualListener("l-53", "dns", "UDP", 53, "p-53")}
				a.Listeners[0].Pool, a.Listeners[2].Pool = nil, nil // not read: not wanted
			},
			calls: []call{del("lbaas/pools/p-443"), del("lbaas/listeners/l-443"), del("lbaas/pools/p-53"), del("lbaas/listeners/l-53")}},
		{name: "a port removed whose listener has no pool",
			actual: func(a *Actual) {
				a.Listeners = append(a.Listeners, ActualListener{ID: "l-53", Protocol: "UDP", ProtocolPort: 53})
			},
			calls: []call{del("lbaas/listeners/l-53")}},
		{name: "a listener left without a pool: the pool is created on it",
			actual: func(a *Actual) { a.Listeners[0].DefaultPoolID, a.Listeners[0].Pool = "", nil },
			calls: []call{
				post("lbaas/pools", `{"pool": {"name": "http", "listener_id": "l-80", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "session_persistence": null}}`, "pool TCP/80"),
				put("lbaas/pools/{pool TCP/80}/members", `{"members": [
					{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]},
					{"name": "web-2", "address": "198.18.18.2", "protocol_port": 8080, "tags": ["flowlb:node=n2"]}]}`),
			}},
		{name: "health monitor added",
			want: func(lb *LB) { lb.Listeners[0].Pool.Monitor = &Monitor{"TCP", 5, 3, 1, 3} },
			calls: []call{post("lbaas/healthmonitors",
				`{"healthmonitor": {"pool_id": "p-80", "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 1, "max_retries_down": 3}}`, "")}},
		{name: "health monitor changed: updated in place, without its type",
			actual: func(a *Actual) {
				a.Listeners[0].Pool.HealthMonitorID = "m-80"
				a.Listeners[0].Pool.Monitor = &ActualMonitor{"m-80", "TCP", 5, 3, 1, 3}
			},
			want: func(lb *LB) { lb.Listeners[0].Pool.Monitor = &Monitor{"TCP", 4, 3, 1, 2} },
			calls: []call{put("lbaas/healthmonitors/m-80",
				`{"healthmonitor": {"delay": 4, "timeout": 3, "max_retries": 1, "max_retries_down": 2}}`)}},
		{name: "health monitor of another type: replaced",
			actual: func(a *Actual) {
				a.Listeners[0].Pool.HealthMonitorID = "m-80"
				a.Listeners[0].Pool.Monitor = &ActualMonitor{"m-80", "PING", 5, 3, 1, 3}
			},
			want: func(lb *LB) { lb.Listeners[0].Pool.Monitor = &Monitor{"TCP", 5, 3, 1, 3} },
			calls: []call{del("lbaas/healthmonitors/m-80"), post("lbaas/healthmonitors",
				`{"healthmonitor": {"pool_id": "p-80", "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 1, "max_retries_down": 3}}`, "")}},
		{name: "health monitor removed",
			actual: func(a *Actual) {
				a.Listeners[0].Pool.HealthMonitorID = "m-80"
				a.Listeners[0].Pool.Monitor = &ActualMonitor{"m-80", "TCP", 5, 3, 1, 3}
			},
			calls: []call{del("lbaas/healthmonitors/m-80")}},
		{name: "source ranges set: one listener update",
			want:  func(lb *LB) { lb.Listeners[0].AllowedCIDRs = []string{"198.18.1.0/24", "198.18.16.0/20"} },
			calls: []call{put("lbaas/listeners/l-80", `{"listener": {`+listener80+`, "allowed_cidrs": ["198.18.1.0/24", "198.18.16.0/20"]}}`)}},
		{name: "source ranges removed: allowed_cidrs null",
			actual: func(a *Actual) { a.Listeners[0].AllowedCIDRs = []string{"198.18.1.0/24"} },
			calls:  []call{put("lbaas/listeners/l-80", `{"listener": {`+listener80+`, "allowed_cidrs": null}}`)}},
		{name: "externalTrafficPolicy Local: the listener's tag",
			want: func(lb *LB) { lb.Listeners[0].Tags = []string{"flowlb:local-only"} },
			calls: []call{put("lbaas/listeners/l-80", `{"listener": {"name": "http", "tags": ["flowlb:local-only"], "allowed_cidrs": null,
				"timeout_client_data": 50000, "timeout_member_connect": 5000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}`)}},
		{name: "an external IP added: the listener's tag, in place",
			actual: func(a *Actual) { a.Listeners[0].Tags = []string{"flowlb:external-ip=198.19.200.1"} },
			want: func(lb *LB) {
				lb.Listeners[0].Tags = []string{"flowlb:external-ip=198.19.200.1", "flowlb:external-ip=198.19.200.2"}
			},
			calls: []call{put("lbaas/listeners/l-80", `{"listener": {"name": "http", "tags": ["flowlb:external-ip=198.19.200.1", "flowlb:external-ip=198.19.200.2"], "allowed_cidrs": null,
				"timeout_client_data": 50000, "timeout_member_connect": 5000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}`)}},
		{name: "listener timeouts",
			want: func(lb *LB) { lb.Listeners[0].Timeouts.MemberConnect = 2000 },
			calls: []call{put("lbaas/listeners/l-80", `{"listener": {"name": "http", "tags": [], "allowed_cidrs": null,
				"timeout_client_data": 50000, "timeout_member_connect": 2000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}`)}},
		{name: "load balancer tags: one update",
			want: func(lb *LB) { lb.Tags = append(lb.Tags, "flowlb:kube-uid=u2") },
			calls: []call{put("lbaas/loadbalancers/lb-1",
				`{"loadbalancer": {"tags": ["flowlb:kube-cluster=lab", "flowlb:kube-service=default/web", "flowlb:kube-uid=u2"]}}`)}},
		{name: "an allocated address asked for by subnet only: kept",
			actual: func(a *Actual) { a.LB.VIPAddress = "198.19.64.77" },
			want:   func(lb *LB) { lb.VIP.Address = "" }},
		{name: "type LoadBalancer: the VIP changes, delete and create again",
			want: func(lb *LB) {
				lb.VIP = VIP{SubnetID: "sub-x", Address: "198.19.128.7"}
				lb.AdditionalVIPs = []VIP{{SubnetID: "sub-c", Address: "198.19.64.10"}}
				lb.External = true
			},
			calls: []call{{"DELETE", "lbaas/loadbalancers/lb-1?cascade=true", "", "", "gone lb-1"},
				{"POST", "lbaas/loadbalancers", strings.Replace(webCreate, `"sub-c", "vip_address": "198.19.64.10"`,
					`"sub-x", "vip_address": "198.19.128.7", "additional_vips": [{"subnet_id": "sub-c", "ip_address": "198.19.64.10"}]`, 1),
					"loadbalancer", "ACTIVE {loadbalancer}"}}},
		{name: "back to ClusterIP: the additional VIP goes, delete and create again",
			actual: func(a *Actual) {
				a.LB.VIPSubnetID, a.LB.VIPAddress = "sub-x", "198.19.128.7"
				a.LB.AdditionalVIPs = []ActualVIP{{"sub-c", "198.19.64.10"}}
			},
			calls: []call{{"DELETE", "lbaas/loadbalancers/lb-1?cascade=true", "", "", "gone lb-1"},
				{"POST", "lbaas/loadbalancers", webCreate, "loadbalancer", "ACTIVE {loadbalancer}"}}},
		{name: "everything at once: load balancer, listener, pool, members, monitor, new port, old port",
			actual: func(a *Actual) {
				a.Listeners = append(a.Listeners, actualListener("l-443", "https", "TCP", 443, "p-443"))
				a.Listeners[1].Pool = nil
			},
			want: func(lb *LB) {
				lb.Tags = lb.Tags[:1]
				l := &lb.Listeners[0]
				l.Tags = []string{"flowlb:prefer-close"}
				l.Pool.Algorithm = "SOURCE_IP_PORT"
				l.Pool.Members = l.Pool.Members[:1]
				l.Pool.Monitor = &Monitor{"TCP", 5, 3, 1, 3}
				lb.Listeners = append(lb.Listeners, dns())
			},
			calls: []call{
				put("lbaas/loadbalancers/lb-1", `{"loadbalancer": {"tags": ["flowlb:kube-cluster=lab"]}}`),
				put("lbaas/listeners/l-80", `{"listener": {"name": "http", "tags": ["flowlb:prefer-close"], "allowed_cidrs": null,
					"timeout_client_data": 50000, "timeout_member_connect": 5000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}`),
				put("lbaas/pools/p-80", `{"pool": {"name": "http", "lb_algorithm": "SOURCE_IP_PORT", "session_persistence": null}}`),
				put("lbaas/pools/p-80/members", `{"members": [{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]}]}`),
				post("lbaas/healthmonitors", `{"healthmonitor": {"pool_id": "p-80", "type": "TCP", "delay": 5, "timeout": 3, "max_retries": 1, "max_retries_down": 3}}`, ""),
				post("lbaas/listeners", `{"listener": {"name": "dns", "loadbalancer_id": "lb-1", "protocol": "UDP", "protocol_port": 53, "tags": [], "allowed_cidrs": null,
					"timeout_client_data": 50000, "timeout_member_connect": 5000, "timeout_member_data": 50000, "timeout_tcp_inspect": 0}}`, "listener UDP/53"),
				post("lbaas/pools", `{"pool": {"name": "dns", "listener_id": "{listener UDP/53}", "protocol": "UDP", "lb_algorithm": "ROUND_ROBIN", "session_persistence": null}}`, "pool UDP/53"),
				del("lbaas/pools/p-443"), del("lbaas/listeners/l-443"),
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			actual, want := planWebActual(), planWeb()
			if tc.actual != nil {
				tc.actual(actual)
			}
			if tc.want != nil {
				tc.want(want)
			}
			got := Plan(actual, want)
			exp := make([]call, len(tc.calls))
			for i, c := range tc.calls {
				exp[i] = c
				exp[i].body = canonicalJSON(t, c.body)
			}
			if len(got) != len(exp) {
				t.Errorf("%d calls, want %d:\n%s", len(got), len(exp), describe(got))
			}
			for i := range min(len(got), len(exp)) {
				if g := asCall(t, got[i]); g != exp[i] {
					t.Errorf("call %d:\n got %+v\nwant %+v", i, g, exp[i])
				}
			}
		})
	}
}

func asCall(t *testing.T, c Call) call {
	t.Helper()
	body := ""
	if c.Body != nil {
		b, err := json.Marshal(c.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = canonicalJSON(t, string(b))
	}
	return call{c.Method, c.Path, body, string(c.Creates), c.Await.String() + " " + c.LB}
}

// canonicalJSON is s with its keys sorted and no spaces, "" for "".
func canonicalJSON(t *testing.T, s string) string {
	t.Helper()
	if s == "" {
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v in %s", err, s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func describe(calls []Call) string {
	var b strings.Builder
	for _, c := range calls {
		body, _ := json.Marshal(c.Body)
		fmt.Fprintf(&b, "  %s %s %s → %q, await %s %s\n", c.Method, c.Path, body, c.Creates, c.Await, c.LB)
	}
	return b.String()
}

// TestPlanLeavesInputs: Plan reads actual and want and changes neither
// (the controller keeps want for its events).
func TestPlanLeavesInputs(t *testing.T) {
	actual, want := planWebActual(), planWeb()
	want.Listeners[0].Pool.Monitor = &Monitor{"TCP", 5, 3, 1, 3}
	want.Listeners = append(want.Listeners, Listener{Name: "dns", Protocol: "UDP", Port: 53, Pool: Pool{Name: "dns", Protocol: "UDP"}})
	before, _ := json.Marshal([]any{actual, want})
	if calls := Plan(actual, want); len(calls) != 3 {
		t.Errorf("%d calls, want 3:\n%s", len(calls), describe(calls))
	}
	if after, _ := json.Marshal([]any{actual, want}); string(after) != string(before) {
		t.Errorf("Plan changed its inputs:\n%s\n%s", before, after)
	}
}

func TestPlanMembers(t *testing.T) {
	dns := Listener{Name: "dns", Protocol: "UDP", Port: 53, Timeouts: DefaultTimeouts,
		Pool: Pool{Name: "dns", Protocol: "UDP", Algorithm: "ROUND_ROBIN", Members: []Member{member("198.18.17.2", 5353, "web-1", "n1")}}}
	twoPorts := func(lb *LB) { lb.Listeners = append(lb.Listeners, dns) }
	pools := map[string]string{"TCP/80": "p-80", "UDP/53": "p-53"}
	cases := []struct {
		name       string
		have, want func(*LB) // edit planWeb
		pools      map[string]string
		lbID       string
		ok         bool
		calls      []call
	}{
		{name: "nothing changed: no call", ok: true},
		{name: "members in another order: no call", ok: true,
			want: func(lb *LB) { m := lb.Listeners[0].Pool.Members; m[0], m[1] = m[1], m[0] }},
		{name: "an endpoint added: one batch", ok: true,
			want: func(lb *LB) {
				lb.Listeners[0].Pool.Members = append(lb.Listeners[0].Pool.Members, member("198.18.19.2", 8080, "web-3", "n3"))
			},
			calls: []call{put("lbaas/pools/p-80/members", `{"members": [
				{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]},
				{"name": "web-2", "address": "198.18.18.2", "protocol_port": 8080, "tags": ["flowlb:node=n2"]},
				{"name": "web-3", "address": "198.18.19.2", "protocol_port": 8080, "tags": ["flowlb:node=n3"]}]}`)}},
		{name: "an endpoint moved to another node: its tags, one batch", ok: true,
			want: func(lb *LB) { lb.Listeners[0].Pool.Members[1].Tags = []string{"flowlb:node=n3"} },
			calls: []call{put("lbaas/pools/p-80/members", `{"members": [
				{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]},
				{"name": "web-2", "address": "198.18.18.2", "protocol_port": 8080, "tags": ["flowlb:node=n3"]}]}`)}},
		{name: "no endpoints left: an empty batch", ok: true,
			want:  func(lb *LB) { lb.Listeners[0].Pool.Members = nil },
			calls: []call{put("lbaas/pools/p-80/members", `{"members": []}`)}},
		{name: "two ports, both changed: a batch each, in the listeners' order", ok: true,
			have: twoPorts,
			want: func(lb *LB) {
				twoPorts(lb)
				lb.Listeners[0].Pool.Members = lb.Listeners[0].Pool.Members[:1]
				lb.Listeners[1].Pool.Members = nil
			},
			calls: []call{
				put("lbaas/pools/p-80/members", `{"members": [{"name": "web-1", "address": "198.18.17.2", "protocol_port": 8080, "tags": ["flowlb:node=n1"]}]}`),
				put("lbaas/pools/p-53/members", `{"members": []}`)}},
		{name: "the unchanged port's pool unknown: still a batch for the other", ok: true,
			pools: map[string]string{"TCP/80": "p-80"},
			have:  twoPorts,
			want:  func(lb *LB) { twoPorts(lb); lb.Listeners[0].Pool.Members = nil },
			calls: []call{put("lbaas/pools/p-80/members", `{"members": []}`)}},
		{name: "the changed pool unknown: plan in full",
			pools: map[string]string{"UDP/53": "p-53"},
			want:  func(lb *LB) { lb.Listeners[0].Pool.Members = nil }},
		{name: "no load balancer id: plan in full", lbID: "-",
			want: func(lb *LB) { lb.Listeners[0].Pool.Members = nil }},
		{name: "members and the algorithm: plan in full",
			want: func(lb *LB) { lb.Listeners[0].Pool.Members = nil; lb.Listeners[0].Pool.Algorithm = "SOURCE_IP" }},
		{name: "a listener's source ranges: plan in full",
			want: func(lb *LB) { lb.Listeners[0].AllowedCIDRs = []string{"198.18.1.0/24"} }},
		{name: "a port added: plan in full", want: twoPorts},
		{name: "a port removed: plan in full", have: twoPorts},
		{name: "the load balancer's tags: plan in full",
			want: func(lb *LB) { lb.Tags = append(lb.Tags, "flowlb:kube-uid=u2") }},
		{name: "the VIP: plan in full",
			want: func(lb *LB) { lb.VIP.Address = "198.19.64.11" }},
		{name: "a floating IP asked for: plan in full",
			want: func(lb *LB) { lb.FloatingIP = &FloatingIP{Network: "public"} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			have, want := planWeb(), planWeb()
			if tc.have != nil {
				tc.have(have)
			}
			if tc.want != nil {
				tc.want(want)
			}
			ps := tc.pools
			if ps == nil {
				ps = pools
			}
			lbID := tc.lbID
			switch lbID {
			case "":
				lbID = "lb-1"
			case "-":
				lbID = ""
			}
			before, _ := json.Marshal([]any{have, want})
			got, ok := PlanMembers(lbID, ps, have, want)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v (calls:\n%s)", ok, tc.ok, describe(got))
			}
			if len(got) != len(tc.calls) {
				t.Errorf("%d calls, want %d:\n%s", len(got), len(tc.calls), describe(got))
			}
			for i := range min(len(got), len(tc.calls)) {
				exp := tc.calls[i]
				exp.body = canonicalJSON(t, exp.body)
				if g := asCall(t, got[i]); g != exp {
					t.Errorf("call %d:\n got %+v\nwant %+v", i, g, exp)
				}
			}
			if after, _ := json.Marshal([]any{have, want}); string(after) != string(before) {
				t.Errorf("PlanMembers changed its inputs")
			}
		})
	}
}
