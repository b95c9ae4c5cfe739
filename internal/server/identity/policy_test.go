package identity

import "testing"

func TestPolicy(t *testing.T) {
	type persona struct {
		name   string
		set    Personas
		roles  []string
		system bool // a system-scoped token
	}
	// Allowed rules on the caller's own project, then on another's.
	tests := []struct {
		p          persona
		own, other []Rule
	}{
		{persona{"observer", Advanced, []string{"load-balancer_observer"}, false},
			[]Rule{RuleRead, RuleReadQuota}, nil},
		{persona{"global observer", Advanced, []string{"load-balancer_global_observer"}, false},
			[]Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}, []Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}},
		{persona{"member", Advanced, []string{"load-balancer_member"}, false},
			[]Rule{RuleRead, RuleWrite, RuleReadQuota}, nil},
		{persona{"quota admin", Advanced, []string{"load-balancer_quota_admin"}, false},
			[]Rule{RuleReadQuota, RuleReadQuotaGlobal, RuleWriteQuota}, []Rule{RuleReadQuota, RuleReadQuotaGlobal, RuleWriteQuota}},
		{persona{"lb admin", Advanced, []string{"load-balancer_admin"}, false},
			allRules, allRules},
		{persona{"admin", Advanced, []string{"admin"}, false}, allRules, allRules},
		{persona{"no role", Advanced, []string{"member"}, false}, nil, nil},
		{persona{"reader", KeystoneDefaultRoles, []string{"reader"}, false},
			[]Rule{RuleRead, RuleReadQuota}, nil},
		{persona{"member", KeystoneDefaultRoles, []string{"member", "reader"}, false},
			[]Rule{RuleRead, RuleWrite, RuleReadQuota}, nil},
		{persona{"member without the implied reader", KeystoneDefaultRoles, []string{"member"}, false},
			[]Rule{RuleRead, RuleWrite, RuleReadQuota}, nil},
		{persona{"project admin", KeystoneDefaultRoles, []string{"admin", "member", "reader"}, false},
			[]Rule{RuleRead, RuleWrite, RuleReadQuota}, nil},
		{persona{"system admin", KeystoneDefaultRoles, []string{"admin", "member", "reader"}, true}, allRules, allRules},
		{persona{"system reader", KeystoneDefaultRoles, []string{"reader"}, true},
			[]Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}, []Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}},
		{persona{"system member", KeystoneDefaultRoles, []string{"member", "reader"}, true},
			[]Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}, []Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}},
		{persona{"load-balancer_admin under default roles", KeystoneDefaultRoles, []string{"load-balancer_admin"}, false}, []Rule{RuleAdmin}, []Rule{RuleAdmin}},
		{persona{"other advanced roles under default roles", KeystoneDefaultRoles, []string{"load-balancer_member", "load-balancer_global_observer"}, false}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(string(tc.p.set)+"/"+tc.p.name, func(t *testing.T) {
			pol := Policy{Personas: tc.p.set}
			c := Caller{ProjectID: "a", Roles: tc.p.roles}
			if tc.p.system {
				c = Caller{SystemScope: true, Roles: tc.p.roles}
			}
			for _, r := range allRules {
				if got, want := pol.Allow(c, r, "a"), contains(tc.own, r); got != want {
					t.Errorf("%s on its own project: %v, want %v", r, got, want)
				}
				if got, want := pol.Allow(c, r, "b"), contains(tc.other, r); got != want {
					t.Errorf("%s on another project: %v, want %v", r, got, want)
				}
			}
		})
	}
}

var allRules = []Rule{RuleRead, RuleReadGlobal, RuleWrite, RuleReadQuota, RuleReadQuotaGlobal, RuleWriteQuota, RuleAdmin}

func contains(rs []Rule, r Rule) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func TestNoAuthAllowsEverything(t *testing.T) {
	c := Caller{ProjectID: "a"}
	for _, r := range allRules {
		if !c.Allow(r, "b") {
			t.Errorf("noauth caller refused %s", r)
		}
	}
}
