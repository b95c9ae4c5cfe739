package bgp

import (
	"strings"
	"testing"
	"time"
)

// TestParse: the documented example reads as written; mistakes are
// refused with the key named.
func TestParse(t *testing.T) {
	c, err := Parse([]byte(`
asn: 64512
router-id: 198.18.0.1
next-hops:
  ipv6: 2001:2::1
peers:
  - address: 198.18.0.254
    asn: 64500
    password-file: /etc/flowlb/bgp-password
    source-address: 198.18.0.1
    multihop: 2
    hold-time: 3s
    families: [ipv4, ipv6]
    bfd: {enabled: true, min-rx: 100ms, min-tx: 100ms, multiplier: 3}
    graceful-restart: {enabled: true, restart-time: 60}
ranges:
  - cidr: 198.19.128.0/17
    communities: ["64512:100"]
    local-preference: 200
  - cidr: 198.19.200.0/28
    aggregate: true
`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Peers[0]
	if c.ASN != 64512 || c.NextHops.IPv6 != "2001:2::1" || p.ASN != 64500 || p.Multihop != 2 || time.Duration(p.HoldTime) != 3*time.Second ||
		!p.BFD.Enabled || time.Duration(p.BFD.MinRx) != 100*time.Millisecond || time.Duration(p.GracefulRestart.RestartTime) != time.Minute ||
		len(c.Ranges) != 2 || c.Ranges[0].LocalPreference != 200 || !c.Ranges[1].Aggregate {
		t.Errorf("parsed %+v", c)
	}
	bad := []struct{ yaml, err string }{
		{"peers: [{address: 198.18.0.254, asn: 64500}]", "asn: required"},
		{"asn: 1", "peers: at least one"},
		{"asn: 1\npeers: [{address: 198.18.0.x, asn: 2}]", "peers[0].address"},
		{"asn: 1\npeers: [{address: 198.18.0.254, asn: 2, hold-time: 1s}]", "peers[0].hold-time"},
		{"asn: 1\npeers: [{address: 198.18.0.254, asn: 2, families: [ipv5]}]", "peers[0].families"},
		{"asn: 1\npeers: [{address: 198.18.0.254, asn: 2, multihop: 300}]", "peers[0].multihop"},
		{"asn: 1\nrouter-id: 2001:2::1\npeers: [{address: 198.18.0.254, asn: 2}]", "router-id"},
		{"asn: 1\nnext-hops: {ipv4: 2001:2::1}\npeers: [{address: 198.18.0.254, asn: 2}]", "next-hops.ipv4"},
		{"asn: 1\npeers: [{address: 198.18.0.254, asn: 2}]\nranges: [{cidr: 198.19.0.0/33}]", "ranges[0].cidr"},
		{"asn: 1\npeers: [{address: 198.18.0.254, asn: 2}]\nranges: [{cidr: 198.19.0.0/16, communities: [\"1:70000\"]}]", "ranges[0].communities"},
		{"asn: 1\npeers: [{address: 198.18.0.254, asn: 2}]\nranges: [{cidr: 198.18.0.0/15, aggregate: true}]", "ranges[0]: aggregate"},
		{"asn: 1\npeers: [{address: 198.18.0.254, asn: 2, pasword: x}]", "unknown field"},
	}
	for _, b := range bad {
		if _, err := Parse([]byte(b.yaml)); err == nil || !strings.Contains(err.Error(), b.err) {
			t.Errorf("%q: %v, want an error naming %q", b.yaml, err, b.err)
		}
	}
}
