// Package jsondoc decodes the JSON documents flowlb wrote itself with
// encoding/json (stored objects) and encodes the APIs' answers, faster
// than encoding/json does, with encoding/json's result.
//
// The decoder and the encoder are github.com/go-json-experiment/json, the
// prototype of Go's encoding/json/v2, about three times faster on the
// store's objects. Where its rules are stricter than encoding/json's
// (duplicate names, invalid UTF-8 or escapes, anything else it refuses),
// encoding/json decodes (or encodes) the document instead. Clients'
// request bodies are not this package's: the Octavia API reads them with
// a decoder of its own (internal/server/octavia, decode.go).
package jsondoc

import (
	"encoding/json"
	"reflect"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// opts are encoding/json's rules for names: matched without regard to
// case (an exact match first), underscores and dashes significant.
var opts = jsonv2.JoinOptions(jsonv2.MatchCaseInsensitiveNames(true), jsonv1.MatchCaseSensitiveDelimiter(true))

// Unmarshal decodes data into v, a pointer to a fresh (zero) value, as
// encoding/json.Unmarshal does.
func Unmarshal(data []byte, v any) error {
	if err := jsonv2.Unmarshal(data, v, opts); err == nil {
		return nil
	}
	// A zero value again, so that what the fast decoder set before it
	// stopped does not leak into encoding/json's result.
	reset(v)
	return json.Unmarshal(data, v)
}

// reset sets what v points to back to its zero value.
func reset(v any) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
}
