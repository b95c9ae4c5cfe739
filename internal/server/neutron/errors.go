package neutron

import "fmt"

// ErrorKind says why the subset refused a request; the HTTP layer turns it
// into a status code (statusOf), the load balancer domain into its own
// refusal (domainErr).
type ErrorKind int

const (
	// KindInvalid: the request's values break a rule.
	KindInvalid ErrorKind = iota + 1
	// KindNotFound: an object the request names does not exist (or the
	// caller may not see it).
	KindNotFound
	// KindConflict: the request clashes with existing objects (addresses
	// taken or exhausted, objects in use).
	KindConflict
	// KindForbidden: the caller may not do this.
	KindForbidden
)

// Error is a refusal in Neutron's terms: its kind, Neutron's exception
// name (the NeutronError body's type) and message.
type Error struct {
	Kind    ErrorKind
	Type    string
	Message string
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

func refuse(kind ErrorKind, typ, format string, args ...any) *Error {
	return &Error{Kind: kind, Type: typ, Message: fmt.Sprintf(format, args...)}
}

func networkNotFound(id string) *Error {
	return refuse(KindNotFound, "NetworkNotFound", "Network %s could not be found.", id)
}

func subnetNotFound(id string) *Error {
	return refuse(KindNotFound, "SubnetNotFound", "Subnet %s could not be found.", id)
}

func portNotFound(id string) *Error {
	return refuse(KindNotFound, "PortNotFound", "Port %s could not be found.", id)
}

func invalidInput(format string, args ...any) *Error {
	return refuse(KindInvalid, "InvalidInput", "Invalid input for operation: "+format+".", args...)
}

func policyDenied(rule string) *Error {
	return refuse(KindForbidden, "PolicyNotAuthorized", "(rule:%s) is disallowed by policy", rule)
}

// badAttr is Neutron's refusal of one attribute's value.
func badAttr(attr, format string, args ...any) *Error {
	return refuse(KindInvalid, "InvalidInput", "Invalid input for %s. Reason: %s.", attr, fmt.Sprintf(format, args...))
}
