package lbaas

import (
	"encoding/json"
	"testing"
)

func TestOptDecoding(t *testing.T) {
	for _, tc := range []struct {
		body    string
		set     bool
		limit   int
		cleared bool // description given as null
	}{
		{`{}`, false, 0, false},
		{`{"connection_limit": 5}`, true, 5, false},
		{`{"connection_limit": null, "description": null}`, true, 0, true},
	} {
		var u ListenerUpdate
		if err := json.Unmarshal([]byte(tc.body), &u); err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if u.ConnectionLimit.Set != tc.set || u.ConnectionLimit.Value != tc.limit || u.Description.Set != tc.cleared {
			t.Errorf("%s: decoded %+v", tc.body, u)
		}
		l := Listener{ConnectionLimit: -1, Description: "kept"}
		u.apply(&l)
		wantLimit, wantDesc := -1, "kept"
		if tc.set {
			wantLimit = tc.limit
		}
		if tc.cleared {
			wantDesc = ""
		}
		if l.ConnectionLimit != wantLimit || l.Description != wantDesc {
			t.Errorf("%s: applied to a listener: limit %d description %q, want %d %q", tc.body, l.ConnectionLimit, l.Description, wantLimit, wantDesc)
		}
	}
}

func TestNestedPoolDecoding(t *testing.T) {
	for _, tc := range []struct {
		body      string
		name      string
		reference bool
	}{
		{`{"name": "web"}`, "web", true},
		{`{"name": "web", "protocol": "TCP"}`, "web", false},
		// A key given as null still makes a definition, as Octavia counts
		// the keys of the body.
		{`{"name": "web", "members": null}`, "web", false},
		{`{"protocol": "TCP"}`, "", true},
		{`{}`, "", true},
	} {
		var n NestedPool
		if err := json.Unmarshal([]byte(tc.body), &n); err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if n.Name != tc.name || (n.Def == nil) != tc.reference {
			t.Errorf("%s: name %q definition %v, want %q reference %v", tc.body, n.Name, n.Def != nil, tc.name, tc.reference)
		}
		if d := n.definition(); d.Name.Value != tc.name {
			t.Errorf("%s: the pool a single create builds is named %q", tc.body, d.Name.Value)
		}
	}
}
