// Package httpedge is the HTTP edge shared by the Octavia and Neutron
// surfaces: it reads request bodies and says whose fault a failure is,
// refuses text the database must never see (NUL, invalid UTF-8) and
// finds the methods a path is served with. It knows HTTP, not either
// API's error format: each surface words the refusals it returns.
package httpedge

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// Error is a client error found at the edge, with the HTTP status to
// answer and a message for the body.
type Error struct {
	Status  int
	Message string
	Err     error
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }
func (e *Error) Unwrap() error { return e.Err }

// ReadBody reads the whole request body (bounded by the caller with
// http.MaxBytesReader). A failure to read a request body is the client's
// or the network's doing, never the server's: an oversized body is 413,
// a body that stops arriving in time 408, and a truncated body or broken
// chunked encoding 400.
func ReadBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, bodyError(err)
	}
	return b, nil
}

func bodyError(err error) *Error {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Message: "Request body too large.", Err: err}
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return &Error{Status: http.StatusRequestTimeout, Message: "The request body did not arrive in time.", Err: err}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Status: http.StatusBadRequest, Message: "The request body is incomplete: the connection ended before its declared length.", Err: err}
	}
	// net/http's chunked reader and a reset connection: what arrived is
	// not a body.
	return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("The request body could not be read: %v.", err), Err: err}
}

// jsonTypes are the media types wsme (Octavia's request layer) parses as
// JSON.
var jsonTypes = []string{"application/json", "text/javascript", "application/javascript"}

// CheckJSON refuses a body sent with a media type other than JSON as
// wsme does: 415 "Unknown mimetype: <type>". A request without a
// Content-Type is taken as JSON (wsme would refuse it too; flowlb is
// lenient there so that bare HTTP clients keep working).
func CheckJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt = strings.TrimSpace(strings.SplitN(ct, ";", 2)[0])
	}
	if slices.Contains(jsonTypes, strings.ToLower(mt)) {
		return nil
	}
	return &Error{Status: http.StatusUnsupportedMediaType, Message: "Unknown mimetype: " + mt}
}

// CheckUTF8 refuses a body that is not valid UTF-8. encoding/json would
// replace the bad bytes silently, storing text the client did not send.
func CheckUTF8(body []byte) error {
	if utf8.Valid(body) {
		return nil
	}
	return &Error{Status: http.StatusBadRequest, Message: "Invalid input: the request body is not valid UTF-8."}
}

// CheckURL refuses a path or query that is invalid UTF-8 or holds a NUL
// once unescaped: such a value reaches the database as an ID or filter,
// and PostgreSQL refuses NUL in text with an error of its own.
func CheckURL(r *http.Request) error {
	for _, s := range []string{r.URL.Path, r.URL.RawQuery} {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return &Error{Status: http.StatusBadRequest, Message: "Invalid input: the request URL holds a NUL character or invalid UTF-8."}
		}
	}
	for k, vs := range r.URL.Query() {
		for _, v := range append(vs, k) {
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				return &Error{Status: http.StatusBadRequest, Message: "Invalid input: the request URL holds a NUL character or invalid UTF-8."}
			}
		}
	}
	return nil
}

// FindNUL looks through a decoded JSON value for a string, or an object
// key, holding a NUL character, and returns the name of the attribute
// it is in (the innermost object key; "" at the top level) and the
// offending value.
func FindNUL(v any) (attr string, val string, found bool) {
	return findNUL("", v)
}

func findNUL(attr string, v any) (string, string, bool) {
	switch x := v.(type) {
	case string:
		if strings.ContainsRune(x, 0) {
			return attr, x, true
		}
	case []any:
		for _, e := range x {
			if a, s, ok := findNUL(attr, e); ok {
				return a, s, true
			}
		}
	case map[string]any:
		// In key order, so that the same body always names the same
		// attribute.
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if strings.ContainsRune(k, 0) {
				return k, k, true
			}
			if a, s, ok := findNUL(k, x[k]); ok {
				return a, s, true
			}
		}
	}
	return "", "", false
}

// probeMethods are the methods Allowed tries; HEAD follows GET in
// net/http's mux and is not listed on its own.
var probeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Allowed lists the methods mux serves r's path with, not counting its
// fallback pattern (the catch-all that answers unknown routes).
func Allowed(mux *http.ServeMux, r *http.Request, fallback string) []string {
	var out []string
	for _, m := range probeMethods {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != fallback {
			out = append(out, m)
		}
	}
	return out
}

// SetAllow sets the Allow header a 405 must carry.
func SetAllow(w http.ResponseWriter, methods []string) {
	w.Header().Set("Allow", strings.Join(methods, ", "))
}
