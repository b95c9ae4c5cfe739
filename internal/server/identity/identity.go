// Package identity says who is calling: the project and roles of a request.
// The auth mode (noauth, or Keystone tokens) is a middleware that puts a
// Caller into the request context; the API checks it against the RBAC
// policy and handlers only read it.
package identity

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
)

// Caller is the authenticated principal of a request.
type Caller struct {
	UserID    string
	ProjectID string
	Roles     []string
	// SystemScope is a token scoped to the whole deployment (Keystone's
	// system scope "all") rather than to a project.
	SystemScope bool
	// IsAdmin callers see and change every project's objects. In noauth
	// mode every caller is admin, as in Octavia.
	IsAdmin bool
	// ReadAll callers see every project's objects (global observers).
	ReadAll bool
	// Policy, when set, is the RBAC policy the caller is held to; nil
	// means noauth, where everything is allowed.
	Policy *Policy
	// Token is the caller's own Keystone token (empty in noauth and for
	// the server's own work): with it a real Neutron is asked what the
	// caller may see, as Octavia asks with the user's token.
	Token Token
}

// Token is a caller's Keystone token. It prints and logs redacted, so
// that a Caller in a log line or an error does not give it away.
type Token string

func (Token) String() string   { return redacted }
func (Token) GoString() string { return redacted }

// LogValue keeps the token out of slog's output.
func (Token) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText keeps it out of JSON (a Caller logged whole by slog's
// JSON handler).
func (Token) MarshalText() ([]byte, error) { return []byte(redacted), nil }

const redacted = "[token]"

// Allow reports whether the caller may act under rule on an object of
// project target ("" for its own).
func (c Caller) Allow(rule Rule, target string) bool {
	if c.Policy == nil {
		return true
	}
	return c.Policy.Allow(c, rule, target)
}

// HasRole reports whether the caller holds role.
func (c Caller) HasRole(role string) bool { return slices.Contains(c.Roles, role) }

type ctxKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the caller stored in ctx, if any.
func FromContext(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}

// NoAuth is Octavia's auth_strategy=noauth: the project comes from the
// X-Project-Id header (oslo.context), else from defaultProject, and every
// caller is admin.
func NoAuth(defaultProject string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := Caller{ProjectID: r.Header.Get("X-Project-Id"), IsAdmin: true, ReadAll: true, Roles: []string{"admin"}}
		if c.ProjectID == "" {
			c.ProjectID = r.Header.Get("X-Tenant-Id")
		}
		if c.ProjectID == "" {
			c.ProjectID = defaultProject
		}
		c.UserID = r.Header.Get("X-User-Id")
		next.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), c)))
	})
}
