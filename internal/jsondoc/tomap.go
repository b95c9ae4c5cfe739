package jsondoc

import (
	"encoding"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// ToMap returns the map that encoding v (a struct or a pointer to one)
// with encoding/json and decoding the result into a map[string]any gives:
// numbers as float64, structs and maps as map[string]any, slices as
// []any, nil pointers, slices and maps as nil. It walks the value instead
// of encoding and parsing it, for the structs of plain fields that the
// API renders; for anything else (methods that marshal, interfaces,
// ambiguous names, invalid UTF-8, NaN) it takes the round trip itself.
func ToMap(v any) (map[string]any, error) {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if rv.Kind() == reflect.Struct {
		if f := fieldsOf(rv.Type()); f != nil {
			if m, ok := structMap(rv, f, 0); ok {
				return m, nil
			}
		}
	}
	return roundTrip(v)
}

func roundTrip(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, Unmarshal(b, &m)
}

// field is one JSON member of a struct: where it is and how it is written.
type field struct {
	name      string
	index     []int
	omitEmpty bool
}

// fieldCache holds each struct type's fields, or nil for a type ToMap
// does not walk.
var fieldCache sync.Map // reflect.Type → []field

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func fieldsOf(t reflect.Type) []field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]field)
	}
	f, ok := collect(t, nil, map[string]bool{})
	if !ok || !walkable(t, map[reflect.Type]bool{}) {
		f = nil
	}
	fieldCache.Store(t, f)
	return f
}

// collect lists t's JSON members in encoding/json's order: fields in
// declaration order, an untagged embedded struct's fields in its place.
// It gives up (false) on what would need encoding/json's rules for
// conflicts and embedding: a name seen twice, embedded pointers, tag
// options other than omitempty.
func collect(t reflect.Type, index []int, seen map[string]bool) ([]field, bool) {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, hasTag := sf.Tag.Lookup("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		idx := append(append([]int(nil), index...), i)
		if sf.Anonymous {
			if sf.Type.Kind() != reflect.Struct || (hasTag && name != "") {
				return nil, false
			}
			inner, ok := collect(sf.Type, idx, seen)
			if !ok {
				return nil, false
			}
			out = append(out, inner...)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if opts != "" && opts != "omitempty" {
			return nil, false
		}
		if name == "" {
			name = sf.Name
		}
		if seen[name] || !validName(name) {
			return nil, false
		}
		seen[name] = true
		out = append(out, field{name: name, index: idx, omitEmpty: opts == "omitempty"})
	}
	return out, true
}

// validName is a tag name encoding/json uses as given (it ignores tags
// with other characters and falls back to the Go name).
func validName(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// walkable reports whether every value of t can be converted by value:
// no marshaling methods, no interfaces, channels, functions or arrays.
func walkable(t reflect.Type, busy map[reflect.Type]bool) bool {
	if busy[t] {
		return true
	}
	busy[t] = true
	if t.Implements(marshalerType) || t.Implements(textMarshalerType) ||
		reflect.PointerTo(t).Implements(marshalerType) || reflect.PointerTo(t).Implements(textMarshalerType) {
		return false
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String, reflect.Float64, reflect.Float32,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	case reflect.Pointer:
		return walkable(t.Elem(), busy)
	case reflect.Slice:
		// []byte is base64 in JSON.
		return t.Elem().Kind() != reflect.Uint8 && walkable(t.Elem(), busy)
	case reflect.Map:
		return t.Key() == reflect.TypeFor[string]() && walkable(t.Elem(), busy)
	case reflect.Struct:
		f, ok := collect(t, nil, map[string]bool{})
		if !ok {
			return false
		}
		for _, x := range f {
			if !walkable(t.FieldByIndex(x.index).Type, busy) {
				return false
			}
		}
		return true
	}
	return false
}

// maxDepth bounds the nesting ToMap follows; deeper values (cycles,
// which encoding/json refuses) take the round trip.
const maxDepth = 64

func structMap(rv reflect.Value, fields []field, depth int) (map[string]any, bool) {
	m := make(map[string]any, len(fields)+1)
	for _, f := range fields {
		fv := rv.FieldByIndex(f.index)
		if f.omitEmpty && empty(fv) {
			continue
		}
		v, ok := value(fv, depth+1)
		if !ok {
			return nil, false
		}
		m[f.name] = v
	}
	return m, true
}

// empty is encoding/json's omitempty test (a struct is never empty).
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String:
		return v.Len() == 0
	case reflect.Pointer:
		return v.IsNil()
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint() == 0
	case reflect.Float64:
		return v.Float() == 0
	}
	return false
}

// value converts one value as its JSON round trip would; false where it
// cannot tell (invalid UTF-8, NaN and infinities, integers a float64
// does not hold exactly).
func value(v reflect.Value, depth int) (any, bool) {
	if depth > maxDepth {
		return nil, false
	}
	switch v.Kind() {
	case reflect.Bool:
		return v.Bool(), true
	case reflect.String:
		s := v.String()
		return s, utf8.ValidString(s)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := v.Int()
		return float64(n), n > -1<<53 && n < 1<<53
	case reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n := v.Uint()
		return float64(n), n < 1<<53
	case reflect.Float64:
		f := v.Float()
		return f, !math.IsNaN(f) && !math.IsInf(f, 0)
	case reflect.Float32:
		// A float32's JSON text is its shortest float32 form, which
		// parses to another float64 than the float32's own value.
		return nil, false
	case reflect.Pointer:
		if v.IsNil() {
			return nil, true
		}
		return value(v.Elem(), depth+1)
	case reflect.Slice:
		if v.IsNil() {
			return nil, true
		}
		out := make([]any, v.Len())
		for i := range out {
			x, ok := value(v.Index(i), depth+1)
			if !ok {
				return nil, false
			}
			out[i] = x
		}
		return out, true
	case reflect.Map:
		if v.IsNil() {
			return nil, true
		}
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			k := it.Key().String()
			x, ok := value(it.Value(), depth+1)
			if !ok || !utf8.ValidString(k) {
				return nil, false
			}
			out[k] = x
		}
		return out, true
	case reflect.Struct:
		f := fieldsOf(v.Type())
		if f == nil {
			return nil, false
		}
		return structMap(v, f, depth)
	}
	return nil, false
}
