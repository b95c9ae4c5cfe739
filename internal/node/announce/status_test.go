package announce

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/node/bgp"
)

// TestTableStatus: the table's VIPs as host prefixes, sorted by address
// (IPv4 first), once each; an unreadable table says why.
func TestTableStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		vips []netip.Addr
		err  error
		want Status
	}{
		{"empty", nil, nil, Status{Mode: ModeTable, Table: 200, Prefixes: []bgp.Advert{}}},
		{"sorted", addrs("2001:2:0:8000::3", "198.19.128.10", "198.19.128.9", "198.19.128.10"), nil,
			Status{Mode: ModeTable, Table: 200, Prefixes: []bgp.Advert{{Prefix: "198.19.128.9/32"}, {Prefix: "198.19.128.10/32"}, {Prefix: "2001:2:0:8000::3/128"}}}},
		{"unreadable", addrs("198.19.128.9"), errors.New("operation not permitted"),
			Status{Mode: ModeTable, Table: 200, Prefixes: []bgp.Advert{}, Error: "operation not permitted"}},
	} {
		if got := TableStatus(200, tc.vips, tc.err); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	in := addrs("198.19.128.10", "198.19.128.9")
	TableStatus(200, in, nil)
	if in[0] != netip.MustParseAddr("198.19.128.10") {
		t.Error("TableStatus sorted its caller's slice")
	}
}

// TestBGPStatus: the speaker's adverts and sessions as given; none
// advertised is an empty list, not null, in the JSON.
func TestBGPStatus(t *testing.T) {
	ss := []bgp.Session{{Peer: "198.18.0.254", ASN: 64500, State: "active"}}
	got := BGPStatus(nil, ss)
	if got.Mode != ModeBGP || got.Prefixes == nil || len(got.Prefixes) != 0 || !reflect.DeepEqual(got.Sessions, ss) {
		t.Errorf("%+v", got)
	}
	ads := []bgp.Advert{{Prefix: "198.19.128.9/32", Communities: []string{"64512:100"}}}
	if got := BGPStatus(ads, nil); !reflect.DeepEqual(got.Prefixes, ads) || got.Sessions != nil {
		t.Errorf("%+v", got)
	}
	b, _ := json.Marshal(NoneStatus())
	if string(b) != `{"mode":"none","prefixes":[]}` {
		t.Errorf("none: %s", b)
	}
}

// TestStatusJSON: the field names of the announcements part, as
// docs/operations.md documents them.
func TestStatusJSON(t *testing.T) {
	s := BGPStatus([]bgp.Advert{{Prefix: "198.19.128.9/32", Communities: []string{"64512:100"}, LocalPref: 200}},
		[]bgp.Session{{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: "2026-11-29T14:50:07Z", BFD: "up", Received: 1, Sent: 3,
			Families: []bgp.FamilyCounts{{Family: "ipv4", Advertised: 1}, {Family: "ipv6"}}}})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mode":"bgp","prefixes":[{"prefix":"198.19.128.9/32","communities":["64512:100"],"local_preference":200}],` +
		`"sessions":[{"peer":"198.18.0.254","asn":64500,"state":"established","since":"2026-11-29T14:50:07Z","bfd":"up",` +
		`"updates_received":1,"updates_sent":3,"families":[{"family":"ipv4","advertised":1,"received":0},{"family":"ipv6","advertised":0,"received":0}]}]}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	b, _ = json.Marshal(TableStatus(200, addrs("198.19.128.9"), nil))
	if want := `{"mode":"table","table":200,"prefixes":[{"prefix":"198.19.128.9/32"}]}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
}

// TestStatusWrite: what `agent dump` prints of each mode.
func TestStatusWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Status
		want string
	}{
		{"older agent", Status{}, ""},
		{"none", NoneStatus(), "announce: nothing (no --announce-cidrs)\n"},
		{"table", TableStatus(200, addrs("198.19.128.9", "2001:2:0:8000::3"), nil),
			"announce: routing table 200 holds 2 VIPs, for a routing daemon to export\n" +
				"announce:   198.19.128.9/32\n" +
				"announce:   2001:2:0:8000::3/128\n"},
		{"table of one", TableStatus(200, addrs("198.19.128.9"), nil),
			"announce: routing table 200 holds 1 VIP, for a routing daemon to export\n" +
				"announce:   198.19.128.9/32\n"},
		{"table unreadable", TableStatus(201, nil, errors.New("no such table")),
			"announce: routing table 201: unreadable: no such table\n"},
		{"bgp", BGPStatus([]bgp.Advert{
			{Prefix: "198.19.128.9/32", Communities: []string{"64512:100", "64512:7"}, LocalPref: 200},
			{Prefix: "198.19.200.0/28"},
			{Prefix: "2001:2:0:8000::3/128"}},
			[]bgp.Session{
				{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: "2026-11-29T14:50:07Z", BFD: "up", Received: 1, Sent: 4,
					Families: []bgp.FamilyCounts{{Family: "ipv4", Advertised: 2}, {Family: "ipv6", Advertised: 1}}},
				{Peer: "2001:2::fe", ASN: 64501, State: "active", Since: "2026-11-29T14:49:00Z", BFD: "down"},
				{Peer: "198.18.0.253", ASN: 64502, State: "idle"}}),
			"announce: BGP, 1 of 3 sessions established, 3 prefixes advertised\n" +
				"announce: peer 198.18.0.254 AS 64500 established since 2026-11-29T14:50:07Z, BFD up, ipv4 2 advertised 0 received, ipv6 1 advertised 0 received; updates 4 sent 1 received\n" +
				"announce: peer 2001:2::fe AS 64501 active since 2026-11-29T14:49:00Z, BFD down; updates 0 sent 0 received\n" +
				"announce: peer 198.18.0.253 AS 64502 idle; updates 0 sent 0 received\n" +
				"announce:   198.19.128.9/32 communities 64512:100,64512:7 local-preference 200\n" +
				"announce:   198.19.200.0/28\n" +
				"announce:   2001:2:0:8000::3/128\n"},
		{"bgp, nothing yet", BGPStatus(nil, []bgp.Session{{Peer: "198.18.0.254", ASN: 64500, State: "idle"}}),
			"announce: BGP, 0 of 1 session established, 0 prefixes advertised\n" +
				"announce: peer 198.18.0.254 AS 64500 idle; updates 0 sent 0 received\n"},
	} {
		var b strings.Builder
		tc.s.Write(&b)
		if b.String() != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, b.String(), tc.want)
		}
	}
}
