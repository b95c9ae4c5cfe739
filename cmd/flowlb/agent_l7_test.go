package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestL7Config(t *testing.T) {
	if c, err := l7Config("", nil); err != nil || c != nil {
		t.Errorf("no ports: %+v, %v", c, err)
	}
	c, err := l7Config("20000-20009", []string{"198.18.0.5", "2001:2::5"})
	if err != nil {
		t.Fatal(err)
	}
	if c.FirstPort != 20000 || c.LastPort != 20009 || c.Addresses.V4 != netip.MustParseAddr("198.18.0.5") || c.Addresses.V6 != netip.MustParseAddr("2001:2::5") {
		t.Errorf("parsed %+v", c)
	}
	if c, err := l7Config("20000-20000", nil); err != nil || c.Addresses.V4.IsValid() || c.Addresses.V6.IsValid() {
		t.Errorf("one port, no address: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		ports string
		addrs []string
		want  string
	}{
		{"20000", nil, "FIRST-LAST"},
		{"0-10", nil, "FIRST-LAST"},
		{"20-10", nil, "FIRST-LAST"},
		{"1-70000", nil, "FIRST-LAST"},
		{"", []string{"198.18.0.5"}, "needs --l7-ports"},
		{"1-2", []string{"nope"}, "--l7-addresses"},
		{"1-2", []string{"198.18.0.5", "198.18.0.6"}, "two addresses of one family"},
	} {
		if _, err := l7Config(tc.ports, tc.addrs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("l7Config(%q, %v) = %v, want an error with %q", tc.ports, tc.addrs, err, tc.want)
		}
	}
}
