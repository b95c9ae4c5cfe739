package octavia

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/flowlb/flowlb/internal/server/httpedge"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
	"github.com/flowlb/flowlb/internal/server/store"
)

// faultOf is the one translation of an error into Octavia's answer: the
// domain's refusals get their status codes and Octavia's wording, the
// API's own (wire validation, routing) and the edge's (unreadable
// bodies, bad text) pass as they are, and anything else is an internal error, logged.
func faultOf(err error, log *slog.Logger, r *http.Request) *fault.Error {
	var de *lbaas.Error
	if errors.As(err, &de) {
		return refusal(de)
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe
	}
	var ee *httpedge.Error
	if errors.As(err, &ee) {
		return fault.New(ee.Status, "%s", ee.Message)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fault.New(http.StatusRequestEntityTooLarge, "Request body too large.")
	}
	if errors.Is(err, store.ErrUnavailable) {
		log.Warn("database unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		return fault.New(http.StatusServiceUnavailable, "The database is unavailable; try again.")
	}
	log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	return fault.New(http.StatusInternalServerError, "Internal Server Error")
}

// refusal words a domain refusal as Octavia does.
func refusal(e *lbaas.Error) *fault.Error {
	switch e.Kind {
	case lbaas.KindNotFound:
		return fault.NotFound(e.Resource, e.ID)
	case lbaas.KindConflict:
		return fault.Conflict("%s", e.Detail)
	case lbaas.KindForbidden:
		return fault.Forbidden()
	case lbaas.KindQuota:
		return fault.New(http.StatusForbidden, "Quota has been met for resources: %s", e.Resource)
	case lbaas.KindUnsupported:
		if e.Action {
			return fault.New(http.StatusNotImplemented, "Provider '%s' does not support a requested action: %s", e.Provider, e.Detail)
		}
		return fault.NotImplemented(e.Provider, "%s", e.Detail)
	case lbaas.KindInvalid:
		if e.Validation {
			return fault.Validation("%s", e.Detail)
		}
		return fault.BadRequest("%s", e.Detail)
	}
	return fault.New(http.StatusInternalServerError, "Internal Server Error")
}

// fail answers a request with the fault err maps to.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	fault.Write(w, faultOf(err, s.log, r))
}

// methodNotAllowed answers 405 with the methods the path allows.
func methodNotAllowed(w http.ResponseWriter, allowed []string) {
	httpedge.SetAllow(w, allowed)
	fault.Write(w, fault.New(http.StatusMethodNotAllowed, "The method is not allowed for the requested URL."))
}

func notFoundRoute(w http.ResponseWriter) {
	fault.Write(w, fault.New(http.StatusNotFound, "The resource could not be found."))
}
