package ovn

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// TestGuardACLs: services with allowed_cidrs -> guards -> ACL rows, with
// the VIP's floating IPs, on the row's switches and external networks.
func TestGuardACLs(t *testing.T) {
	restricted := func(vip string, port uint16, lb string, cidrs ...string) flows.Service {
		s := svc(vip, port, lb, be("198.18.1.1", 8080, 1))
		s.AllowedCIDRs = prefixes(cidrs...)
		return s
	}
	none := svc("198.18.0.10", 82, "lb1")
	none.AllowNone = true
	udp := restricted("198.18.0.10", 53, "lb1", "198.18.3.0/24")
	udp.Key.Protocol = flows.UDP
	fip := map[netip.Addr][]netip.Addr{netip.MustParseAddr("198.18.0.10"): addrs("198.19.0.50")}
	at := map[string]Attachment{
		"flowlb-lb1-tcp": {Switches: []string{"sB", "sA"}, Routers: []string{"r1"}, External: []string{"sExt"}},
		"flowlb-lb1-udp": {Switches: []string{"sA"}},
		"flowlb-lb6-tcp": {Switches: []string{"sA"}},
		"flowlb-lb7-tcp": {Missing: addrs("198.18.0.70")},
	}
	ids := func(lb, key string) map[string]string { return map[string]string{LoadBalancerKey: lb, ACLKey: key} }
	tests := []struct {
		name     string
		in       map[flows.Key]flows.Service
		fips     map[netip.Addr][]netip.Addr
		want     map[string]ACLRow
		switches map[string][]string
	}{
		{
			name: "prefixes sorted and deduplicated; the floating IP guarded with the VIP; on the row's switches and the external one",
			in:   table(restricted("198.18.0.10", 80, "lb1", "198.18.4.7/32", "198.18.3.9/24", "198.18.4.7/32")),
			fips: fip,
			want: map[string]ACLRow{"tcp/198.18.0.10:80": {Key: "tcp/198.18.0.10:80",
				Match:       "ip4.dst == {198.18.0.10, 198.19.0.50} && tcp.dst == 80 && ip4.src != {198.18.3.0/24, 198.18.4.7/32}",
				ExternalIDs: ids("lb1", "tcp/198.18.0.10:80")}},
			switches: map[string][]string{"tcp/198.18.0.10:80": {"sA", "sB", "sExt"}},
		},
		{
			name: "admitting none drops every source; a UDP listener matches udp.dst",
			in:   table(none, udp),
			want: map[string]ACLRow{
				"tcp/198.18.0.10:82": {Key: "tcp/198.18.0.10:82", Match: "ip4.dst == 198.18.0.10 && tcp.dst == 82", ExternalIDs: ids("lb1", "tcp/198.18.0.10:82")},
				"udp/198.18.0.10:53": {Key: "udp/198.18.0.10:53", Match: "ip4.dst == 198.18.0.10 && udp.dst == 53 && ip4.src != 198.18.3.0/24",
					ExternalIDs: ids("lb1", "udp/198.18.0.10:53")},
			},
			switches: map[string][]string{"tcp/198.18.0.10:82": {"sA", "sB", "sExt"}, "udp/198.18.0.10:53": {"sA"}},
		},
		{
			name: "IPv6: the other family's prefixes admit nobody, an IPv4-mapped VIP and prefix read as IPv4",
			in: table(restricted("2001:2::10", 80, "lb6", "2001:2::/64", "198.18.3.0/24"),
				restricted("2001:2::10", 81, "lb6", "198.18.3.0/24"),
				restricted("::ffff:198.18.0.10", 84, "lb1", "::ffff:198.18.3.0/120")),
			want: map[string]ACLRow{
				"tcp/[2001:2::10]:80": {Key: "tcp/[2001:2::10]:80", Match: "ip6.dst == 2001:2::10 && tcp.dst == 80 && ip6.src != 2001:2::/64",
					ExternalIDs: ids("lb6", "tcp/[2001:2::10]:80")},
				"tcp/[2001:2::10]:81": {Key: "tcp/[2001:2::10]:81", Match: "ip6.dst == 2001:2::10 && tcp.dst == 81", ExternalIDs: ids("lb6", "tcp/[2001:2::10]:81")},
				"tcp/198.18.0.10:84": {Key: "tcp/198.18.0.10:84", Match: "ip4.dst == 198.18.0.10 && tcp.dst == 84 && ip4.src != 198.18.3.0/24",
					ExternalIDs: ids("lb1", "tcp/198.18.0.10:84")},
			},
			switches: map[string][]string{"tcp/[2001:2::10]:80": {"sA"}, "tcp/[2001:2::10]:81": {"sA"}, "tcp/198.18.0.10:84": {"sA", "sB", "sExt"}},
		},
		{
			name: "a prefix of length 0 of the VIP's family restricts nothing; one of the other family does not lift the guard",
			in: table(restricted("198.18.0.10", 80, "lb1", "0.0.0.0/0", "198.18.3.0/24"),
				restricted("2001:2::10", 80, "lb6", "0.0.0.0/0")),
			want: map[string]ACLRow{"tcp/[2001:2::10]:80": {Key: "tcp/[2001:2::10]:80", Match: "ip6.dst == 2001:2::10 && tcp.dst == 80",
				ExternalIDs: ids("lb6", "tcp/[2001:2::10]:80")}},
			switches: map[string][]string{"tcp/[2001:2::10]:80": {"sA"}},
		},
		{
			name: "a row attached nowhere gets no ACL (a row of no switch would be dropped at once)",
			in:   table(restricted("198.18.0.70", 80, "lb7", "198.18.3.0/24")),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Translate(tc.in)
			if len(p.Refused) > 0 {
				t.Fatalf("refused: %v", p.Refused)
			}
			rows, on := ACLs(p.Guards, at, tc.fips)
			if d := cmp.Diff(tc.want, rows, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.switches, on, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("switches (-want +got):\n%s", d)
			}
		})
	}
}

func TestDiffACLs(t *testing.T) {
	row := ACLRow{Key: "tcp/198.18.0.10:80", Match: "ip4.dst == 198.18.0.10 && tcp.dst == 80 && ip4.src != 198.18.3.0/24",
		ExternalIDs: map[string]string{LoadBalancerKey: "lb1", ACLKey: "tcp/198.18.0.10:80"}}
	db := func(uuid, match string) nbdb.ACL {
		a := *aclRow(row)
		a.UUID, a.Match = uuid, match
		return a
	}
	rows := map[string]ACLRow{row.Key: row}
	on := map[string][]string{row.Key: {"sA", "sExt"}}
	gone := db("u3", "ip4.dst == 198.18.0.99")
	gone.ExternalIDs = map[string]string{LoadBalancerKey: "lb9", ACLKey: "tcp/198.18.0.99:80"}
	tests := []struct {
		name     string
		acls     []nbdb.ACL
		switches []nbdb.LogicalSwitch
		want     Actions
	}{
		{
			name:     "new: created and put on its switches by its named ref",
			switches: []nbdb.LogicalSwitch{{UUID: "sA", ACLs: []string{"neutron"}}, {UUID: "sB"}, {UUID: "sExt"}},
			want:     Actions{ACLCreate: []ACLRow{row}, ACLAttach: map[string][]Ref{"sA": {{Create: 0}}, "sExt": {{Create: 0}}}},
		},
		{
			name:     "in place: nothing",
			acls:     []nbdb.ACL{db("u1", row.Match)},
			switches: []nbdb.LogicalSwitch{{UUID: "sA", ACLs: []string{"u1"}}, {UUID: "sExt", ACLs: []string{"u1", "x"}}},
		},
		{
			name:     "a changed match rewritten; taken off a switch, put back; off a switch not its own",
			acls:     []nbdb.ACL{db("u1", "ip4.dst == 198.18.0.10")},
			switches: []nbdb.LogicalSwitch{{UUID: "sA"}, {UUID: "sB", ACLs: []string{"u1"}}, {UUID: "sExt", ACLs: []string{"u1"}}},
			want: Actions{ACLUpdate: []ACLUpdate{{UUID: "u1", Row: row}}, ACLAttach: map[string][]Ref{"sA": {{UUID: "u1"}}},
				ACLDetach: map[string][]Ref{"sB": {{UUID: "u1"}}}},
		},
		{
			name:     "a duplicate of the key and one no longer wanted taken off every switch; the lowest UUID kept",
			acls:     []nbdb.ACL{db("u2", row.Match), db("u1", row.Match), gone},
			switches: []nbdb.LogicalSwitch{{UUID: "sA", ACLs: []string{"u1", "u2", "u3"}}, {UUID: "sExt", ACLs: []string{"u1", "u2"}}},
			want: Actions{ACLStale: []string{"u2", "u3"},
				ACLDetach: map[string][]Ref{"sA": {{UUID: "u2"}, {UUID: "u3"}}, "sExt": {{UUID: "u2"}}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got Actions
			DiffACLs(&got, rows, on, tc.acls, tc.switches)
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if got.Empty() != (len(tc.want.ACLCreate)+len(tc.want.ACLUpdate)+len(tc.want.ACLAttach)+len(tc.want.ACLDetach) == 0) {
				t.Errorf("Empty() = %v for %+v", got.Empty(), got)
			}
		})
	}
}
