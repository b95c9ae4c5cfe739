package octavia

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// A plan binds the fields of one wire type, in one place of a request,
// to the fields of the typed request that holds them: which struct field
// (by its json name, through embedded structs), whether it is an
// lbaas.Opt, and for nested objects the plan of the nested type. The
// decoder follows it; making it checks that every field the wire type
// accepts has a Go field that holds its values.

type plan struct {
	kind string
	at   where
	// fields are the kind's fields a request at may give, in
	// declaration order (the order they are judged in).
	fields []binding
	byName map[string]int
}

type binding struct {
	field
	index []int // of the struct field
	opt   bool  // the struct field is an lbaas.Opt; its Value holds the value
	// nested is the plan of a nested object's type (for a nested pool,
	// of lbaas.PoolCreate); list is the slice type of a list of objects.
	nested *plan
	list   reflect.Type
	pool   bool // the value is an lbaas.NestedPool
}

var (
	nestedPoolType = reflect.TypeFor[lbaas.NestedPool]()
	poolCreateType = reflect.TypeFor[lbaas.PoolCreate]()
	stringsType    = reflect.TypeFor[[]string]()
	dictType       = reflect.TypeFor[map[string]string]()
	optPrefix      = reflect.TypeFor[lbaas.Opt[int]]().PkgPath() + ".Opt["
)

type planKey struct {
	t    reflect.Type
	kind string
	at   where
}

var plans sync.Map // planKey → *plan

// planOf is the plan of kind's wire type in a request at, decoded into
// the struct type t. A type that does not fit the wire type is a
// programming error: planOf panics, when the routes are made.
func planOf(t reflect.Type, kind string, at where) *plan {
	key := planKey{t, kind, at}
	if p, ok := plans.Load(key); ok {
		return p.(*plan)
	}
	p, err := makePlan(t, kind, at)
	if err != nil {
		panic(err)
	}
	plans.Store(key, p)
	return p
}

func makePlan(t reflect.Type, kind string, at where) (*plan, error) {
	fields, ok := kinds[kind]
	if !ok || t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("octavia: no wire type %q, or %s is not a struct", kind, t)
	}
	p := &plan{kind: kind, at: at, byName: map[string]int{}}
	for _, f := range fields {
		if f.where&at == 0 {
			continue
		}
		b, err := bind(t, f, at)
		if err != nil {
			return nil, fmt.Errorf("octavia: %s as %s: %w", t, kind, err)
		}
		p.byName[f.name] = len(p.fields)
		p.fields = append(p.fields, b)
	}
	return p, nil
}

// bind finds the Go field of wire field f in t and checks that it holds
// f's values.
func bind(t reflect.Type, f field, at where) (binding, error) {
	sf, ok := fieldByJSONName(t, f.name)
	if !ok {
		return binding{}, fmt.Errorf("no field for %s", f.name)
	}
	b := binding{field: f, index: sf.Index}
	vt := sf.Type
	if isOpt(vt) {
		b.opt, vt = true, vt.Field(1).Type
	}
	base := vt
	if base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	fits := false
	switch f.t {
	case tString, tURL, tURLPath, tUUID, tIP:
		fits = base.Kind() == reflect.String
	case tInt:
		fits = base.Kind() == reflect.Int || base.Kind() == reflect.Int64
	case tBool:
		fits = base.Kind() == reflect.Bool
	case tFloatEnum:
		fits = base.Kind() == reflect.Float64
	case tStringList, tCIDRList, tUUIDList:
		fits = vt == stringsType
	case tDict:
		fits = vt == dictType
	case tObject:
		fits = base.Kind() == reflect.Struct
		err := b.bindNested(base, f, at)
		if err != nil {
			return b, err
		}
	case tObjectList:
		fits = vt.Kind() == reflect.Slice && vt.Elem().Kind() == reflect.Struct
		if fits {
			b.list = vt
			if err := b.bindNested(vt.Elem(), f, at); err != nil {
				return b, err
			}
		}
	}
	if !fits {
		return b, fmt.Errorf("field %s (%s) cannot hold %s's values", sf.Name, sf.Type, f.name)
	}
	return b, nil
}

// bindNested makes the plan of a nested object of type t.
func (b *binding) bindNested(t reflect.Type, f field, at where) error {
	// Session persistence is checked as its pool is; every other nested
	// object as part of a create.
	nestedAt := nested
	if f.nested == "session_persistence" {
		nestedAt = at
	}
	if t == nestedPoolType {
		b.pool, t = true, poolCreateType
	}
	p, err := makePlan(t, f.nested, nestedAt)
	if err != nil {
		return err
	}
	b.nested = p
	return nil
}

func isOpt(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && strings.HasPrefix(t.PkgPath()+"."+t.Name(), optPrefix) &&
		t.NumField() == 2 && t.Field(0).Name == "Set" && t.Field(0).Type.Kind() == reflect.Bool && t.Field(1).Name == "Value"
}

// fieldByJSONName finds the field t's JSON form calls name: a tagged or
// untagged field, or one of an untagged embedded struct's, the shallowest
// first, as encoding/json resolves them.
func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	type level struct {
		t     reflect.Type
		index []int
	}
	for current := []level{{t, nil}}; len(current) > 0; {
		var next []level
		var found []reflect.StructField
		for _, l := range current {
			for i := range l.t.NumField() {
				sf := l.t.Field(i)
				tag, hasTag := sf.Tag.Lookup("json")
				if tag == "-" {
					continue
				}
				n, _, _ := strings.Cut(tag, ",")
				index := append(append([]int(nil), l.index...), i)
				if sf.Anonymous && n == "" && sf.Type.Kind() == reflect.Struct {
					next = append(next, level{sf.Type, index})
					continue
				}
				if !sf.IsExported() {
					continue
				}
				if !hasTag || n == "" {
					n = sf.Name
				}
				if n == name {
					sf.Index = index
					found = append(found, sf)
				}
			}
		}
		if len(found) == 1 {
			return found[0], true
		}
		if len(found) > 1 {
			return reflect.StructField{}, false // ambiguous: encoding/json ignores it
		}
		current = next
	}
	return reflect.StructField{}, false
}

// target is where a value of b goes in dst: the struct field, or the
// Value of an Opt (then given); a pointer is allocated, and a struct
// zeroed, so that a repeated attribute starts afresh.
func (b *binding) target(dst reflect.Value) reflect.Value {
	v := dst.FieldByIndex(b.index)
	if b.opt {
		v.Field(0).SetBool(true)
		v = v.Field(1)
	}
	if v.Kind() == reflect.Pointer {
		p := reflect.New(v.Type().Elem())
		v.Set(p)
		return p.Elem()
	}
	if v.Kind() == reflect.Struct {
		v.SetZero()
	}
	return v
}

// setNull stores a null: an Opt given with the zero value, else the
// zero value.
func (b *binding) setNull(dst reflect.Value) {
	v := dst.FieldByIndex(b.index)
	if b.opt {
		v.Field(0).SetBool(true)
		v = v.Field(1)
	}
	v.SetZero()
}

// nestedPool reads a pool nested in a create into dst, an
// lbaas.NestedPool: a definition, or, given by its name and nothing
// else, a reference to a pool defined elsewhere in the request (as
// Octavia counts the attributes of the body, a null one among them).
func (dec *decoder) nestedPool(p *plan, dst reflect.Value, argument string) error {
	var def lbaas.PoolCreate
	given, err := dec.object(p, reflect.ValueOf(&def).Elem(), argument)
	if err != nil {
		return err
	}
	n := lbaas.NestedPool{Name: def.Name.Value}
	if given > 1 {
		n.Def = &def
	}
	dst.Set(reflect.ValueOf(n))
	return nil
}
