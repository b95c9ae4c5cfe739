package octavia

import (
	"net/http"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// route is a request's path relative to the API root, as segments.
type route struct {
	segs []string
}

// is matches the path against segments, where "*" matches any one.
func (r route) is(pattern ...string) bool {
	if len(pattern) != len(r.segs) {
		return false
	}
	for i, p := range pattern {
		if p != "*" && p != r.segs[i] {
			return false
		}
	}
	return true
}

func (r route) at(i int) string { return r.segs[i] }

// rule is the policy rule Octavia's default policies put on a route, and
// the project it is checked against ("" for the caller's own). Objects of
// other projects are checked again where they are read (package lbaas).
func rule(method string, rt route) (identity.Rule, string) {
	read := method == http.MethodGet
	switch rt.segs[0] {
	case "loadbalancers", "listeners", "pools", "healthmonitors", "l7policies":
		switch {
		case rt.is("loadbalancers", "*", "failover"):
			return identity.RuleAdmin, ""
		case read:
			return identity.RuleRead, ""
		}
		return identity.RuleWrite, ""
	case "quotas":
		switch {
		case rt.is("quotas", "defaults"), rt.is("quotas"):
			return identity.RuleReadQuota, ""
		case read:
			return identity.RuleReadQuota, rt.at(1)
		}
		return identity.RuleWriteQuota, rt.at(1)
	case "providers":
		if rt.is("providers") {
			return identity.RuleRead, ""
		}
		return identity.RuleAdmin, ""
	case "flavors", "availabilityzones":
		if read {
			return identity.RuleRead, ""
		}
		return identity.RuleAdmin, ""
	}
	// Profiles, amphorae and anything else: admin only.
	return identity.RuleAdmin, ""
}

// authorize applies the route's rule, and the global-read rule to a
// project_id filter naming another project.
func authorize(r *http.Request, rt route) error {
	c, _ := identity.FromContext(r.Context())
	rl, target := rule(r.Method, rt)
	if !c.Allow(rl, target) {
		return fault.Forbidden()
	}
	if p := r.URL.Query().Get("project_id"); p != "" && p != c.ProjectID && r.Method == http.MethodGet && len(rt.segs) == 1 {
		global := identity.RuleReadGlobal
		if rt.segs[0] == "quotas" {
			global = identity.RuleReadQuotaGlobal
		}
		if !c.Allow(global, "") {
			return fault.Forbidden()
		}
	}
	return nil
}
