package jsondoc

import (
	"encoding/json"
	"reflect"
	"testing"
)

type base struct {
	ID      string   `json:"id"`
	Up      bool     `json:"admin_state_up"`
	Updated *string  `json:"updated_at"`
	Tags    []string `json:"tags"`
}

type doc struct {
	base
	PoolID   string            `json:"pool_id"`
	Port     int               `json:"protocol_port"`
	Version  *float64          `json:"http_version"`
	Monitor  *int              `json:"monitor_port"`
	Headers  map[string]string `json:"insert_headers"`
	Internal string            `json:"-"`
	Health   string            `json:"x_health,omitempty"`
	Nested   *struct {
		Type string `json:"type"`
	} `json:"session_persistence"`
}

// TestSameAsEncodingJSON decodes documents with Unmarshal and with
// encoding/json and wants the same value and the same error.
func TestSameAsEncodingJSON(t *testing.T) {
	s, f, n := "2026-11-24T05:00:00.000000", 1.1, 8080
	written, err := json.Marshal(doc{base: base{ID: "a", Up: true, Updated: &s, Tags: []string{"x", "é"}}, PoolID: "p", Port: 80,
		Version: &f, Monitor: &n, Headers: map[string]string{"X-Forwarded-For": "true"}, Internal: "not written", Health: "ONLINE"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data string
	}{
		{"written by encoding/json", string(written)},
		{"nulls and empties", `{"id":"","tags":null,"updated_at":null,"insert_headers":{},"session_persistence":null}`},
		{"nested object", `{"session_persistence":{"type":"SOURCE_IP"}}`},
		{"unknown members", `{"id":"a","extra":{"deep":[1,2,{"x":null}]},"protocol_port":1}`},
		{"names in another case", `{"ID":"a","Pool_ID":"p","PROTOCOL_PORT":2}`},
		{"exact name before its case variant", `{"Id":"b","id":"a"}`},
		{"names without their underscore", `{"poolid":"p","protocolport":3}`},
		{"duplicate names, the last wins", `{"id":"a","id":"b"}`},
		{"invalid UTF-8", "{\"id\":\"a\xffb\"}"},
		{"lone surrogate escape", `{"id":"a\ud800b"}`},
		{"NUL escape", `{"id":"a\u0000b"}`},
		{"internal field in the document", `{"Internal":"x","-":"y"}`},
		{"number into a string", `{"id":1}`},
		{"fraction into an int", `{"protocol_port":1.5}`},
		{"overflowing int", `{"protocol_port":1e40}`},
		{"truncated", `{"id":"a"`},
		{"trailing data", `{"id":"a"} {}`},
		{"not an object", `[1]`},
		{"empty", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want, got doc
			wantErr := json.Unmarshal([]byte(tc.data), &want)
			gotErr := Unmarshal([]byte(tc.data), &got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Unmarshal gave %+v, encoding/json %+v", got, want)
			}
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Errorf("Unmarshal error %v, encoding/json %v", gotErr, wantErr)
			}
			var wantAny, gotAny map[string]any
			wantErr = json.Unmarshal([]byte(tc.data), &wantAny)
			gotErr = Unmarshal([]byte(tc.data), &gotAny)
			if !reflect.DeepEqual(gotAny, wantAny) || (gotErr == nil) != (wantErr == nil) {
				t.Errorf("into a map: Unmarshal gave %v (%v), encoding/json %v (%v)", gotAny, gotErr, wantAny, wantErr)
			}
		})
	}
}

func BenchmarkUnmarshal(b *testing.B) {
	data := []byte(`{"id":"0b1f0a40-9d2c-4b7b-9a57-2f3c7a3b0c11","admin_state_up":true,"updated_at":null,"tags":[],"pool_id":"0b1f0a40-9d2c-4b7b-9a57-2f3c7a3b0c12","protocol_port":8000,"http_version":null,"monitor_port":null,"insert_headers":null,"session_persistence":null}`)
	for _, d := range []struct {
		name      string
		unmarshal func([]byte, any) error
	}{{"jsondoc", Unmarshal}, {"encoding-json", json.Unmarshal}} {
		b.Run(d.name, func(b *testing.B) {
			for b.Loop() {
				var v doc
				if err := d.unmarshal(data, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
