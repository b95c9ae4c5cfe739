package octavia

import "github.com/flowlb/flowlb/internal/octavia/fault"

// Op is the kind of request a body is validated for.
type Op int

const (
	OpPost Op = iota
	OpPut
)

// validateBody decodes a request body and validates the object under its
// root key as Octavia's wire type of kind for op.
func validateBody(body []byte, root, kind string, op Op) (map[string]any, error) {
	v, err := decodeRoot(body, root)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fault.BadRequest("Invalid input for field/attribute %s. Value: '%v'. Wrong type. Expected 'dict'", root, render(v))
	}
	o := post
	if op == OpPut {
		o = put
	}
	return validate(kind, o, obj, root)
}

// validateMembers reads a batch member update: {"members": [MemberPOST...]}.
func validateMembers(body []byte) ([]map[string]any, error) {
	v, err := decodeRoot(body, "members")
	if err != nil {
		return nil, err
	}
	xs, ok := v.([]any)
	if !ok {
		return nil, fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'list'", render(v))
	}
	out := make([]map[string]any, 0, len(xs))
	for _, x := range xs {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'dict'", render(x))
		}
		got, err := validate("member", post, m, "members")
		if err != nil {
			return nil, err
		}
		out = append(out, got)
	}
	return out, nil
}
