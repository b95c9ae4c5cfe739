package octavia

// The request validator this package had before the one-pass decoder: it
// decoded a body into encoding/json's generic map, validated the map
// against the wire types (kinds) and turned the result into the typed
// request through JSON. Kept verbatim as the oracle that FuzzDecode and
// TestDecodeAsBefore hold the decoder to: the same typed request, or the
// same refusal word for word. Only where a map's order chose (which of
// several unknown root keys, which of several bad insert_headers entries)
// does it now take the first in key order, as the decoder does.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/flowlb/flowlb/internal/server/httpedge"
	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

func legacyInvalid(name string, v any, why string) error {
	return fault.BadRequest("Invalid input for field/attribute %s. Value: '%v'. %s", name, legacyRender(v), why)
}

func legacyRender(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "True"
		}
		return "False"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func legacyIsUUID(s string) bool {
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// validate checks obj against kind's fields for a request of the given
// place and returns the accepted attributes, with integers as int64.
func legacyValidate(kind string, at where, obj map[string]any, argument string) (map[string]any, error) {
	fields, byName := kinds[kind], legacyFieldsByName[kind]
	var unknown []string
	for k := range obj {
		if f, ok := byName[k]; !ok || f.where&at == 0 {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fault.BadRequest("Unknown attribute for argument %s: %s", argument, strings.Join(unknown, ", "))
	}
	out := map[string]any{}
	for _, f := range fields {
		if f.where&at == 0 {
			continue
		}
		v, present := obj[f.name]
		if !present {
			if f.mandatory&at != 0 {
				return nil, fault.BadRequest("Invalid input for field/attribute %s. Value: 'Unset'. Mandatory field missing.", f.name)
			}
			// Defaults are the domain's: filling them here would make a
			// by-name pool reference look like a pool definition.
			continue
		}
		if v == nil {
			if f.mandatory&at != 0 {
				return nil, fault.BadRequest("Invalid input for field/attribute %s. Value: 'None'. Mandatory field missing.", f.name)
			}
			out[f.name] = nil
			continue
		}
		got, err := legacyCheck(f, at, v, argument)
		if err != nil {
			return nil, err
		}
		out[f.name] = got
	}
	return out, nil
}

// check validates one present, non-null value of field f.
func legacyCheck(f field, at where, v any, argument string) (any, error) {
	switch f.t {
	case tString, tURL, tURLPath:
		return legacyCheckString(f, v)
	case tInt:
		return legacyCheckInt(f, v)
	case tBool:
		b, ok := v.(bool)
		if !ok {
			return nil, legacyWrongType(f, v, "<class 'bool'>")
		}
		return b, nil
	case tUUID:
		s, ok := v.(string)
		if !ok || !legacyIsUUID(s) {
			return nil, legacyInvalid(f.name, v, "Value should be UUID format")
		}
		return s, nil
	case tIP:
		s, ok := v.(string)
		if _, err := netip.ParseAddr(s); !ok || err != nil {
			return nil, legacyInvalid(f.name, v, "Value should be IPv4 or IPv6 format")
		}
		return s, nil
	case tFloatEnum:
		return legacyCheckFloatEnum(f, v)
	case tStringList, tCIDRList, tUUIDList:
		return legacyCheckStringList(f, v)
	case tDict:
		return legacyCheckDict(f, v)
	case tObject:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, legacyWrongType(f, v, "dict")
		}
		// Session persistence is validated as its pool is; every other
		// nested object as part of a create.
		nestedAt := nested
		if f.nested == "session_persistence" {
			nestedAt = at
		}
		return legacyValidate(f.nested, nestedAt, m, argument+"."+f.name)
	case tObjectList:
		return legacyCheckObjectList(f, v, argument)
	}
	return nil, fmt.Errorf("field %s: unhandled type", f.name)
}

func legacyWrongType(f field, v any, want string) error {
	return legacyInvalid(f.name, v, fmt.Sprintf("Wrong type. Expected '%s', got '%s'", want, legacyTypeName(v)))
}

// checkString validates a string, an enumeration, a URL or a URL path.
func legacyCheckString(f field, v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, legacyWrongType(f, v, "<class 'str'>")
	}
	if f.maxLen > 0 && len([]rune(s)) > f.maxLen {
		return nil, legacyInvalid(f.name, v, fmt.Sprintf("Value should have a maximum character requirement of %d", f.maxLen))
	}
	if f.pattern != nil && !f.pattern.MatchString(s) {
		return nil, legacyInvalid(f.name, v, fmt.Sprintf("Value should match the pattern %s", f.pattern))
	}
	if len(f.enum) > 0 && !legacyContains(f.enum, s) {
		return nil, legacyInvalid(f.name, v, "Value should be one of: "+strings.Join(f.enum, ", "))
	}
	switch f.t {
	case tURL:
		if u, err := url.Parse(s); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, legacyInvalid(f.name, v, "Value must be a valid URL.")
		}
	case tURLPath:
		if u, err := url.Parse(s); err != nil || !strings.HasPrefix(s, "/") || u.Scheme != "" || u.Host != "" {
			return nil, fault.BadRequest("Not a valid URLPath: %s", s)
		}
	}
	return s, nil
}

// checkInt validates an integer within the field's bounds and values.
func legacyCheckInt(f field, v any) (any, error) {
	n, ok := v.(json.Number)
	if s, isStr := v.(string); isStr {
		// wsme converts numeric strings, and the openstack CLI sends
		// some integers (connection_limit, weight) as strings.
		n, ok = json.Number(strings.TrimSpace(s)), true
	}
	if !ok {
		return nil, legacyWrongType(f, v, "<class 'int'>")
	}
	i, err := n.Int64()
	if err != nil {
		return nil, legacyWrongType(f, v, "<class 'int'>")
	}
	if f.min != nil && i < *f.min {
		return nil, legacyInvalid(f.name, v, fmt.Sprintf("Value should be greater or equal to %d", *f.min))
	}
	if f.max != nil && i > *f.max {
		return nil, legacyInvalid(f.name, v, fmt.Sprintf("Value should be lower or equal to %d", *f.max))
	}
	if len(f.enum) > 0 && !legacyContains(f.enum, n.String()) {
		return nil, legacyInvalid(f.name, v, "Value should be one of: "+strings.Join(f.enum, ", "))
	}
	return i, nil
}

// checkFloatEnum validates a number (or, as gophercloud sends
// http_version, a numeric string) that must be one of the field's values.
func legacyCheckFloatEnum(f field, v any) (any, error) {
	var x float64
	switch n := v.(type) {
	case json.Number:
		x, _ = n.Float64()
	case string:
		if _, err := fmt.Sscanf(n, "%g", &x); err != nil {
			return nil, legacyWrongType(f, v, "<class 'float'>")
		}
	default:
		return nil, legacyWrongType(f, v, "<class 'float'>")
	}
	for _, ok := range f.floats {
		if ok == x {
			return x, nil
		}
	}
	return nil, legacyInvalid(f.name, v, "Value should be one of: 1.0, 1.1")
}

// checkStringList validates a list of strings, CIDRs or UUIDs.
func legacyCheckStringList(f field, v any) (any, error) {
	xs, ok := v.([]any)
	if !ok {
		return nil, legacyWrongType(f, v, "list")
	}
	out := make([]any, 0, len(xs))
	for _, x := range xs {
		s, ok := x.(string)
		if !ok {
			return nil, legacyInvalid(f.name, v, "Value should be a list of strings")
		}
		switch f.t {
		case tCIDRList:
			if _, err := netip.ParsePrefix(s); err != nil {
				return nil, legacyInvalid(f.name, s, "Value should be a valid CIDR.")
			}
		case tUUIDList:
			if !legacyIsUUID(s) {
				return nil, legacyInvalid(f.name, s, "Value should be UUID format")
			}
		default:
			if f.maxLen > 0 && len([]rune(s)) > f.maxLen {
				return nil, legacyInvalid(f.name, s, fmt.Sprintf("Value should have a maximum character requirement of %d", f.maxLen))
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// checkDict validates a string-to-string map.
func legacyCheckDict(f field, v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, legacyWrongType(f, v, "dict")
	}
	// Deterministic where the map's order chose: the first in key order.
	for _, k := range slices.Sorted(maps.Keys(m)) {
		x := m[k]
		s, ok := x.(string)
		if !ok || len(s) > f.maxLen {
			return nil, legacyInvalid(f.name+"."+k, x, "Value should be a string of at most 255 characters")
		}
	}
	return m, nil
}

// checkObjectList validates a list of nested objects, each as part of a
// create.
func legacyCheckObjectList(f field, v any, argument string) (any, error) {
	xs, ok := v.([]any)
	if !ok {
		return nil, legacyWrongType(f, v, "list")
	}
	out := make([]any, 0, len(xs))
	for _, x := range xs {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, legacyWrongType(f, v, "list of dict")
		}
		got, err := legacyValidate(f.nested, nested, m, argument+"."+f.name)
		if err != nil {
			return nil, err
		}
		out = append(out, got)
	}
	return out, nil
}

func legacyContains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func legacyTypeName(v any) string {
	switch v.(type) {
	case string:
		return "str"
	case json.Number:
		return "int"
	case bool:
		return "bool"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return "NoneType"
}

// fieldsByName indexes each kind's fields by name, once: a batch of
// 20,000 members is validated 20,000 times.
var legacyFieldsByName = func() map[string]map[string]field {
	out := make(map[string]map[string]field, len(kinds))
	for kind, fields := range kinds {
		byName := make(map[string]field, len(fields))
		for _, f := range fields {
			byName[f.name] = f
		}
		out[kind] = byName
	}
	return out
}()

// decodeRoot parses a JSON body and returns the object under root. A
// string holding a NUL character is refused here, before it can reach
// the database (PostgreSQL refuses NUL in text; SQLite would store it).
func legacyDecodeRoot(body []byte, root string) (any, error) {
	// (jsondoc.Object stood in for encoding/json here, with its result.)
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, fault.BadRequest("Invalid JSON body: %v", err)
	}
	if d.More() {
		return nil, fault.BadRequest("Invalid JSON body: trailing data")
	}
	v, ok := m[root]
	if !ok {
		return nil, fault.BadRequest("Missing argument: \"%s\"", root)
	}
	// Deterministic where the map's order chose: the first in key order.
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != root {
			return nil, fault.BadRequest("Unknown argument: \"%s\"", k)
		}
	}
	// JSON has a NUL in a string only as the escape \u0000 (four zeros:
	// no letter case); a body without one needs no walk.
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return v, nil
	}
	if attr, val, found := httpedge.FindNUL(v); found {
		if attr == "" {
			attr = root
		}
		return nil, legacyInvalid(attr, val, "Value should not contain NUL characters")
	}
	return v, nil
}

// validateBody decodes a request body and validates the object under its
// root key as Octavia's wire type of kind.
func legacyValidateBody(body []byte, root, kind string, at where) (map[string]any, error) {
	v, err := legacyDecodeRoot(body, root)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fault.BadRequest("Invalid input for field/attribute %s. Value: '%v'. Wrong type. Expected 'dict'", root, legacyRender(v))
	}
	return legacyValidate(kind, at, obj, root)
}

// typed turns validated attributes into a typed request: the validator
// has normalised every value (integers given as strings are numbers now),
// so their JSON form decodes into T's fields as they are.
func legacyTyped[T any](attrs any) (T, error) {
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
func legacyDecodeMembers[T any](body []byte) ([]T, error) {
	v, err := legacyDecodeRoot(body, "members")
	if err != nil {
		return nil, err
	}
	xs, ok := v.([]any)
	if !ok {
		return nil, fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'list'", legacyRender(v))
	}
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'dict'", legacyRender(x))
		}
		valid, err := legacyValidate("member", create, m, "members")
		if err != nil {
			return nil, err
		}
		member, err := legacyTyped[T](valid)
		if err != nil {
			return nil, err
		}
		out = append(out, member)
	}
	return out, nil
}
