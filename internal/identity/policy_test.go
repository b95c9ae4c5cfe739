package identity

import "testing"

func TestPolicy(t *testing.T) {
	type persona struct {
		name  string
		set   Personas
		roles []string
	}
	// Allowed rules on the caller's own project, then on another's.
	tests := []struct {
		p          persona
		own, other []Rule
	}{
		{persona{"observer", Advanced, []string{"load-balancer_observer"}},
			[]Rule{RuleRead, RuleReadQuota}, nil},
		{persona{"global observer", Advanced, []string{"load-balancer_global_observer"}},
			[]Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}, []Rule{RuleRead, RuleReadGlobal, RuleReadQuota, RuleReadQuotaGlobal}},
		{persona{"member", Advanced, []string{"load-balancer_member"}},
			[]Rule{RuleRead, RuleWrite, RuleReadQuota}, nil},
		{persona{"quota admin", Advanced, []string{"load-balancer_quota_admin"}},
			[]Rule{RuleReadQuota, RuleReadQuotaGlobal, RuleWriteQuota}, []Rule{RuleReadQuota, RuleReadQuotaGlobal, RuleWriteQuota}},
		{persona{"lb admin", Advanced, []string{"load-balancer_admin"}},
			allRules, allRules},
		{persona{"admin", Advanced, []string{"admin"}}, allRules, allRules},
		{persona{"no role", Advanced, []string{"member"}}, nil, nil},
		{persona{"reader", KeystoneDefaultRoles, []string{"reader"}},
			[]Rule{RuleRead, RuleReadQuota}, nil},
		{persona{"member", KeystoneDefaultRoles, []string{"member", "reader"}},
			[]Rule{RuleRead, RuleWrite, RuleReadQuota}, nil},
		{persona{"admin", KeystoneDefaultRoles, []string{"admin", "member", "reader"}}, allRules, allRules},
		{persona{"advanced role under default roles", KeystoneDefaultRoles, []string{"load-balancer_admin"}}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(string(tc.p.set)+"/"+tc.p.name, func(t *testing.T) {
			pol := Policy{Personas: tc.p.set}
			c := Caller{ProjectID: "a", Roles: tc.p.roles}
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
