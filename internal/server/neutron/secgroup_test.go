package neutron

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

const (
	sgs   = "/v2.0/security-groups"
	rules = "/v2.0/security-group-rules"
)

// ruleShape is a rule as the tests compare it.
func ruleShape(r map[string]any) [4]any {
	return [4]any{r["direction"], r["ethertype"], r["remote_group_id"], r["remote_ip_prefix"]}
}

func TestSecurityGroups(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		a := apiOn(t, e)

		// The default group appears on first use, with Neutron's rules.
		list := a.must(p1, 200, "GET", sgs, "")["security_groups"].([]any)
		if len(list) != 1 {
			t.Fatalf("p1's groups on first use: %v", list)
		}
		def := list[0].(map[string]any)
		defID := def["id"].(string)
		if def["name"] != "default" || def["project_id"] != "p1" || def["tenant_id"] != "p1" || def["stateful"] != true || def["revision_number"] != float64(1) {
			t.Fatalf("default group: %v", def)
		}
		var shapes [][4]any
		for _, r := range def["security_group_rules"].([]any) {
			shapes = append(shapes, ruleShape(r.(map[string]any)))
		}
		for _, want := range [][4]any{{"egress", "IPv4", nil, nil}, {"egress", "IPv6", nil, nil}, {"ingress", "IPv4", defID, nil}, {"ingress", "IPv6", defID, nil}} {
			if !slices.Contains(shapes, want) {
				t.Errorf("default group lacks %v: %v", want, shapes)
			}
		}
		if len(shapes) != 4 {
			t.Errorf("default group has %d rules", len(shapes))
		}
		// Asking again makes no second one.
		if got := listedIDs(a.must(p1, 200, "GET", sgs, ""), "security_groups"); !slices.Equal(got, []string{defID}) {
			t.Fatalf("p1's groups again: %v", got)
		}

		// A new group lets everything out and nothing in.
		web := obj(a.must(p1, 201, "POST", sgs, `{"security_group": {"name": "web", "description": "front"}}`), "security_group")
		webID := web["id"].(string)
		if web["name"] != "web" || web["description"] != "front" || web["stateful"] != true || len(web["security_group_rules"].([]any)) != 2 {
			t.Fatalf("new group: %v", web)
		}
		for _, r := range web["security_group_rules"].([]any) {
			if r.(map[string]any)["direction"] != "egress" {
				t.Errorf("new group has rule %v", r)
			}
		}
		a.refusal(p1, 409, "SecurityGroupDefaultAlreadyExists", "Default security group already exists.", "POST", sgs, `{"security_group": {"name": "default"}}`)
		a.refusal(p1, 400, "HTTPBadRequest", "Unrecognized attribute(s) 'rules'", "POST", sgs, `{"security_group": {"name": "x", "rules": []}}`)
		a.refusal(p1, 403, "PolicyNotAuthorized", "(rule:create_security_group:project_id) is disallowed by policy", "POST", sgs, `{"security_group": {"name": "x", "project_id": "p2"}}`)

		// Rules: Neutron's validation, in its words.
		ingress := func(extra string) string {
			return `{"security_group_rule": {"security_group_id": "` + webID + `", "direction": "ingress"` + extra + `}}`
		}
		for _, tc := range []struct {
			body, typ, msg string
			status         int
		}{
			{`{"security_group_rule": {"security_group_id": "` + webID + `", "direction": "in"}}`, "InvalidInput", "Invalid input for direction. Reason: 'in' is not in ['ingress', 'egress'].", 400},
			{ingress(`, "ethertype": "IPv5"`), "SecurityGroupRuleInvalidEtherType", "Security group rule for ethertype 'IPv5' not supported. Allowed values are ['IPv4', 'IPv6'].", 400},
			{ingress(`, "port_range_min": 80`), "SecurityGroupProtocolRequiredWithPorts", "Must also specify protocol if port range is given.", 400},
			{ingress(`, "protocol": "tcp", "port_range_min": 90, "port_range_max": 80`), "SecurityGroupInvalidPortRange", "For TCP/UDP protocols, port_range_min must be <= port_range_max", 400},
			{ingress(`, "protocol": "tcp", "port_range_min": 70000`), "SecurityGroupInvalidPortValue", "Invalid value for port 70000", 400},
			{ingress(`, "protocol": "gre", "port_range_min": 1`), "SecurityGroupInvalidProtocolForPortRange", "Invalid protocol gre for port range, only supported for TCP, UDP, UDPLITE, SCTP and DCCP.", 400},
			{ingress(`, "remote_ip_prefix": "198.18.0.0/24", "remote_group_id": "` + defID + `"`), "SecurityGroupRemoteGroupAndRemoteIpPrefix", "Only remote_ip_prefix or remote_group_id may be provided.", 400},
			{ingress(`, "remote_ip_prefix": "2001:2::/48"`), "SecurityGroupRuleParameterConflict", "Conflicting value ethertype IPv4 for CIDR 2001:2::/48", 400},
			{ingress(`, "remote_ip_prefix": "nonsense"`), "InvalidInput", "Invalid input for remote_ip_prefix. Reason: 'nonsense' is not a valid IP subnet.", 400},
			{ingress(`, "remote_group_id": "nope"`), "SecurityGroupNotFound", "Security group nope does not exist", 404},
			{`{"security_group_rule": {"security_group_id": "nope", "direction": "ingress"}}`, "SecurityGroupNotFound", "Security group nope does not exist", 404},
		} {
			a.refusal(p1, tc.status, tc.typ, tc.msg, "POST", rules, tc.body)
		}
		if _, out := a.do(p1, "POST", rules, ingress(`, "protocol": "bogus"`)); neutronError(t, out) != "SecurityGroupRuleInvalidProtocol" {
			t.Errorf("bogus protocol: %v", out)
		}

		r80 := obj(a.must(p1, 201, "POST", rules, ingress(`, "protocol": "tcp", "port_range_min": 80, "port_range_max": 80, "remote_ip_prefix": "198.18.0.7/24"`)), "security_group_rule")
		if r80["protocol"] != "tcp" || r80["port_range_min"] != float64(80) || r80["remote_ip_prefix"] != "198.18.0.7/24" ||
			r80["normalized_cidr"] != "198.18.0.0/24" || r80["ethertype"] != "IPv4" || r80["project_id"] != "p1" || r80["security_group_id"] != webID {
			t.Fatalf("rule: %v", r80)
		}
		r80ID := r80["id"].(string)
		// The same rule, by protocol number and with the same network.
		a.refusal(p1, 409, "SecurityGroupRuleExists", "Security group rule already exists. Rule id is "+r80ID+".", "POST", rules,
			ingress(`, "protocol": "6", "port_range_min": 80, "port_range_max": 80, "remote_ip_prefix": "198.18.0.7/24"`))
		udp := obj(a.must(p1, 201, "POST", rules, ingress(`, "protocol": "17", "port_range_min": 53, "remote_group_id": "`+defID+`"`)), "security_group_rule")
		if udp["protocol"] != "17" || udp["port_range_max"] != float64(53) || udp["remote_group_id"] != defID {
			t.Fatalf("udp rule: %v", udp)
		}

		// Filters and show.
		for q, want := range map[string][]string{
			"?security_group_id=" + webID + "&direction=ingress": {r80ID, udp["id"].(string)},
			"?protocol=tcp":             {r80ID},
			"?remote_group_id=" + defID: nil, // the default group's own ingress rules also name it
		} {
			got := listedIDs(a.must(p1, 200, "GET", rules+q, ""), "security_group_rules")
			if want == nil {
				if len(got) != 3 {
					t.Errorf("GET %s: %v", q, got)
				}
				continue
			}
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("GET %s: %v, want %v", q, got, want)
			}
		}
		if got := listedIDs(a.must(p1, 200, "GET", sgs+"?name=web", ""), "security_groups"); !slices.Equal(got, []string{webID}) {
			t.Errorf("by name: %v", got)
		}
		shown := obj(a.must(p1, 200, "GET", sgs+"/"+webID, ""), "security_group")
		if len(shown["security_group_rules"].([]any)) != 4 {
			t.Errorf("shown group has %d rules", len(shown["security_group_rules"].([]any)))
		}

		// Update: name and description; the default group keeps its name.
		up := obj(a.must(p1, 200, "PUT", sgs+"/"+webID, `{"security_group": {"name": "www", "description": "d"}}`), "security_group")
		if up["name"] != "www" || up["description"] != "d" || up["revision_number"] != float64(2) {
			t.Errorf("updated: %v", up)
		}
		a.refusal(p1, 409, "SecurityGroupCannotUpdateDefault", "Updating default security group not allowed.", "PUT", sgs+"/"+defID, `{"security_group": {"name": "x"}}`)
		a.refusal(p1, 400, "HTTPBadRequest", "Unrecognized attribute(s) 'stateful'", "PUT", sgs+"/"+webID, `{"security_group": {"stateful": false}}`)

		// Isolation: p2 sees its own default group only.
		p2groups := a.must(p2, 200, "GET", sgs, "")["security_groups"].([]any)
		if len(p2groups) != 1 || p2groups[0].(map[string]any)["project_id"] != "p2" || p2groups[0].(map[string]any)["id"] == defID {
			t.Fatalf("p2's groups: %v", p2groups)
		}
		for _, r := range a.must(p2, 200, "GET", rules, "")["security_group_rules"].([]any) {
			if r.(map[string]any)["project_id"] != "p2" {
				t.Errorf("p2 sees rule %v", r)
			}
		}
		a.refusal(p2, 404, "SecurityGroupNotFound", "Security group "+webID+" does not exist", "GET", sgs+"/"+webID, "")
		a.refusal(p2, 404, "SecurityGroupNotFound", "Security group "+webID+" does not exist", "PUT", sgs+"/"+webID, `{"security_group": {"name": "x"}}`)
		a.refusal(p2, 404, "SecurityGroupNotFound", "Security group "+webID+" does not exist", "DELETE", sgs+"/"+webID, "")
		a.refusal(p2, 404, "SecurityGroupRuleNotFound", "Security group rule "+r80ID+" does not exist", "GET", rules+"/"+r80ID, "")
		a.refusal(p2, 404, "SecurityGroupRuleNotFound", "Security group rule "+r80ID+" does not exist", "DELETE", rules+"/"+r80ID, "")
		a.refusal(p2, 404, "SecurityGroupNotFound", "Security group "+webID+" does not exist", "POST", rules,
			`{"security_group_rule": {"security_group_id": "`+webID+`", "direction": "ingress"}}`)
		if got := listedIDs(a.must(admin, 200, "GET", sgs+"?project_id=p1", ""), "security_groups"); len(got) != 2 {
			t.Errorf("admin lists p1's groups: %v", got)
		}

		// Ports: groups set on create and update; a group in use stays.
		net := obj(a.must(admin, 201, "POST", "/v2.0/networks", `{"network": {"name": "n", "shared": true}}`), "network")["id"].(string)
		a.must(admin, 201, "POST", "/v2.0/subnets", `{"subnet": {"network_id": "`+net+`", "cidr": "198.19.0.0/24"}}`)
		port := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+net+`", "security_groups": ["`+webID+`"]}}`), "port")
		portID := port["id"].(string)
		if !slices.Equal(anyStrings(port["security_groups"]), []string{webID}) {
			t.Fatalf("port's groups: %v", port["security_groups"])
		}
		a.refusal(p1, 409, "SecurityGroupInUse", "Security Group "+webID+" in use.", "DELETE", sgs+"/"+webID, "")
		got := obj(a.must(p1, 200, "PUT", "/v2.0/ports/"+portID, `{"port": {"security_groups": ["`+defID+`", "`+webID+`"]}}`), "port")
		if !slices.Equal(anyStrings(got["security_groups"]), []string{defID, webID}) || got["revision_number"] != float64(2) {
			t.Fatalf("updated port: %v", got)
		}
		if got := listedIDs(a.must(p1, 200, "GET", "/v2.0/ports?security_groups="+webID, ""), "ports"); !slices.Equal(got, []string{portID}) {
			t.Errorf("ports by group: %v", got)
		}
		p2port := obj(a.must(p2, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+net+`"}}`), "port")["id"].(string)
		a.refusal(p2, 404, "SecurityGroupNotFound", "Security group "+webID+" does not exist", "PUT", "/v2.0/ports/"+p2port, `{"port": {"security_groups": ["`+webID+`"]}}`)
		a.refusal(p1, 409, "PortSecurityPortHasSecurityGroup", "Port has security group associated. Cannot disable port security or ip address until security group is removed",
			"PUT", "/v2.0/ports/"+portID, `{"port": {"port_security_enabled": false}}`)
		a.refusal(p1, 409, "PortSecurityAndIPRequiredForSecurityGroups", "Port security must be enabled and port must have an IP address in order to use security groups.",
			"POST", "/v2.0/ports", `{"port": {"network_id": "`+net+`", "port_security_enabled": false, "security_groups": ["`+webID+`"]}}`)
		off := obj(a.must(p1, 200, "PUT", "/v2.0/ports/"+portID, `{"port": {"port_security_enabled": false, "security_groups": []}}`), "port")
		if off["port_security_enabled"] != false || len(off["security_groups"].([]any)) != 0 {
			t.Fatalf("port security off: %v", off)
		}
		a.refusal(p1, 409, "SecurityGroupCannotRemoveDefault", "Insufficient rights for removing default security group.", "DELETE", sgs+"/"+defID, "")

		// A deleted port leaves its groups.
		other := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+net+`", "security_groups": ["`+webID+`"]}}`), "port")["id"].(string)
		a.refusal(p1, 409, "SecurityGroupInUse", "Security Group "+webID+" in use.", "DELETE", sgs+"/"+webID, "")
		a.must(p1, 204, "DELETE", "/v2.0/ports/"+other, "")

		// Rules go; a group goes with its rules and the rules naming it.
		a.must(p1, 204, "DELETE", rules+"/"+r80ID, "")
		a.refusal(p1, 404, "SecurityGroupRuleNotFound", "Security group rule "+r80ID+" does not exist", "GET", rules+"/"+r80ID, "")
		byWeb := obj(a.must(p1, 201, "POST", rules, `{"security_group_rule": {"security_group_id": "`+defID+`", "direction": "ingress", "remote_group_id": "`+webID+`"}}`), "security_group_rule")["id"].(string)
		a.must(p1, 204, "DELETE", sgs+"/"+webID, "")
		a.refusal(p1, 404, "SecurityGroupNotFound", "Security group "+webID+" does not exist", "GET", sgs+"/"+webID, "")
		a.refusal(p1, 404, "SecurityGroupRuleNotFound", "Security group rule "+byWeb+" does not exist", "GET", rules+"/"+byWeb, "")
		if got := listedIDs(a.must(p1, 200, "GET", rules+"?security_group_id="+webID, ""), "security_group_rules"); len(got) != 0 {
			t.Errorf("rules of a deleted group: %v", got)
		}
		// An admin may delete a default group; it comes back on next use.
		a.must(admin, 204, "DELETE", sgs+"/"+defID, "")
		if got := listedIDs(a.must(p1, 200, "GET", sgs, ""), "security_groups"); !slices.Equal(got, []string{defID}) {
			t.Errorf("default group after an admin deleted it: %v", got)
		}
	})
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestVIPSecurity: the rules of a VIP port's groups reach the load
// balancer's tree with remote groups resolved, and every change to them
// is a change of the load balancer.
func TestVIPSecurity(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		a := apiOn(t, e)
		n := e.network(AdminProject, true)
		s := e.subnet(n.ID, "198.19.0.0/24")
		vip, err := e.allocate(VIPRequest{ProjectID: "p1", SubnetID: s.ID, LoadBalancerID: "lb1"})
		if err != nil {
			t.Fatal(err)
		}
		defID := listedIDs(a.must(p1, 200, "GET", sgs, ""), "security_groups")[0]
		web := obj(a.must(p1, 201, "POST", sgs, `{"security_group": {"name": "web"}}`), "security_group")["id"].(string)
		// A member port in the default group, the remote group of web's rule.
		member := obj(a.must(p1, 201, "POST", "/v2.0/ports", `{"port": {"network_id": "`+n.ID+`", "fixed_ips": [{"ip_address": "198.19.0.50"}]}}`), "port")["id"].(string)
		a.must(p1, 201, "POST", rules, `{"security_group_rule": {"security_group_id": "`+web+`", "direction": "ingress", "protocol": "tcp", "port_range_min": 80, "port_range_max": 81, "remote_ip_prefix": "198.18.0.0/24"}}`)
		a.must(p1, 201, "POST", rules, `{"security_group_rule": {"security_group_id": "`+web+`", "direction": "ingress", "remote_group_id": "`+defID+`"}}`)

		security := func() *lbaas.SecurityRules {
			t.Helper()
			var out map[string]*lbaas.SecurityRules
			if err := e.st.View(context.Background(), func(tx store.ReadTx) error {
				var err error
				out, err = Allocator{}.VIPSecurity(tx, store.Filter{LoadBalancerIDs: []string{"lb1", "lb2"}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return out["lb1"]
		}
		if got := security(); got != nil {
			t.Fatalf("VIP port without groups: %+v", got)
		}
		// changed runs fn and reports whether lb1 got a change.
		changed := func(fn func(tx store.Tx) error) bool {
			t.Helper()
			c, err := e.st.Update(context.Background(), fn)
			if err != nil {
				t.Fatal(err)
			}
			_, ok := c.Changes["lb1"]
			return ok
		}
		setGroups := func(port string, groups ...string) func(tx store.Tx) error {
			return func(tx store.Tx) error {
				d, err := getPortDoc(tx, port)
				if err != nil {
					return err
				}
				if err := setPortGroups(tx, p1, &d, groups); err != nil {
					return err
				}
				return putPort(tx, d, false)
			}
		}
		if !changed(setGroups(vip.PortID, web)) {
			t.Error("setting the VIP port's groups is no change of its load balancer")
		}
		want := []lbaas.IngressRule{
			{Protocol: 6, PortMin: 80, PortMax: 81, Sources: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}},
			{Protocol: lbaas.AnyProtocol, Sources: []netip.Prefix{}},
		}
		if got := security(); got == nil || !equalRules(got.Ingress, want) {
			t.Fatalf("rules: %+v, want %+v", got, want)
		}
		// The member port joins the remote group: a change of lb1.
		if !changed(setGroups(member, defID)) {
			t.Error("a port joining a remote group is no change")
		}
		want[1].Sources = []netip.Prefix{netip.MustParsePrefix("198.19.0.50/32")}
		if got := security(); !equalRules(got.Ingress, want) {
			t.Fatalf("rules with the member: %+v", got.Ingress)
		}
		// A rule of the VIP port's group goes: a change.
		var ruleID string
		if !changed(func(tx store.Tx) error {
			rs, err := groupRules(tx, web)
			for _, r := range rs {
				if r.Protocol != nil {
					ruleID = r.ID
				}
			}
			if err != nil {
				return err
			}
			return deleteRule(tx, p1, ruleID)
		}) {
			t.Error("deleting a rule is no change")
		}
		if got := security(); !equalRules(got.Ingress, want[1:]) {
			t.Fatalf("rules after delete: %+v", got.Ingress)
		}
		// A group nothing of lb1 uses changes: no change of lb1.
		if changed(func(tx store.Tx) error {
			g, err := createGroup(tx, sgCreate{Name: "other"}, "p1")
			if err != nil {
				return err
			}
			_, err = createRule(tx, p1, ruleCreate{SecurityGroupID: g.ID, Direction: "ingress"})
			return err
		}) {
			t.Error("an unrelated group changed lb1")
		}
		// Port security off, or no groups: no filtering.
		if !changed(setGroups(vip.PortID)) {
			t.Error("clearing the groups is no change")
		}
		if got := security(); got != nil {
			t.Fatalf("VIP port without groups again: %+v", got)
		}
		// Releasing the VIP port drops the filter with the port.
		if !changed(setGroups(vip.PortID, web)) {
			t.Error("setting groups again is no change")
		}
		e.release(vip.PortID)
		if got := security(); got != nil {
			t.Fatalf("after release: %+v", got)
		}
	})
}

func equalRules(a, b []lbaas.IngressRule) bool {
	return slices.EqualFunc(a, b, func(x, y lbaas.IngressRule) bool {
		return x.IPv6 == y.IPv6 && x.Protocol == y.Protocol && x.PortMin == y.PortMin && x.PortMax == y.PortMax && slices.Equal(x.Sources, y.Sources)
	})
}
