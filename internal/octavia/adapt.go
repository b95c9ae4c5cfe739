package octavia

import (
	"bytes"
	"encoding/json"

	"github.com/flowlb/flowlb/internal/octavia/fault"
)

// Op is the kind of request a body is validated for.
type Op int

const (
	OpPost Op = iota
	OpPut
)

// TEMPORARY: pass-through decoding until the schema package lands.
func validateBody(body []byte, root, kind string, op Op) (map[string]any, error) {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, fault.BadRequest("Invalid JSON body: %v", err)
	}
	obj, ok := m[root].(map[string]any)
	if !ok {
		return nil, fault.BadRequest("Missing argument: %s", root)
	}
	return fixNumbers(obj).(map[string]any), nil
}

func fixNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = fixNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fixNumbers(e)
		}
	}
	return v
}

func validateMembers(body []byte) ([]map[string]any, error) {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, fault.BadRequest("Invalid JSON body: %v", err)
	}
	ms, _ := fixNumbers(m["members"]).([]any)
	out := []map[string]any{}
	for _, x := range ms {
		out = append(out, x.(map[string]any))
	}
	return out, nil
}
