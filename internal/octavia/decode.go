package octavia

import (
	"encoding/json"
	"net/http"

	"github.com/flowlb/flowlb/internal/httpedge"
	"github.com/flowlb/flowlb/internal/jsondoc"
	"github.com/flowlb/flowlb/internal/octavia/fault"
)

// readBody reads a request body, which must be JSON in UTF-8.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, fault.BadRequest("Missing request body.")
	}
	body, err := httpedge.ReadBody(r)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		if err := httpedge.CheckJSON(r); err != nil {
			return nil, err
		}
	}
	if err := httpedge.CheckUTF8(body); err != nil {
		return nil, err
	}
	return body, nil
}

// decodeRequest reads the body of a POST (where create) or PUT, unwraps
// its root key, validates the object against Octavia's wire type of kind
// and decodes it into the domain's typed request T.
func decodeRequest[T any](r *http.Request, root, kind string, at where) (T, error) {
	var out T
	body, err := readBody(r)
	if err != nil {
		return out, err
	}
	valid, err := validateBody(body, root, kind, at)
	if err != nil {
		return out, err
	}
	return typed[T](valid)
}

// validateBody decodes a request body and validates the object under its
// root key as Octavia's wire type of kind.
func validateBody(body []byte, root, kind string, at where) (map[string]any, error) {
	v, err := decodeRoot(body, root)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fault.BadRequest("Invalid input for field/attribute %s. Value: '%v'. Wrong type. Expected 'dict'", root, render(v))
	}
	return validate(kind, at, obj, root)
}

// typed turns validated attributes into a typed request: the validator
// has normalised every value (integers given as strings are numbers now),
// so their JSON form decodes into T's fields as they are.
func typed[T any](attrs any) (T, error) {
	var out T
	b, err := json.Marshal(attrs)
	if err == nil {
		// encoding/json's result, faster: the document is our own.
		err = jsondoc.Unmarshal(b, &out)
	}
	if err != nil {
		return out, fault.BadRequest("Invalid input: %v", err)
	}
	return out, nil
}

// decodeMembers reads a batch member update: {"members": [MemberPOST...]}.
func decodeMembers[T any](body []byte) ([]T, error) {
	v, err := decodeRoot(body, "members")
	if err != nil {
		return nil, err
	}
	xs, ok := v.([]any)
	if !ok {
		return nil, fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'list'", render(v))
	}
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'dict'", render(x))
		}
		valid, err := validate("member", create, m, "members")
		if err != nil {
			return nil, err
		}
		member, err := typed[T](valid)
		if err != nil {
			return nil, err
		}
		out = append(out, member)
	}
	return out, nil
}
