package l2

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

var (
	at1 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	at2 = time.Date(2026, 11, 29, 8, 0, 5, 500_000_000, time.FixedZone("CET", 3600))
	v4a = netip.MustParseAddr("198.19.128.9")
	v4b = netip.MustParseAddr("198.19.128.10")
	v6a = netip.MustParseAddr("2001:2:0:8000::9")
)

// TestStatusOf: the responder's state as the status says it: the
// addresses sorted (IPv4 first) with their family's protocol and time,
// times to the second in UTC, the refusals sorted, a lease only once the
// session was lost.
func TestStatusOf(t *testing.T) {
	counts := Counts{GratuitousARP: 2, UnsolicitedNA: 1, ARPReplies: 7, NDPReplies: 3}
	for _, tc := range []struct {
		name  string
		st    State
		lease Lease
		want  Status
	}{
		{"no list yet", State{Interface: "eth0", ARP: true, NDP: true}, Lease{},
			Status{Interface: "eth0", ARP: true, NDP: true, VIPs: []VIP{}}},
		{"answering", State{Interface: "eth0", ARP: true, NDP: true, Owned: map[netip.Addr]time.Time{v6a: at2, v4b: at1, v4a: at2},
			Refused: map[netip.Addr]string{}, ListAt: at2, Counts: counts}, Lease{},
			Status{Interface: "eth0", ARP: true, NDP: true, ListAt: "2026-11-29T07:00:05Z", Sent: counts, VIPs: []VIP{
				{VIP: "198.19.128.9", By: "arp", Since: "2026-11-29T07:00:05Z"},
				{VIP: "198.19.128.10", By: "arp", Since: "2026-11-29T08:00:00Z"},
				{VIP: "2001:2:0:8000::9", By: "ndp", Since: "2026-11-29T07:00:05Z"}}}},
		{"a family the interface lacks", State{Interface: "eth0", NDP: true, Owned: map[netip.Addr]time.Time{v6a: at1},
			Refused: map[netip.Addr]string{v4b: "no IPv4", v4a: "no IPv4"}, ListAt: at1}, Lease{},
			Status{Interface: "eth0", NDP: true, ListAt: "2026-11-29T08:00:00Z", VIPs: []VIP{{VIP: "2001:2:0:8000::9", By: "ndp", Since: "2026-11-29T08:00:00Z"}},
				Refused: []Refusal{{VIP: "198.19.128.9", Error: "no IPv4"}, {VIP: "198.19.128.10", Error: "no IPv4"}}}},
		{"lease running", State{Interface: "eth0", ARP: true, Owned: map[netip.Addr]time.Time{v4a: at1}, ListAt: at1},
			Lease{Lost: at2, Ends: at2.Add(2 * time.Second)},
			Status{Interface: "eth0", ARP: true, ListAt: "2026-11-29T08:00:00Z", VIPs: []VIP{{VIP: "198.19.128.9", By: "arp", Since: "2026-11-29T08:00:00Z"}},
				Lease: &LeaseStatus{ServerLost: "2026-11-29T07:00:05Z", Ends: "2026-11-29T07:00:07Z"}}},
		{"lease ended", State{Interface: "eth0", ARP: true, ListAt: at2.Add(2 * time.Second)},
			Lease{Lost: at2, Ends: at2.Add(2 * time.Second), Ended: true},
			Status{Interface: "eth0", ARP: true, ListAt: "2026-11-29T07:00:07Z", VIPs: []VIP{},
				Lease: &LeaseStatus{ServerLost: "2026-11-29T07:00:05Z", Ends: "2026-11-29T07:00:07Z", Ended: true}}},
	} {
		if got := StatusOf(tc.st, tc.lease); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n%+v\nwant\n%+v", tc.name, got, tc.want)
		}
	}
}

// TestStatusJSON: the field names of the "l2" part, as
// docs/operations.md documents them; no VIPs is an empty list.
func TestStatusJSON(t *testing.T) {
	s := StatusOf(State{Interface: "eth0", ARP: true, NDP: true, Owned: map[netip.Addr]time.Time{v4a: at1},
		Refused: map[netip.Addr]string{v6a: "send failed"}, ListAt: at1, Counts: Counts{GratuitousARP: 1, ARPReplies: 4}},
		Lease{Lost: at1, Ends: at1.Add(2 * time.Second)})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"interface":"eth0","arp":true,"ndp":true,"vips":[{"vip":"198.19.128.9","by":"arp","since":"2026-11-29T08:00:00Z"}],` +
		`"refused":[{"vip":"2001:2:0:8000::9","error":"send failed"}],"list_at":"2026-11-29T08:00:00Z",` +
		`"lease":{"server_lost":"2026-11-29T08:00:00Z","ends":"2026-11-29T08:00:02Z","ended":false},` +
		`"sent":{"gratuitous_arp":1,"unsolicited_na":0,"arp_replies":4,"ndp_replies":0}}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	b, _ = json.Marshal(NoneStatus())
	if want := `{"interface":"","vips":[],"sent":{"gratuitous_arp":0,"unsolicited_na":0,"arp_replies":0,"ndp_replies":0}}`; string(b) != want {
		t.Errorf("none: %s, want %s", b, want)
	}
}

// TestStatusWrite: what `agent dump` prints of the L2 part.
func TestStatusWrite(t *testing.T) {
	answering := StatusOf(State{Interface: "eth0", ARP: true, NDP: true, Owned: map[netip.Addr]time.Time{v4a: at1, v6a: at1},
		Refused: map[netip.Addr]string{v4b: "l2: gratuitous ARP for 198.19.128.10: no buffer space"}, ListAt: at1,
		Counts: Counts{GratuitousARP: 1, UnsolicitedNA: 1, ARPReplies: 5, NDPReplies: 2}}, Lease{})
	running := StatusOf(State{Interface: "eth0", ARP: true, Owned: map[netip.Addr]time.Time{v4a: at1}, ListAt: at1,
		Counts: Counts{GratuitousARP: 1}}, Lease{Lost: at1.Add(time.Minute), Ends: at1.Add(time.Minute + 2*time.Second)})
	ended := StatusOf(State{Interface: "eth0", ARP: true, ListAt: at1.Add(time.Minute + 2*time.Second), Counts: Counts{GratuitousARP: 1}},
		Lease{Lost: at1.Add(time.Minute), Ends: at1.Add(time.Minute + 2*time.Second), Ended: true})
	for _, tc := range []struct {
		name string
		s    Status
		want string
	}{
		{"none", NoneStatus(), "l2: nothing (no --l2-interface)\n"},
		{"no list yet", StatusOf(State{Interface: "eth0", NDP: true}, Lease{}),
			"l2: NDP on eth0, 0 VIPs answered, no list yet; sent 0 gratuitous ARP, 0 unsolicited NA, 0 ARP replies, 0 NDP replies\n"},
		{"answering", answering,
			"l2: ARP and NDP on eth0, 2 VIPs answered, list of 2026-11-29T08:00:00Z; sent 1 gratuitous ARP, 1 unsolicited NA, 5 ARP replies, 2 NDP replies\n" +
				"l2:   198.19.128.9 ARP since 2026-11-29T08:00:00Z\n" +
				"l2:   2001:2:0:8000::9 NDP since 2026-11-29T08:00:00Z\n" +
				"l2:   198.19.128.10 not answered: l2: gratuitous ARP for 198.19.128.10: no buffer space\n"},
		{"lease running", running,
			"l2: ARP on eth0, 1 VIP answered, list of 2026-11-29T08:00:00Z; sent 1 gratuitous ARP, 0 unsolicited NA, 0 ARP replies, 0 NDP replies\n" +
				"l2: server session lost at 2026-11-29T08:01:00Z and no list since: the lease ends at 2026-11-29T08:01:02Z, then the VIPs are let go\n" +
				"l2:   198.19.128.9 ARP since 2026-11-29T08:00:00Z\n"},
		{"lease ended", ended,
			"l2: ARP on eth0, 0 VIPs answered, list of 2026-11-29T08:01:02Z; sent 1 gratuitous ARP, 0 unsolicited NA, 0 ARP replies, 0 NDP replies\n" +
				"l2: server session lost at 2026-11-29T08:01:00Z and no list since: the lease ended at 2026-11-29T08:01:02Z, the VIPs were let go\n"},
	} {
		var b strings.Builder
		tc.s.Write(&b)
		if b.String() != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, b.String(), tc.want)
		}
	}
}
