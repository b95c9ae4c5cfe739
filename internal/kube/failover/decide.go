package failover

import (
	"errors"
	"net"
	"net/http"
)

// Outcome is what became of one attempt on one replica, as far as
// sending the request elsewhere goes.
type Outcome int

const (
	// Answered: a response other than 503. The request is done.
	Answered Outcome = iota
	// Unavailable: a 503. The replica refused the request without
	// processing it (e.g. its database is unreachable).
	Unavailable
	// NotSent: no connection (refused, dial timeout, name not resolved).
	// Nothing reached the replica.
	NotSent
	// Lost: the connection broke (reset, closed, timed out) after the
	// request may have been sent: the replica may have processed it.
	Lost
)

func (o Outcome) String() string {
	switch o {
	case Answered:
		return "answered"
	case Unavailable:
		return "unavailable"
	case NotSent:
		return "not sent"
	case Lost:
		return "lost"
	}
	return "unknown"
}

// Classify tells what one round trip's result means for failover.
func Classify(resp *http.Response, err error) Outcome {
	if err == nil {
		if resp.StatusCode == http.StatusServiceUnavailable {
			return Unavailable
		}
		return Answered
	}
	// http.Transport returns dial failures as a *net.OpError with Op
	// "dial"; an error once the connection is up (a write or a read) may
	// come after the replica got the request.
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return NotSent
	}
	return Lost
}

// Retry says whether a request of method that ended in outcome may be sent
// to the next replica. A request that never reached a replica, or that a
// replica refused with 503, may always go elsewhere. One that may have been
// processed may go again only if repeating it does no harm: in Octavia's
// API GET, HEAD, PUT and DELETE are idempotent, a POST creates an object
// each time.
func Retry(method string, outcome Outcome) bool {
	switch outcome {
	case Unavailable, NotSent:
		return true
	case Lost:
		return idempotent(method)
	}
	return false
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}
