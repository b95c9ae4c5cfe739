package lbaas

import "fmt"

// ErrorKind says why the domain refused a request. The API layer turns
// each kind into its status code and wording; the domain never names
// either.
type ErrorKind int

const (
	// KindInvalid: the request breaks a rule of the model.
	KindInvalid ErrorKind = iota + 1
	// KindNotFound: an object the request names does not exist.
	KindNotFound
	// KindConflict: the object is busy (a pending change), or the request
	// clashes with another object (a port, a name, a member address).
	KindConflict
	// KindForbidden: the caller may not do this to this object.
	KindForbidden
	// KindQuota: the change would take the project over its quota.
	KindQuota
	// KindUnsupported: the load balancer's provider cannot serve it.
	KindUnsupported
)

// Error is a refusal by the domain: nothing was changed.
type Error struct {
	Kind ErrorKind
	// Resource and ID name the object that was not found (KindNotFound),
	// or the resource whose quota is met (KindQuota: Resource only), in
	// the API's words ("Load Balancer", "Health Monitor").
	Resource, ID string
	// Provider is the provider that refused (KindUnsupported); Action is
	// set when it refused an action (failover) rather than an option.
	Provider string
	Action   bool
	// Detail is the rule that was broken, in the API's words.
	Detail string
	// Validation marks the refusals the API reports as a validation
	// failure of the request as a whole rather than of one attribute.
	Validation bool
	// NameTaken marks the refusal of a create conditional on its name
	// (the constructor NameTaken).
	NameTaken bool

	sentinel bool
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindNotFound:
		return fmt.Sprintf("%s %s not found", e.Resource, e.ID)
	case KindForbidden:
		return "forbidden by policy"
	case KindQuota:
		return "quota met for " + e.Resource
	case KindUnsupported:
		return fmt.Sprintf("provider %s does not support: %s", e.Provider, e.Detail)
	}
	return e.Detail
}

// Is matches a sentinel of the same kind (ErrNotFound, ErrConflict, ...),
// so callers test the reason with errors.Is.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel && t.Kind == e.Kind
}

// Sentinels for errors.Is: they match any Error of their kind.
var (
	ErrInvalid     = &Error{Kind: KindInvalid, sentinel: true}
	ErrNotFound    = &Error{Kind: KindNotFound, sentinel: true}
	ErrConflict    = &Error{Kind: KindConflict, sentinel: true}
	ErrForbidden   = &Error{Kind: KindForbidden, sentinel: true}
	ErrQuota       = &Error{Kind: KindQuota, sentinel: true}
	ErrUnsupported = &Error{Kind: KindUnsupported, sentinel: true}
)

// NotFound is the refusal for a missing object.
func NotFound(resource, id string) *Error {
	return &Error{Kind: KindNotFound, Resource: resource, ID: id}
}

// Invalid is the refusal of an attribute's value or a missing one.
func Invalid(format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Detail: fmt.Sprintf(format, args...)}
}

// Validation is the refusal of a request that breaks a rule across
// attributes or objects.
func Validation(format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Detail: fmt.Sprintf(format, args...), Validation: true}
}

// Conflict is the refusal of a change that clashes with the current state.
func Conflict(format string, args ...any) *Error {
	return &Error{Kind: KindConflict, Detail: fmt.Sprintf(format, args...)}
}

// NameTaken refuses a create conditional on its name
// (LoadBalancerCreate.UniqueName): load balancer id has that name.
func NameTaken(name, id string) *Error {
	return &Error{Kind: KindConflict, Detail: fmt.Sprintf("Load balancer name %s is in use by load balancer %s.", name, id), NameTaken: true}
}

// Forbidden is the refusal by policy.
func Forbidden() *Error { return &Error{Kind: KindForbidden} }

// QuotaMet is the refusal of a change over the project's quota of resource.
func QuotaMet(resource string) *Error { return &Error{Kind: KindQuota, Resource: resource} }

// Unsupported is a provider's refusal of an option it cannot serve.
func Unsupported(provider, format string, args ...any) *Error {
	return &Error{Kind: KindUnsupported, Provider: provider, Detail: fmt.Sprintf(format, args...)}
}

// UnsupportedAction is a provider's refusal of an action.
func UnsupportedAction(provider, action string) *Error {
	return &Error{Kind: KindUnsupported, Provider: provider, Detail: action, Action: true}
}
