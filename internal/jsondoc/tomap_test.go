package jsondoc_test

import (
	"encoding/json"
	"math"
	"net/netip"
	"reflect"
	"testing"

	"github.com/flowlb/flowlb/internal/jsondoc"
	"github.com/flowlb/flowlb/internal/lbaas"
)

// viaJSON is what ToMap must equal: encoding/json's round trip.
func viaJSON(t *testing.T, v any) (map[string]any, error) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m, nil
}

// fill sets every settable field of v to a non-zero value derived from
// seed, allocating pointers, slices and maps.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + string(rune('a'+seed%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(seed + 1))
	case reflect.Float64:
		v.SetFloat(float64(seed) + 0.1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed+1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0), seed+1)
		fill(v.Index(1), seed+2)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, seed+1)
		fill(e, seed+2)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fill(f, seed+i)
			}
		}
	}
}

type named string

type marshals struct{ X int }

func (marshals) MarshalJSON() ([]byte, error) { return []byte(`{"y":1}`), nil }

type inner struct {
	A string `json:"a"`
	B int    `json:"b,omitempty"`
}

type embedded struct {
	ID string `json:"id"`
}

type odd struct {
	embedded
	Inner    inner    `json:"inner,omitempty"`
	Inners   []inner  `json:"inners"`
	Empty    []string `json:"empty,omitempty"`
	Zero     float64  `json:"zero,omitempty"`
	Untagged int
	Keys     map[named]string  `json:"keys"`
	Nested   map[string][]*int `json:"nested"`
	hidden   int
}

type conflict struct {
	embedded
	ID string `json:"id"`
}

type withMarshaler struct {
	M marshals `json:"m"`
}

type withInterface struct {
	V any `json:"v"`
}

type withFloat32 struct {
	F float32 `json:"f"`
}

type withAddr struct {
	A netip.Addr `json:"a"`
}

type withString struct {
	N int `json:"n,string"`
}

type withFloat struct {
	F float64 `json:"f"`
}

type withInt struct {
	N int64 `json:"n"`
}

type withName struct {
	S string `json:"s"`
}

// TestToMapIsTheRoundTrip compares ToMap with encoding/json's round trip
// on every object the API renders, empty and filled, and on the values
// whose conversion needs encoding/json's own rules.
func TestToMapIsTheRoundTrip(t *testing.T) {
	seven := 7
	values := map[string]any{
		"odd, filled": &odd{embedded: embedded{ID: "x"}, Inner: inner{A: "a"}, Inners: []inner{{A: "b", B: 2}}, Empty: []string{},
			Zero: math.Copysign(0, -1), Untagged: 3, Keys: map[named]string{"k": "v"}, Nested: map[string][]*int{"n": {&seven, nil}}, hidden: 1},
		"odd, empty":                         odd{},
		"conflicting names":                  conflict{embedded: embedded{ID: "deep"}, ID: "top"},
		"a field with MarshalJSON":           withMarshaler{},
		"an interface field":                 withInterface{V: []int{1}},
		"float32":                            withFloat32{F: 0.1},
		"a TextMarshaler":                    withAddr{A: netip.MustParseAddr("198.18.0.1")},
		"the string option":                  withString{N: 5},
		"an int beyond 2^53":                 withInt{N: 1<<53 + 1},
		"a negative int":                     withInt{N: -12},
		"a float":                            withFloat{F: 1.1},
		"invalid UTF-8":                      withName{S: "a\xffb"},
		"NUL and HTML characters":            withName{S: "a\x00<b>&"},
		"a nil pointer":                      (*inner)(nil),
		"a map, not a struct":                map[string]int{"a": 1},
		"a pointer to a pointer to a struct": func() any { p := &inner{A: "x"}; return &p }(),
	}
	for _, v := range []any{&lbaas.LoadBalancer{}, &lbaas.Listener{}, &lbaas.Pool{}, &lbaas.Member{}, &lbaas.HealthMonitor{},
		&lbaas.L7Policy{}, &lbaas.L7Rule{}, &lbaas.Flavor{}, &lbaas.FlavorProfile{}, &lbaas.AvailabilityZone{}, &lbaas.AZProfile{}} {
		name := reflect.TypeOf(v).Elem().Name()
		values[name+", empty"] = v
		filled := reflect.New(reflect.TypeOf(v).Elem())
		fill(filled.Elem(), 0)
		values[name+", filled"] = filled.Interface()
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			want, wantErr := viaJSON(t, v)
			got, err := jsondoc.ToMap(v)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("error %v, encoding/json's %v", err, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ToMap gave\n%#v\nencoding/json\n%#v", got, want)
			}
		})
	}
}

func TestToMapNaN(t *testing.T) {
	if _, err := jsondoc.ToMap(withFloat{F: math.NaN()}); err == nil {
		t.Error("NaN converted; encoding/json refuses it")
	}
}

func BenchmarkToMap(b *testing.B) {
	x := &lbaas.Member{}
	fill(reflect.ValueOf(x).Elem(), 0)
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			if _, err := jsondoc.ToMap(x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			bs, _ := json.Marshal(x)
			var m map[string]any
			if err := json.Unmarshal(bs, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
