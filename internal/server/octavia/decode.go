package octavia

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/flowlb/flowlb/internal/server/httpedge"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// The request decoder reads a body once, as a stream of JSON tokens, and
// checks each value against its field of Octavia's wire type (wire.go)
// as it stores it in the domain's typed request (a plan, plan.go, says
// where). What it refuses, it refuses as wsme did, message for message:
//
//   - A body that is not JSON is worded by encoding/json, which reads it
//     again only then (errLegacy). So is one whose root is not an object,
//     and one the tokenizer is stricter about than encoding/json (a lone
//     surrogate escape): encoding/json's result is then read instead.
//   - In an object, unknown attributes come first; then each field in
//     the order the wire type declares it (a missing mandatory one, a
//     null one, a bad value), the first refusal winning, as wsme checks
//     the attributes of its type in order. So the whole object is read
//     before it is judged, and a repeated attribute counts with its last
//     value, as in encoding/json's map.
//   - Absent, null and a value keep their meaning in lbaas.Opt: absent
//     leaves Set false, null sets it with the zero value.
//   - A body holding the escape \u0000 is decoded by encoding/json as
//     well, to name the attribute with the NUL character as before; the
//     database never sees one.

// errLegacy stops the decoder: encoding/json decodes the body instead,
// for its message or for its result.
var errLegacy = errors.New("octavia: body left to encoding/json")

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

// requestDecoder decodes the bodies of one route: the object under root,
// as Octavia's wire type kind in a request at, into T. Its plan is made
// when the route is registered, so that a typed request the wire type
// does not fit stops the server at its start, not a request.
type requestDecoder[T any] struct {
	root string
	plan *plan
}

func newRequestDecoder[T any](root, kind string, at where) requestDecoder[T] {
	return requestDecoder[T]{root: root, plan: planOf(reflect.TypeFor[T](), kind, at)}
}

// read reads and decodes the request's body.
func (rd requestDecoder[T]) read(r *http.Request) (T, error) {
	body, err := readBody(r)
	if err != nil {
		var zero T
		return zero, err
	}
	return rd.decode(body)
}

// decode decodes a body.
func (rd requestDecoder[T]) decode(body []byte) (T, error) {
	var out T
	err := readRoot(body, rd.root, func(dec *decoder) error {
		if dec.d.PeekKind() != '{' {
			return dec.refused(func(v any) error {
				return fault.BadRequest("Invalid input for field/attribute %s. Value: '%v'. Wrong type. Expected 'dict'", rd.root, render(v))
			})
		}
		// The last of repeated roots counts.
		out = *new(T)
		_, err := dec.object(rd.plan, reflect.ValueOf(&out).Elem(), rd.root)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// membersDecoder decodes a batch member update: {"members": [MemberPOST...]}.
type membersDecoder[T any] struct{ plan *plan }

func newMembersDecoder[T any]() membersDecoder[T] {
	return membersDecoder[T]{plan: planOf(reflect.TypeFor[T](), "member", create)}
}

func (md membersDecoder[T]) decode(body []byte) ([]T, error) {
	var out []T
	err := readRoot(body, "members", func(dec *decoder) error {
		if dec.d.PeekKind() != '[' {
			return dec.refused(func(v any) error {
				return fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'list'", render(v))
			})
		}
		if _, err := dec.d.ReadToken(); err != nil {
			return errLegacy
		}
		out = []T{}
		var first error
		for {
			more, err := dec.more()
			if err != nil {
				return err
			}
			if !more {
				return first
			}
			if dec.d.PeekKind() != '{' {
				err := dec.refused(func(v any) error {
					return fault.BadRequest("Invalid input for field/attribute members. Value: '%v'. Wrong type. Expected 'dict'", render(v))
				})
				if err == errLegacy {
					return err
				}
				first = cmp.Or(first, err)
				continue
			}
			var m T
			if _, err := dec.object(md.plan, reflect.ValueOf(&m).Elem(), "members"); err != nil {
				if err == errLegacy {
					return err
				}
				first = cmp.Or(first, err)
				continue
			}
			out = append(out, m)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// nulEscape is how JSON holds a NUL character in a string (four zeros: no
// letter case).
var nulEscape = []byte(`\u0000`)

// readRoot reads a body {"<root>": value}, value reading what is under
// the root key (each time it is given: the last counts).
func readRoot(body []byte, root string, value func(*decoder) error) error {
	if bytes.Contains(body, nulEscape) {
		// PostgreSQL refuses NUL in text and SQLite would store it: a
		// NUL is refused here, naming its attribute as before.
		if _, err := legacyRoot(body, root); err != nil {
			return err
		}
	}
	err := newDecoder(body).root(root, value)
	if err != errLegacy {
		return err
	}
	m, err := legacyRoot(body, root)
	if err != nil {
		return err
	}
	// encoding/json took what the tokenizer refused: read its result.
	canonical, err := json.Marshal(m)
	if err == nil {
		err = newDecoder(canonical).root(root, value)
	}
	if err == errLegacy {
		return fault.BadRequest("Invalid JSON body") // cannot be: the document is encoding/json's
	}
	return err
}

// legacyRoot decodes body with encoding/json, as the API always has, and
// returns the object whose root key it checked, or the refusal: not JSON,
// trailing data, the root missing or not alone, a NUL character.
func legacyRoot(body []byte, root string) (map[string]any, error) {
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
	if k := otherKey(slices.Collect(maps.Keys(m)), root); k != "" {
		return nil, fault.BadRequest("Unknown argument: \"%s\"", k)
	}
	if attr, val, found := httpedge.FindNUL(v); found {
		if attr == "" {
			attr = root
		}
		return nil, invalid(attr, val, "Value should not contain NUL characters")
	}
	return m, nil
}

// otherKey is the first key in key order that is not root, or "".
func otherKey(keys []string, root string) string {
	other := ""
	for _, k := range keys {
		if k != root && (other == "" || k < other) {
			other = k
		}
	}
	return other
}

// decoder is one pass over a body.
type decoder struct {
	body []byte
	d    *jsontext.Decoder
}

// tokenOptions: a repeated name is allowed, its last value counting, as
// in encoding/json.
var tokenOptions = jsontext.AllowDuplicateNames(true)

func newDecoder(body []byte) *decoder {
	// From a bytes.Buffer the tokenizer reads in place, without a copy.
	return &decoder{body: body, d: jsontext.NewDecoder(bytes.NewBuffer(body), tokenOptions)}
}

// root reads the body's one object and what follows it.
func (dec *decoder) root(root string, value func(*decoder) error) error {
	if dec.d.PeekKind() != '{' {
		return errLegacy // encoding/json words it
	}
	if _, err := dec.d.ReadToken(); err != nil {
		return errLegacy
	}
	var found bool
	var names []string
	var refusal error
	for {
		more, err := dec.more()
		if err != nil {
			return err
		}
		if !more {
			break
		}
		name, err := dec.name()
		if err != nil {
			return err
		}
		names = append(names, name)
		if name != root {
			if err := dec.skip(); err != nil {
				return err
			}
			continue
		}
		found = true
		if refusal = value(dec); refusal == errLegacy {
			return refusal
		}
	}
	// encoding/json's Decoder reads the first value, and the API has
	// always asked it for More: what follows may only close something.
	rest := bytes.TrimLeft(dec.body[dec.d.InputOffset():], " \t\r\n")
	if len(rest) > 0 && rest[0] != ']' && rest[0] != '}' {
		return fault.BadRequest("Invalid JSON body: trailing data")
	}
	if !found {
		return fault.BadRequest("Missing argument: \"%s\"", root)
	}
	if k := otherKey(names, root); k != "" {
		return fault.BadRequest("Unknown argument: \"%s\"", k)
	}
	return refusal
}

// more reads up to the next member or element, or past the end of the
// object or array: false there.
func (dec *decoder) more() (bool, error) {
	switch dec.d.PeekKind() {
	case '}', ']':
		if _, err := dec.d.ReadToken(); err != nil {
			return false, errLegacy
		}
		return false, nil
	case 0: // an error, which the next read returns
		return false, errLegacy
	}
	return true, nil
}

func (dec *decoder) name() (string, error) {
	tok, err := dec.d.ReadToken()
	if err != nil {
		return "", errLegacy
	}
	return tok.String(), nil
}

func (dec *decoder) skip() error {
	if dec.d.SkipValue() != nil {
		return errLegacy
	}
	return nil
}

// str reads a string the caller peeked.
func (dec *decoder) str() (string, error) {
	tok, err := dec.d.ReadToken()
	if err != nil {
		return "", errLegacy
	}
	return tok.String(), nil
}

// number reads a number the caller peeked, as its text.
func (dec *decoder) number() (string, error) {
	v, err := dec.d.ReadValue()
	if err != nil {
		return "", errLegacy
	}
	return string(v), nil
}

// refused reads the next value, which its field refuses, and returns the
// refusal refuse words for it, given the value as encoding/json decodes
// it.
func (dec *decoder) refused(refuse func(v any) error) error {
	raw, err := dec.d.ReadValue()
	if err != nil {
		return errLegacy
	}
	return refuse(generic(raw))
}

// generic is what encoding/json decodes a JSON value to, with UseNumber:
// what the messages show.
func generic(raw []byte) any {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	_ = d.Decode(&v) // the tokenizer read it: it is JSON
	return v
}

// fieldState is what an object gave for one field.
type fieldState struct {
	given, null bool
	err         error
}

// object reads the object the caller peeked into dst, a struct of the
// type p was made for, and judges it as a whole once read: unknown
// attributes first, then the fields in declaration order. It returns
// how many fields the object gave.
func (dec *decoder) object(p *plan, dst reflect.Value, argument string) (int, error) {
	if _, err := dec.d.ReadToken(); err != nil {
		return 0, errLegacy
	}
	// The states live on the stack unless a wire type has more fields
	// than it holds.
	var stack [48]fieldState
	var states []fieldState
	if len(p.fields) <= len(stack) {
		states = stack[:len(p.fields)]
	} else {
		states = make([]fieldState, len(p.fields))
	}
	var unknown []string
	for {
		more, err := dec.more()
		if err != nil {
			return 0, err
		}
		if !more {
			break
		}
		name, err := dec.name()
		if err != nil {
			return 0, err
		}
		i, ok := p.byName[name]
		if !ok {
			unknown = append(unknown, name)
			if err := dec.skip(); err != nil {
				return 0, err
			}
			continue
		}
		b, st := &p.fields[i], &states[i]
		st.given = true
		if dec.d.PeekKind() == 'n' {
			if _, err := dec.d.ReadToken(); err != nil {
				return 0, errLegacy
			}
			st.null, st.err = true, nil
			b.setNull(dst)
			continue
		}
		st.null = false
		if st.err = dec.value(b, dst, argument); st.err == errLegacy {
			return 0, errLegacy
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return 0, fault.BadRequest("Unknown attribute for argument %s: %s", argument, strings.Join(slices.Compact(unknown), ", "))
	}
	given := 0
	for i := range p.fields {
		f, st := &p.fields[i].field, states[i]
		mandatory := f.mandatory&p.at != 0
		switch {
		case !st.given && mandatory:
			return 0, fault.BadRequest("Invalid input for field/attribute %s. Value: 'Unset'. Mandatory field missing.", f.name)
		case st.null && mandatory:
			return 0, fault.BadRequest("Invalid input for field/attribute %s. Value: 'None'. Mandatory field missing.", f.name)
		case st.err != nil:
			return 0, st.err
		}
		if st.given {
			given++
		}
	}
	return given, nil
}

// value reads the non-null value of field b into dst, or refuses it.
// Either way it reads the whole value.
func (dec *decoder) value(b *binding, dst reflect.Value, argument string) error {
	f := &b.field
	kind := dec.d.PeekKind()
	switch f.t {
	case tString, tURL, tURLPath:
		if kind != '"' {
			return dec.refused(func(v any) error { return wrongType(f, v, "<class 'str'>") })
		}
		s, err := dec.str()
		if err != nil {
			return err
		}
		if err := checkString(f, s); err != nil {
			return err
		}
		b.target(dst).SetString(s)
	case tUUID, tIP:
		why := "Value should be UUID format"
		if f.t == tIP {
			why = "Value should be IPv4 or IPv6 format"
		}
		if kind != '"' {
			return dec.refused(func(v any) error { return invalid(f.name, v, why) })
		}
		s, err := dec.str()
		if err != nil {
			return err
		}
		if f.t == tUUID && !isUUID(s) {
			return invalid(f.name, s, why)
		}
		if _, err := netip.ParseAddr(s); f.t == tIP && err != nil {
			return invalid(f.name, s, why)
		}
		b.target(dst).SetString(s)
	case tInt:
		var text string
		var given any // the value as given, for the messages
		switch kind {
		case '0':
			n, err := dec.number()
			if err != nil {
				return err
			}
			text, given = n, json.Number(n)
		case '"':
			// wsme converts numeric strings, and the openstack CLI sends
			// some integers (connection_limit, weight) as strings.
			s, err := dec.str()
			if err != nil {
				return err
			}
			text, given = strings.TrimSpace(s), s
		default:
			return dec.refused(func(v any) error { return wrongType(f, v, "<class 'int'>") })
		}
		i, err := checkInt(f, text, given)
		if err != nil {
			return err
		}
		b.target(dst).SetInt(i)
	case tBool:
		if kind != 't' && kind != 'f' {
			return dec.refused(func(v any) error { return wrongType(f, v, "<class 'bool'>") })
		}
		tok, err := dec.d.ReadToken()
		if err != nil {
			return errLegacy
		}
		b.target(dst).SetBool(tok.Bool())
	case tFloatEnum:
		// A number, or (as gophercloud sends http_version) a numeric
		// string.
		var x float64
		var given any
		switch kind {
		case '0':
			n, err := dec.number()
			if err != nil {
				return err
			}
			x, _ = strconv.ParseFloat(n, 64)
			given = json.Number(n)
		case '"':
			s, err := dec.str()
			if err != nil {
				return err
			}
			if _, err := fmt.Sscanf(s, "%g", &x); err != nil {
				return wrongType(f, s, "<class 'float'>")
			}
			given = s
		default:
			return dec.refused(func(v any) error { return wrongType(f, v, "<class 'float'>") })
		}
		x, err := checkFloatEnum(f, x, given)
		if err != nil {
			return err
		}
		b.target(dst).SetFloat(x)
	case tStringList, tCIDRList, tUUIDList:
		if kind != '[' {
			return dec.refused(func(v any) error { return wrongType(f, v, "list") })
		}
		return dec.stringList(b, dst)
	case tDict:
		if kind != '{' {
			return dec.refused(func(v any) error { return wrongType(f, v, "dict") })
		}
		return dec.dict(b, dst)
	case tObject:
		if kind != '{' {
			return dec.refused(func(v any) error { return wrongType(f, v, "dict") })
		}
		return dec.nested(b, b.target(dst), argument+"."+f.name)
	case tObjectList:
		if kind != '[' {
			return dec.refused(func(v any) error { return wrongType(f, v, "list") })
		}
		return dec.objectList(b, dst, argument+"."+f.name)
	default:
		return fmt.Errorf("field %s: unhandled type", f.name)
	}
	return nil
}

// stringList reads a list of strings, CIDRs or UUIDs; the first bad
// element in order is refused.
func (dec *decoder) stringList(b *binding, dst reflect.Value) error {
	f := &b.field
	out := []string{}
	whole, first, err := dec.list('"', func() (refusal, err error) {
		s, err := dec.str()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		return checkListItem(f, s), nil
	})
	switch {
	case err != nil:
		return err
	case whole != nil:
		// The message shows the whole list.
		return invalid(f.name, generic(whole), "Value should be a list of strings")
	case first != nil:
		return first
	}
	b.target(dst).Set(reflect.ValueOf(out))
	return nil
}

// list walks the JSON list at the decoder's position. Each element of
// kind want goes to each, which reads it and answers its refusal, or an
// error that ends the walk (a body the fast path cannot take). Elements
// of another kind are skipped. It answers the list's whole text when
// such an element came before any refusal (the caller's message then
// shows the list), else the first element's refusal in order.
func (dec *decoder) list(want jsontext.Kind, each func() (refusal, err error)) (whole []byte, first, err error) {
	if _, err := dec.d.ReadToken(); err != nil {
		return nil, nil, errLegacy
	}
	start := dec.d.InputOffset() - 1 // the list's '['
	wrongKind := false
	for {
		more, err := dec.more()
		if err != nil {
			return nil, nil, err
		}
		if !more {
			break
		}
		if dec.d.PeekKind() != want {
			if err := dec.skip(); err != nil {
				return nil, nil, err
			}
			if first == nil {
				wrongKind = true
			}
			continue
		}
		refusal, err := each()
		if err != nil {
			return nil, nil, err
		}
		if first == nil && !wrongKind {
			first = refusal
		}
	}
	if wrongKind {
		return dec.body[start:dec.d.InputOffset()], nil, nil
	}
	return nil, first, nil
}

// dict reads a string-to-string map; of its bad entries, the first in key
// order is refused.
func (dec *decoder) dict(b *binding, dst reflect.Value) error {
	f := &b.field
	if _, err := dec.d.ReadToken(); err != nil {
		return errLegacy
	}
	out := map[string]string{}
	var bad map[string]error
	for {
		more, err := dec.more()
		if err != nil {
			return err
		}
		if !more {
			break
		}
		k, err := dec.name()
		if err != nil {
			return err
		}
		var refusal error
		if dec.d.PeekKind() == '"' {
			s, err := dec.str()
			if err != nil {
				return err
			}
			out[k] = s
			refusal = checkDictValue(f, k, s, true, s)
		} else {
			refusal = dec.refused(func(v any) error { return checkDictValue(f, k, v, false, "") })
			if refusal == errLegacy {
				return refusal
			}
		}
		if refusal != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[k] = refusal
		} else {
			delete(bad, k) // a repeated key counts with its last value
		}
	}
	if len(bad) > 0 {
		return bad[slices.Min(slices.Collect(maps.Keys(bad)))]
	}
	b.target(dst).Set(reflect.ValueOf(out))
	return nil
}

// objectList reads a list of nested objects; the first bad element in
// order is refused.
func (dec *decoder) objectList(b *binding, dst reflect.Value, argument string) error {
	f := &b.field
	list := reflect.MakeSlice(b.list, 0, 1)
	whole, first, err := dec.list('{', func() (refusal, err error) {
		list = reflect.Append(list, reflect.Zero(b.list.Elem()))
		if err := dec.nested(b, list.Index(list.Len()-1), argument); err != errLegacy {
			return err, nil
		}
		return nil, errLegacy
	})
	switch {
	case err != nil:
		return err
	case whole != nil:
		// The message shows the whole list.
		return wrongType(f, generic(whole), "list of dict")
	case first != nil:
		return first
	}
	b.target(dst).Set(list)
	return nil
}

// nested reads a nested object the caller peeked into dst.
func (dec *decoder) nested(b *binding, dst reflect.Value, argument string) error {
	if !b.pool {
		_, err := dec.object(b.nested, dst, argument)
		return err
	}
	return dec.nestedPool(b.nested, dst, argument)
}
