package flows

import (
	"slices"
	"testing"
)

func TestNodeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		tags []string
		want string
	}{
		{"no tags", nil, ""},
		{"other tags only", []string{"x", "flowlb:zone=a"}, ""},
		{"the node tag", []string{"x", TagNodePrefix + "n2"}, "n2"},
		{"the first of two", []string{TagNodePrefix + "n1", TagNodePrefix + "n2"}, "n1"},
		{"an empty name", []string{TagNodePrefix}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeOf(tc.tags); got != tc.want {
				t.Errorf("NodeOf(%q) = %q, want %q", tc.tags, got, tc.want)
			}
		})
	}
}

func TestZonesOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		tags []string
		want []string
	}{
		{"no tags", nil, nil},
		{"other tags only", []string{"x", TagNodePrefix + "n1"}, nil},
		{"sorted without repeats", []string{TagZonePrefix + "zone-b", "x", TagZonePrefix + "zone-a", TagZonePrefix + "zone-b"}, []string{"zone-a", "zone-b"}},
		{"empty zone names dropped", []string{TagZonePrefix, TagZonePrefix + "zone-a"}, []string{"zone-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ZonesOf(tc.tags)
			if !slices.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("ZonesOf(%q) = %q, want %q", tc.tags, got, tc.want)
			}
		})
	}
}

func TestForNodesOf(t *testing.T) {
	tags := []string{TagNodePrefix + "n9", TagForNodePrefix + "n2", TagZonePrefix + "zone-a", TagForNodePrefix, TagForNodePrefix + "n1", TagForNodePrefix + "n2"}
	if got := ForNodesOf(tags); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("ForNodesOf(%q) = %q", tags, got)
	}
	if got := ForNodesOf([]string{TagNodePrefix + "n1"}); got != nil {
		t.Errorf("no node hints: %q", got)
	}
}

func TestHealthCheckNodePortOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		tags []string
		want uint16
	}{
		{"no tags", nil, 0},
		{"other tags only", []string{TagLocalOnly, TagNodePort}, 0},
		{"the port", []string{TagLocalOnly, TagHealthCheckNodePortPrefix + "30500"}, 30500},
		{"the first valid of several", []string{TagHealthCheckNodePortPrefix + "x", TagHealthCheckNodePortPrefix + "0", TagHealthCheckNodePortPrefix + "65536", TagHealthCheckNodePortPrefix + "31000", TagHealthCheckNodePortPrefix + "32000"}, 31000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HealthCheckNodePortOf(tc.tags); got != tc.want {
				t.Errorf("HealthCheckNodePortOf(%q) = %d, want %d", tc.tags, got, tc.want)
			}
		})
	}
}

func TestKubeServiceOf(t *testing.T) {
	if got := KubeServiceOf([]string{"x", TagKubeServicePrefix + "ns/web", TagKubeServicePrefix + "ns/other"}); got != "ns/web" {
		t.Errorf("got %q, want ns/web", got)
	}
	if got := KubeServiceOf([]string{"x"}); got != "" {
		t.Errorf("got %q, want none", got)
	}
}
