package jsondoc

import (
	"encoding/json"
	"errors"
	"io"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// encodeOpts are encoding/json's rules (HTML-safe escaping, sorted map
// keys, legacy method calls) on the faster encoder, and encoding/json's
// Number written as the number it holds (the fast encoder knows only
// its own Number type, and would quote this one).
var encodeOpts = jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(),
	jsonv2.WithMarshalers(jsonv2.MarshalToFunc(func(enc *jsontext.Encoder, n json.Number) error {
		if n == "" {
			n = "0" // as encoding/json writes it
		}
		if v := jsontext.Value(n); !v.IsValid() || v.Kind() != '0' {
			return errNotANumber // encoding/json then says it its way
		}
		return enc.WriteValue(jsontext.Value(n))
	})))

var errNotANumber = errors.New("not a number literal")

// Encode writes v followed by a newline, as encoding/json's
// Encoder.Encode does, faster on the APIs' answers (response types, and
// maps, whose keys encoding/json sorts through reflection). The one
// difference: invalid UTF-8 in a string is written as U+FFFD itself where
// encoding/json writes the escape \ufffd, which decodes to the same
// string (the APIs refuse invalid UTF-8 in requests, so stored strings
// have none). Whatever the fast encoder refuses goes to encoding/json,
// errors included.
func Encode(w io.Writer, v any) error {
	b, err := jsonv2.Marshal(v, encodeOpts)
	if err != nil {
		return json.NewEncoder(w).Encode(v)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
