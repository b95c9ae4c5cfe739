package jsondoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// errRefused is any input Object leaves to encoding/json.
var errRefused = errors.New("jsondoc: left to encoding/json")

// Object decodes data, one JSON object and nothing after it but
// whitespace, into the map an encoding/json Decoder with UseNumber gives:
// objects as map[string]any, arrays as []any, numbers as json.Number of
// their text, strings, booleans and nil. ok is false for anything else and
// for what the fast decoder refuses (invalid JSON, duplicate names,
// invalid UTF-8, nesting beyond its limit): the caller decodes those with
// encoding/json, for its result or its error message. A request body is
// the use: 20,000 members decode about three times faster.
func Object(data []byte) (m map[string]any, ok bool) {
	d := jsontext.NewDecoder(bytes.NewReader(data))
	if d.PeekKind() != '{' {
		return nil, false
	}
	v, err := readValue(d)
	if err != nil {
		return nil, false
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, false // more than one value
	}
	return v.(map[string]any), true
}

// readValue reads the next JSON value from d.
func readValue(d *jsontext.Decoder) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '{':
		m := map[string]any{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			if name.Kind() != '"' {
				return nil, errRefused
			}
			k := name.String() // before the next read voids the token
			v, err := readValue(d)
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, err
		}
		return m, nil
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			v, err := readValue(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, err
		}
		return a, nil
	case '"':
		return tok.String(), nil
	case '0':
		// A number token's String is its text as written.
		return json.Number(tok.String()), nil
	case 't', 'f':
		return tok.Bool(), nil
	case 'n':
		return nil, nil
	}
	return nil, errRefused
}
