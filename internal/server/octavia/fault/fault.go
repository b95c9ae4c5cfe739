// Package fault writes errors in Octavia's (wsme) body format:
// {"faultcode": "Client"|"Server", "faultstring": "...", "debuginfo": null}.
package fault

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/flowlb/flowlb/internal/server/jsondoc"
)

// Error is an API error with the HTTP status Octavia answers and its message.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// New returns an API error with a formatted message.
func New(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// Common constructors with Octavia's wording.
func BadRequest(format string, args ...any) *Error {
	return New(http.StatusBadRequest, format, args...)
}

// Validation is Octavia's ValidationException: "Validation failure: ...".
func Validation(format string, args ...any) *Error {
	return New(http.StatusBadRequest, "Validation failure: "+format, args...)
}

func NotFound(resource, id string) *Error {
	return New(http.StatusNotFound, "%s %s not found.", resource, id)
}

func Conflict(format string, args ...any) *Error {
	return New(http.StatusConflict, format, args...)
}

func Forbidden() *Error {
	return New(http.StatusForbidden, "Policy does not allow this request to be performed.")
}

// NotImplemented is the provider refusal that octavia-tempest-plugin turns into a skip.
func NotImplemented(provider, format string, args ...any) *Error {
	return New(http.StatusNotImplemented, "Provider '%s' does not support a requested option: %s", provider, fmt.Sprintf(format, args...))
}

type body struct {
	FaultCode   string  `json:"faultcode"`
	FaultString string  `json:"faultstring"`
	DebugInfo   *string `json:"debuginfo"`
}

// Write sends err as an Octavia fault. Errors that are not *Error become 500
// with a generic message; their detail belongs in the log, not the reply.
func Write(w http.ResponseWriter, err error) {
	var fe *Error
	if !errors.As(err, &fe) {
		fe = &Error{Status: http.StatusInternalServerError, Message: "Internal Server Error"}
	}
	code := "Client"
	if fe.Status >= 500 {
		code = "Server"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(fe.Status)
	_ = jsondoc.Encode(w, body{FaultCode: code, FaultString: fe.Message})
}
