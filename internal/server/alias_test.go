package server

import (
	"maps"
	"testing"
)

func TestParseAliases(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want map[string]string
		bad  bool
	}{
		{nil, map[string]string{}, false},
		{[]string{"amphora=flow", " ovn=flow"}, map[string]string{"amphora": "flow", "ovn": "flow"}, false},
		{[]string{"amphora=flow", "amphora=flow"}, map[string]string{"amphora": "flow"}, false},
		{[]string{"amphora=flow", "amphora=other"}, nil, true},
		{[]string{"amphora"}, nil, true},
		{[]string{"=flow"}, nil, true},
		{[]string{"amphora="}, nil, true},
	} {
		got, err := parseAliases(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && !maps.Equal(got, tc.want)) {
			t.Errorf("parseAliases(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
