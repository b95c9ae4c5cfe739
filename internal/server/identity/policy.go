package identity

import "fmt"

// Rule is one of Octavia's policy rule aliases; every API route is
// governed by one of them (docs/operations.md, "RBAC").
type Rule int

// Octavia's rule aliases (octavia/policies/base.py): load-balancer:read,
// :read-global, :write, :read-quota, :read-quota-global, :write-quota, and
// the admin rule.
const (
	RuleRead Rule = iota
	RuleReadGlobal
	RuleWrite
	RuleReadQuota
	RuleReadQuotaGlobal
	RuleWriteQuota
	RuleAdmin
)

func (r Rule) String() string {
	return [...]string{"load-balancer:read", "load-balancer:read-global", "load-balancer:write",
		"load-balancer:read-quota", "load-balancer:read-quota-global", "load-balancer:write-quota", "load-balancer:admin"}[r]
}

// Personas is the set of roles the rules are written for.
type Personas string

// The two persona sets Octavia ships.
const (
	// Advanced: load-balancer_observer, _global_observer, _member,
	// _quota_admin, _admin, and admin.
	Advanced Personas = "advanced"
	// KeystoneDefaultRoles: reader and member scoped to the project,
	// admin and reader scoped to the system, and load-balancer_admin for
	// the admin-only routes.
	KeystoneDefaultRoles Personas = "keystone_default_roles"
)

// ParsePersonas accepts the --rbac values.
func ParsePersonas(s string) (Personas, error) {
	switch p := Personas(s); p {
	case Advanced, KeystoneDefaultRoles:
		return p, nil
	}
	return "", fmt.Errorf("unknown RBAC persona set %q (want %s or %s)", s, Advanced, KeystoneDefaultRoles)
}

// Policy decides what a caller may do.
type Policy struct {
	Personas Personas
}

// Allow reports whether c may act under rule on an object of project
// target ("" for the caller's own project).
func (p Policy) Allow(c Caller, rule Rule, target string) bool {
	if target == "" {
		target = c.ProjectID
	}
	owner := c.ProjectID != "" && target == c.ProjectID
	if p.Personas == KeystoneDefaultRoles {
		// Octavia's keystone_default_roles policy as Octavia runs it, with
		// scope enforcement: deployment-wide rights need a system-scoped
		// token; a project's admin is that project's member. Keystone
		// implies member from admin and reader from member; a token may
		// list only the assigned role, so the implication is applied here.
		member := c.HasRole("member") || c.HasRole("admin")
		reader := member || c.HasRole("reader")
		sysAdmin := c.SystemScope && c.HasRole("admin")
		sysReader := c.SystemScope && reader
		switch rule {
		case RuleRead, RuleReadQuota:
			return sysReader || (owner && reader)
		case RuleReadGlobal, RuleReadQuotaGlobal:
			return sysReader
		case RuleWrite:
			return sysAdmin || (owner && member)
		case RuleWriteQuota:
			return sysAdmin
		default:
			return sysAdmin || c.HasRole("load-balancer_admin")
		}
	}
	admin := c.HasRole("admin") || c.HasRole("load-balancer_admin")
	global := c.HasRole("load-balancer_global_observer")
	quotaAdmin := c.HasRole("load-balancer_quota_admin")
	observer := owner && c.HasRole("load-balancer_observer")
	member := owner && c.HasRole("load-balancer_member")
	switch rule {
	case RuleRead:
		return observer || global || member || admin
	case RuleReadGlobal:
		return global || admin
	case RuleWrite:
		return member || admin
	case RuleReadQuota:
		return observer || global || member || quotaAdmin || admin
	case RuleReadQuotaGlobal:
		return global || quotaAdmin || admin
	case RuleWriteQuota:
		return quotaAdmin || admin
	default:
		return admin
	}
}

// Resolve fills the caller's derived rights: IsAdmin (sees and changes
// every project's objects) and ReadAll (sees every project's). Admin-only
// routes are a separate question (RuleAdmin): under keystone_default_roles
// a load-balancer_admin manages flavors but not other projects' objects.
func (p Policy) Resolve(c Caller) Caller {
	const another = "\x00another project"
	c.IsAdmin = p.Allow(c, RuleWrite, another)
	c.ReadAll = c.IsAdmin || p.Allow(c, RuleReadGlobal, "")
	c.Policy = &p
	return c
}
