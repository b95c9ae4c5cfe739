package jsondoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// useNumber is what Object stands in for: an encoding/json Decoder with
// UseNumber decoding one object, and no more values after it (More, as
// the Octavia API checks a body).
func useNumber(data []byte) (map[string]any, bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, false
	}
	if d.More() {
		return nil, false
	}
	return m, true
}

// checkObject wants Object to give encoding/json's map wherever it gives
// one, and to give one for every object encoding/json decodes unless
// refused says it may leave the input to encoding/json.
func checkObject(t *testing.T, data string, mayRefuse bool) {
	t.Helper()
	got, ok := Object([]byte(data))
	want, wantOK := useNumber([]byte(data))
	if ok && (!wantOK || !reflect.DeepEqual(got, want)) {
		t.Errorf("Object(%q) = %#v, encoding/json %#v (%v)", data, got, want, wantOK)
	}
	if !ok && wantOK && !mayRefuse {
		t.Errorf("Object(%q) refused what encoding/json decodes to %#v", data, want)
	}
}

func TestObject(t *testing.T) {
	for _, tc := range []struct {
		data      string
		mayRefuse bool // encoding/json accepts it; the fast decoder need not
	}{
		{data: `{"members": [{"address": "198.18.16.2", "protocol_port": 8080}]}`},
		{data: `{"a": 1, "b": -2.5e3, "c": 12345678901234567890123, "d": 0.1}`},
		{data: `{"s": "é\n\t\"\\\/\u00e9\ud83d\ude00", "t": true, "f": false, "n": null}`},
		{data: `{"empty": {}, "none": [], "nested": [[1, [2]], {"x": {"y": []}}]}`},
		{data: " \n\t{} \r\n "},
		{data: `{"nul": "a\u0000b", "k\u0000": 1}`},
		{data: `{"weight": "5", "tags": ["a", "b"]}`},
		{data: `{"a": 1, "a": 2}`, mayRefuse: true},  // duplicate names: the last wins
		{data: "{\"a\": \"\xff\"}", mayRefuse: true}, // invalid UTF-8
		{data: `{"a": "\ud800"}`, mayRefuse: true},   // lone surrogate
		{data: `{"a": 1}]`, mayRefuse: true},         // encoding/json's Decoder stops before ]
		{data: `{"a": 1} {"b": 2}`},                  // two values
		{data: `{"a": 1} x`},
		{data: `[{"a": 1}]`},
		{data: `null`},
		{data: `"x"`},
		{data: `{"a": 01}`},
		{data: `{"a": 1.}`},
		{data: `{"a": tru}`},
		{data: `{"a" 1}`},
		{data: `{"a": 1,}`},
		{data: `{"a": [1,]}`},
		{data: `{"a": "x`},
		{data: `{`},
		{data: ``},
		{data: strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000), mayRefuse: true},
	} {
		checkObject(t, tc.data, tc.mayRefuse)
	}
}

// FuzzObject: whatever the input, Object gives encoding/json's map or
// leaves the input to encoding/json.
func FuzzObject(f *testing.F) {
	f.Add(`{"members": [{"address": "198.18.16.2", "protocol_port": 8080, "weight": "5", "tags": null}]}`)
	f.Add(`{"a": {"b": [1, 2.5, -3e2, true, false, null, "\u0000"]}}`)
	f.Fuzz(func(t *testing.T, data string) {
		checkObject(t, data, true)
	})
}

func BenchmarkObject(b *testing.B) {
	var body strings.Builder
	body.WriteString(`{"members": [`)
	for i := range 20000 {
		if i > 0 {
			body.WriteString(", ")
		}
		fmt.Fprintf(&body, `{"address": "198.18.%d.%d", "protocol_port": 8080}`, 16+i/250, 2+i%250)
	}
	body.WriteString("]}")
	data := []byte(body.String())
	b.Run("jsondoc", func(b *testing.B) {
		for range b.N {
			if _, ok := Object(data); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for range b.N {
			if _, ok := useNumber(data); !ok {
				b.Fatal("refused")
			}
		}
	})
}
