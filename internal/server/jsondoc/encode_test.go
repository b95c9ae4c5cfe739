package jsondoc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/octavia"
)

// encodingJSON is what Encode must write.
func encodingJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	err := json.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

// TestEncodeIsEncodingJSON compares Encode's bytes with encoding/json's
// on the values the APIs render (every Octavia answer's root type, empty
// and filled, and the domain's objects), on values needing encoding/json's
// own rules, and on random maps of random strings and numbers.
func TestEncodeIsEncodingJSON(t *testing.T) {
	seven := 7
	values := map[string]any{
		"odd, filled": &odd{embedded: embedded{ID: "x"}, Inner: inner{A: "a"}, Inners: []inner{{A: "b", B: 2}}, Empty: []string{},
			Zero: math.Copysign(0, -1), Untagged: 3, Keys: map[named]string{"k": "v"}, Nested: map[string][]*int{"n": {&seven, nil}}, hidden: 1},
		"conflicting names":        conflict{embedded: embedded{ID: "deep"}, ID: "top"},
		"a field with MarshalJSON": withMarshaler{},
		"an interface field":       withInterface{V: []int{1}},
		"float32":                  withFloat32{F: 0.1},
		"the string option":        withString{N: 5},
		"an int beyond 2^53":       withInt{N: 1<<53 + 1},
		"NUL, HTML and JS line separators": map[string]any{"a\x00<b>&": "x\u2028y\u2029z\t\"\\/é\U0001F600",
			"<": []any{nil, true, false, "&amp;"}},
		"floats at the format's edges": []any{0.0, math.Copysign(0, -1), 1e-6, 1e-7, 9.999999e-7, 1e20, 1e21, 123456789e12,
			math.MaxFloat64, math.SmallestNonzeroFloat64, -1.5e-300, 1.1, float32(0.1), float32(1e21), 5e-324},
		"nil and empty":  map[string]any{"nil slice": []string(nil), "empty slice": []string{}, "nil map": map[string]int(nil), "empty map": map[string]int{}},
		"a time":         map[string]any{"t": time.Date(2026, 11, 28, 5, 0, 0, 123, time.UTC)},
		"sorted keys":    map[string]int{"b": 1, "a": 2, "B": 3, "_": 4, "aa": 5, "é": 6, "": 7},
		"a bare string":  "<x>",
		"nil":            nil,
		"an int map key": map[int]string{10: "a", 9: "b", -1: "c"},
		"json.Number (the Neutron subset renders with UseNumber)": map[string]any{"n": json.Number("12"), "f": json.Number("-1.5e+300"),
			"empty": json.Number(""), "in a slice": []any{json.Number("0")}},
		"json.RawMessage": map[string]any{"raw": json.RawMessage(` { "b" : [1, 2] , "a":"<"} `), "nil": json.RawMessage(nil)},
	}
	for _, v := range append(answers(), &lbaas.LoadBalancer{}, &lbaas.Listener{}, &lbaas.Pool{}, &lbaas.Member{}, &lbaas.HealthMonitor{},
		&lbaas.L7Policy{}, &lbaas.L7Rule{}, &lbaas.Flavor{}, &lbaas.FlavorProfile{}, &lbaas.AvailabilityZone{}, &lbaas.AZProfile{}) {
		name := reflect.TypeOf(v).Elem().Name()
		filled := reflect.New(reflect.TypeOf(v).Elem())
		fill(filled.Elem(), 0)
		values[name+", empty"] = v
		values[name+", filled"] = filled.Interface()
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		values[fmt.Sprintf("random %d", i)] = randomValue(r, 3)
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			want, wantErr := encodingJSON(v)
			var got bytes.Buffer
			err := jsondoc.Encode(&got, v)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("error %v, encoding/json's %v", err, wantErr)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("Encode wrote\n%s\nencoding/json\n%s", got.Bytes(), want)
			}
		})
	}
}

// randomValue is a random JSON-like value of maps, slices, strings (with
// characters every escaping rule touches), numbers and literals.
func randomValue(r *rand.Rand, depth int) any {
	switch k := r.IntN(8); {
	case depth > 0 && k == 0:
		m := map[string]any{}
		for range r.IntN(6) {
			m[randomString(r)] = randomValue(r, depth-1)
		}
		return m
	case depth > 0 && k == 1:
		s := make([]any, r.IntN(5))
		for i := range s {
			s[i] = randomValue(r, depth-1)
		}
		return s
	case k == 2:
		return math.Float64frombits(r.Uint64()&^(0x7ff<<52) | uint64(r.IntN(2046)+1)<<52) // finite
	case k == 3:
		return float64(r.Int64N(1<<60)-1<<59) / math.Pow(10, float64(r.IntN(30)))
	case k == 4:
		return r.IntN(2) == 0
	case k == 5:
		return nil
	default:
		return randomString(r)
	}
}

func randomString(r *rand.Rand) string {
	const alphabet = "aZ09 _-<>&\"\\/\t\n\x00\x1f\x7fé€\u2028\u2029\U0001F600"
	runes := []rune(alphabet)
	var b strings.Builder
	for range r.IntN(8) {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// TestEncodeInvalidUTF8 is the documented difference: invalid UTF-8
// becomes U+FFFD as such, not as the escape, and decodes the same.
func TestEncodeInvalidUTF8(t *testing.T) {
	v := map[string]string{"a\xffb": "c\xfe"}
	var got bytes.Buffer
	if err := jsondoc.Encode(&got, v); err != nil {
		t.Fatal(err)
	}
	want, _ := encodingJSON(v)
	var a, b map[string]string
	if err := json.Unmarshal(got.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || a["a\uFFFDb"] != "c\uFFFD" {
		t.Errorf("decoded %q, encoding/json's %q", a, b)
	}
}

// TestEncodeRefusesAsEncodingJSON: what encoding/json refuses is refused,
// with its error, and nothing is written.
func TestEncodeRefusesAsEncodingJSON(t *testing.T) {
	for _, v := range []any{math.NaN(), map[string]any{"x": math.Inf(1)}, make(chan int), func() {},
		json.Number("1x"), json.Number(`"1"`), json.Number("01"), json.RawMessage("{")} {
		var got bytes.Buffer
		err := jsondoc.Encode(&got, v)
		_, want := encodingJSON(v)
		if err == nil || want == nil || err.Error() != want.Error() || got.Len() != 0 {
			t.Errorf("%T: error %v, wrote %q; encoding/json's error %v", v, err, got.Bytes(), want)
		}
	}
}

// answers are the root types of the Octavia API's answers, zero, each
// behind a pointer.
func answers() []any {
	return []any{&octavia.LoadBalancerRoot{}, &octavia.LoadBalancerFullRoot{}, &octavia.LoadBalancersPage{}, &octavia.ListenersPage{},
		&octavia.PoolsPage{}, &octavia.MembersPage{}, &octavia.HealthMonitorsPage{}, &octavia.L7PoliciesPage{}, &octavia.L7RulesPage{},
		&octavia.FlavorsPage{}, &octavia.FlavorProfilesPage{}, &octavia.AvailabilityZonesPage{}, &octavia.AvailabilityZoneProfilesPage{},
		&octavia.QuotasPage{}, &octavia.StatusRoot{}, &octavia.StatsRoot{}, &octavia.ProvidersRoot{}, &octavia.VersionsRoot{}}
}

func BenchmarkEncode(b *testing.B) {
	var v octavia.MembersPage
	fill(reflect.ValueOf(&v).Elem(), 0)
	v.Members = slices.Repeat(v.Members[:1], 10)
	var buf bytes.Buffer
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			_ = json.NewEncoder(&buf).Encode(v)
		}
	})
	b.Run("jsondoc", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			_ = jsondoc.Encode(&buf, v)
		}
	})
}

// FuzzEncode: any JSON document, decoded by encoding/json into what the
// APIs render (maps, slices, strings, float64 or json.Number, bools,
// nulls, and the Octavia answers' types), is written by Encode byte for
// byte as encoding/json writes it, or refused with its error.
func FuzzEncode(f *testing.F) {
	f.Add(`{"loadbalancer": {"name": "a<b>&c", "tags": ["\u2028", "é"], "weight": 1, "x": 1e21, "y": 1.5e-7, "n": null}}`)
	f.Add(`[0, -0, 1e-6, 123456789012345678901234567890, "\u0000\u001f\"\\/"]`)
	f.Add(`{"loadbalancer": {"listeners": [{"l7policies": [{"rules": [{"key": "<&>", "tags": ["\u2028"]}]}], "insert_headers": {"b": "1", "a": "2"},
		"hsts_max_age": 9007199254740993}], "pools": [{"healthmonitor": {"http_version": 1e21}, "session_persistence": {"type": "x"}}], "additional_vips": [{}]}}`)
	f.Fuzz(func(t *testing.T, data string) {
		// Into every answer's type, as far as the document fits.
		for _, v := range answers() {
			if json.Unmarshal([]byte(data), v) != nil {
				continue
			}
			want, wantErr := encodingJSON(v)
			var got bytes.Buffer
			err := jsondoc.Encode(&got, v)
			if (err == nil) != (wantErr == nil) || !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("%q into %T: Encode wrote\n%s (%v)\nencoding/json\n%s (%v)", data, v, got.Bytes(), err, want, wantErr)
			}
		}
		for _, useNumber := range []bool{false, true} {
			d := json.NewDecoder(strings.NewReader(data))
			if useNumber {
				d.UseNumber()
			}
			var v any
			if d.Decode(&v) != nil {
				return
			}
			want, wantErr := encodingJSON(v)
			var got bytes.Buffer
			err := jsondoc.Encode(&got, v)
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("%q: error %v, encoding/json's %v", data, err, wantErr)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("%q (UseNumber %v): Encode wrote\n%s\nencoding/json\n%s", data, useNumber, got.Bytes(), want)
			}
		}
	})
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

type withString struct {
	N int `json:"n,string"`
}

type withInt struct {
	N int64 `json:"n"`
}
