package ovn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Lines as OVS 3.1.0 and OVN 23.03.1 print them (userspace datapath).
const (
	groupsOut = `OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):
 group_id=1,type=select,selection_method=dp_hash,bucket=bucket_id:0,weight:100,actions=ct(commit,table=21,zone=NXM_NX_REG13[0..15],nat(dst=198.18.43.2:8080),exec(set_field:0x2/0x2->ct_mark)),bucket=bucket_id:1,weight:100,actions=ct(commit,table=21,zone=NXM_NX_REG13[0..15],nat(dst=198.18.43.3:8080),exec(set_field:0x2/0x2->ct_mark))
 group_id=2004,type=select,selection_method=hash,fields=ip_src,bucket=bucket_id:0,weight:100,actions=ct(commit,table=21,zone=NXM_NX_REG13[0..15],nat(dst=[2001:2::2]:8080),exec(set_field:0x2/0x2->ct_mark)),bucket=bucket_id:1,weight:100,actions=ct(commit,table=21,zone=NXM_NX_REG13[0..15],nat(dst=[2001:2::3]:8080),exec(set_field:0x2/0x2->ct_mark))
 group_id=7,type=select,selection_method=dp_hash,bucket=bucket_id:0,weight:100,actions=set_field:0x1->reg8,resubmit(,12),bucket=bucket_id:1,weight:100,actions=set_field:0x2->reg8,resubmit(,12)
`
	groupStatsOut = `OFPST_GROUP reply (OF1.5) (xid=0x6):
 group_id=1,duration=55.226s,ref_count=1,packet_count=5,byte_count=370,bucket0:packet_count=3,byte_count=222,bucket1:packet_count=2,byte_count=148
 group_id=2004,duration=1.5s,ref_count=1,packet_count=0,byte_count=0,bucket0:packet_count=0,byte_count=0,bucket1:packet_count=0,byte_count=0
`
	flowsOut = `OFPST_FLOW reply (OF1.5) (xid=0x6): flags=[more]
 cookie=0x9516e103, duration=55.001s, table=15, n_packets=0, n_bytes=0, idle_age=55, priority=120,ct_state=+new-rel+trk,tcp,metadata=0x2,nw_dst=198.18.44.100,tp_dst=80 actions=group:2
 cookie=0xf465cd5b, duration=55.085s, table=20, n_packets=5, n_bytes=370, idle_age=31, priority=120,ct_state=+new+trk,tcp,metadata=0x1,nw_dst=198.18.44.100,tp_dst=80 actions=set_field:0/0x2000000000000000000000000->xxreg0,group:1
 cookie=0x98f93d8f, duration=55.085s, table=15, n_packets=5, n_bytes=370, idle_age=31, priority=7,ct_state=+new-est+trk,metadata=0x1 actions=set_field:0x80000000000000000000000000/0x80000000000000000000000000->xxreg0,resubmit(,16)
 cookie=0x6bba043, duration=1.985s, table=20, n_packets=0, n_bytes=0, idle_age=1, priority=120,ct_state=+new+trk,tcp6,metadata=0x1,ipv6_dst=2001:2::100,tp_dst=80 actions=set_field:0/0x2000000000000000000000000->xxreg0,group:2004
OFPST_FLOW reply (OF1.5) (xid=0x6):
`
)

func TestParseGroups(t *testing.T) {
	ap := netip.MustParseAddrPort
	want := map[uint32]map[uint32]netip.AddrPort{
		1:    {0: ap("198.18.43.2:8080"), 1: ap("198.18.43.3:8080")},
		2004: {0: ap("[2001:2::2]:8080"), 1: ap("[2001:2::3]:8080")},
	}
	if got := ParseGroups(groupsOut); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestParseGroupStats(t *testing.T) {
	want := map[uint32]GroupStats{
		1:    {Duration: 55226 * time.Millisecond, Buckets: map[uint32]uint64{0: 3, 1: 2}},
		2004: {Duration: 1500 * time.Millisecond, Buckets: map[uint32]uint64{0: 0, 1: 0}},
	}
	if got := ParseGroupStats(groupStatsOut); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestParseLBFlows(t *testing.T) {
	a := netip.MustParseAddr
	want := []LBFlow{
		{ID: "table=15,priority=120,ct_state=+new-rel+trk,tcp,metadata=0x2,nw_dst=198.18.44.100,tp_dst=80",
			Dst: a("198.18.44.100"), Protocol: flows.TCP, Port: 80, Group: 2, Duration: 55001 * time.Millisecond},
		{ID: "table=20,priority=120,ct_state=+new+trk,tcp,metadata=0x1,nw_dst=198.18.44.100,tp_dst=80",
			Dst: a("198.18.44.100"), Protocol: flows.TCP, Port: 80, Group: 1, Packets: 5, Duration: 55085 * time.Millisecond},
		{ID: "table=20,priority=120,ct_state=+new+trk,tcp6,metadata=0x1,ipv6_dst=2001:2::100,tp_dst=80",
			Dst: a("2001:2::100"), Protocol: flows.TCP, Port: 80, Group: 2004, Duration: 1985 * time.Millisecond},
	}
	if got := ParseLBFlows(flowsOut); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestCounterAdd(t *testing.T) {
	vip := netip.MustParseAddr("198.18.44.100")
	fip := netip.MustParseAddr("198.18.100.7")
	m1, m2 := netip.MustParseAddrPort("198.18.43.2:8080"), netip.MustParseAddrPort("198.18.43.3:8080")
	k80 := flows.Key{VIP: vip, Protocol: flows.TCP, Port: 80}
	k81 := flows.Key{VIP: vip, Protocol: flows.TCP, Port: 81}
	addrs := map[flows.Key]flows.Key{k80: k80, k81: k81, {VIP: fip, Protocol: flows.TCP, Port: 80}: k80}
	flow := func(dst netip.Addr, port uint16, table string, group uint32, n uint64, age time.Duration) LBFlow {
		return LBFlow{ID: table + dst.String(), Dst: dst, Protocol: flows.TCP, Port: port, Group: group, Packets: n, Duration: age}
	}
	group1 := map[uint32]map[uint32]netip.AddrPort{1: {0: m1, 1: m2}}
	// Weights 3 and 1: OVN repeats a backend in the row, and the group
	// has a bucket for each entry.
	weighted := map[uint32]map[uint32]netip.AddrPort{1: {0: m1, 1: m1, 2: m1, 3: m2}}
	gs := func(age time.Duration, n ...uint64) map[uint32]GroupStats {
		b := map[uint32]uint64{}
		for i, c := range n {
			b[uint32(i)] = c
		}
		return map[uint32]GroupStats{1: {Duration: age, Buckets: b}}
	}
	conns := func(n uint64, members map[netip.AddrPort]uint64) flows.Stats {
		s := flows.Stats{Counters: flows.Counters{Connections: n}}
		for ap, c := range members {
			if s.Members == nil {
				s.Members = map[netip.AddrPort]flows.Counters{}
			}
			s.Members[ap] = flows.Counters{Connections: c}
		}
		return s
	}
	s := time.Second
	for _, tc := range []struct {
		name         string
		reads        []BridgeCounts // the earlier reads, then the one checked
		want         map[flows.Key]flows.Stats
		unattributed uint64
	}{
		{name: "the first read of a bridge is the baseline",
			reads: []BridgeCounts{{Flows: []LBFlow{flow(vip, 80, "t20", 1, 5, 10*s)}, Groups: group1, Stats: gs(10*s, 3, 2)}},
			want:  map[flows.Key]flows.Stats{}},
		{name: "what grew since the last read, by service and by member",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 5, 10*s)}, Groups: group1, Stats: gs(10*s, 3, 2)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 9, 20*s)}, Groups: group1, Stats: gs(20*s, 6, 3)}},
			want: map[flows.Key]flows.Stats{k80: conns(4, map[netip.AddrPort]uint64{m1: 3, m2: 1})}},
		{name: "a floating IP's flow counts under its VIP's service, the router's and the switch's added",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 0, s), flow(fip, 80, "t15", 1, 0, s)}, Groups: group1, Stats: gs(s, 0, 0)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 2, 2*s), flow(fip, 80, "t15", 1, 3, 2*s)}, Groups: group1, Stats: gs(2*s, 2, 3)}},
			want: map[flows.Key]flows.Stats{k80: conns(5, map[netip.AddrPort]uint64{m1: 2, m2: 3})}},
		{name: "a backend's buckets add up (weights)",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 0, s)}, Groups: weighted, Stats: gs(s, 0, 0, 0, 0)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 8, 2*s)}, Groups: weighted, Stats: gs(2*s, 2, 2, 2, 2)}},
			want: map[flows.Key]flows.Stats{k80: conns(8, map[netip.AddrPort]uint64{m1: 6, m2: 2})}},
		{name: "a group two services share counts for neither's members",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 0, s), flow(vip, 81, "t20", 1, 0, s)}, Groups: group1, Stats: gs(s, 0, 0)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 2, 2*s), flow(vip, 81, "t20", 1, 1, 2*s)}, Groups: group1, Stats: gs(2*s, 2, 1)}},
			want:         map[flows.Key]flows.Stats{k80: conns(2, nil), k81: conns(1, nil)},
			unattributed: 3},
		{name: "a group shared with a load balancer not flowlb's counts for no member",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 0, s), flow(netip.MustParseAddr("198.18.44.200"), 80, "t20", 1, 0, s)}, Groups: group1, Stats: gs(s, 0, 0)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 2, 2*s), flow(netip.MustParseAddr("198.18.44.200"), 80, "t20", 1, 5, 2*s)}, Groups: group1, Stats: gs(2*s, 3, 4)}},
			want:         map[flows.Key]flows.Stats{k80: conns(2, nil)},
			unattributed: 7},
		{name: "a flow and a group new since the last read count whole",
			reads: []BridgeCounts{
				{},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 4, s)}, Groups: group1, Stats: gs(s, 1, 3)}},
			want: map[flows.Key]flows.Stats{k80: conns(4, map[netip.AddrPort]uint64{m1: 1, m2: 3})}},
		{name: "counters made again (ovs-vswitchd restarted) count whole, never backwards",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 50, 100*s)}, Groups: group1, Stats: gs(100*s, 25, 25)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 60, 3*s)}, Groups: group1, Stats: gs(3*s, 30, 30)}},
			want: map[flows.Key]flows.Stats{k80: conns(60, map[netip.AddrPort]uint64{m1: 30, m2: 30})}},
		{name: "a lower counter is a new one",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 50, 100*s)}, Groups: group1, Stats: gs(100*s, 25, 25)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 2, 200*s)}, Groups: group1, Stats: gs(200*s, 1, 1)}},
			want: map[flows.Key]flows.Stats{k80: conns(2, map[netip.AddrPort]uint64{m1: 1, m2: 1})}},
		{name: "a group whose backends changed under the same id counts whole",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 5, 10*s)}, Groups: map[uint32]map[uint32]netip.AddrPort{1: {0: m1}}, Stats: gs(10*s, 5)},
				{Flows: []LBFlow{flow(vip, 80, "t20", 1, 7, 20*s)}, Groups: map[uint32]map[uint32]netip.AddrPort{1: {0: m2}}, Stats: gs(20*s, 7)}},
			want: map[flows.Key]flows.Stats{k80: conns(2, map[netip.AddrPort]uint64{m2: 7})}},
		{name: "flows to addresses of no service are not counted",
			reads: []BridgeCounts{
				{Flows: []LBFlow{flow(netip.MustParseAddr("198.18.44.200"), 80, "t20", 1, 1, s)}, Groups: group1, Stats: gs(s, 1, 0)},
				{Flows: []LBFlow{flow(netip.MustParseAddr("198.18.44.200"), 80, "t20", 1, 9, 2*s)}, Groups: group1, Stats: gs(2*s, 5, 4)}},
			want: map[flows.Key]flows.Stats{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCounter()
			var got map[flows.Key]flows.Stats
			for _, r := range tc.reads {
				got = map[flows.Key]flows.Stats{}
				c.Add(got, "br-int", r, addrs)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if c.Unattributed != tc.unattributed {
				t.Errorf("unattributed %d, want %d", c.Unattributed, tc.unattributed)
			}
		})
	}
}

func TestAddressesOf(t *testing.T) {
	vip, vip2 := netip.MustParseAddr("198.18.44.100"), netip.MustParseAddr("198.18.44.101")
	fip := netip.MustParseAddr("198.18.100.7")
	k := func(a netip.Addr, p flows.Protocol, port uint16) flows.Key {
		return flows.Key{VIP: a, Protocol: p, Port: port}
	}
	services := map[flows.Key]flows.Service{
		k(vip, flows.TCP, 80):  {OwnVIP: true},
		k(vip, flows.UDP, 53):  {OwnVIP: true},
		k(vip2, flows.TCP, 80): {OwnVIP: true},
		// The server gave vip2's load balancer the floating IP on
		// port 80: that VIP is its own.
		k(fip, flows.TCP, 80): {OwnVIP: true},
		// Not OVN's: a Kubernetes cluster IP, a node port.
		k(netip.MustParseAddr("198.18.50.1"), flows.TCP, 80): {},
		k(flows.NodePortVIP, flows.TCP, 30080):               {OwnVIP: true},
	}
	fips := map[netip.Addr][]netip.Addr{vip: {fip}}
	want := map[flows.Key]flows.Key{
		k(vip, flows.TCP, 80):  k(vip, flows.TCP, 80),
		k(vip, flows.UDP, 53):  k(vip, flows.UDP, 53),
		k(vip2, flows.TCP, 80): k(vip2, flows.TCP, 80),
		k(fip, flows.TCP, 80):  k(fip, flows.TCP, 80),
		k(fip, flows.UDP, 53):  k(vip, flows.UDP, 53),
	}
	if got := addressesOf(services, fips); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestReadBridge(t *testing.T) {
	changed := strings.Replace(groupsOut, "nat(dst=198.18.43.3:8080)", "nat(dst=198.18.43.9:8080)", 1)
	for _, tc := range []struct {
		name       string
		groups     []string // the two dumps
		wantGroups []uint32
		err        error
	}{
		{name: "groups the same in both dumps", groups: []string{groupsOut, groupsOut}, wantGroups: []uint32{1, 2004}},
		{name: "a group that changed between the dumps is left out", groups: []string{groupsOut, changed}, wantGroups: []uint32{2004}},
		{name: "a failed command fails the read", groups: []string{groupsOut, groupsOut}, err: errors.New("refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cmds []string
			dumps := 0
			run := func(_ context.Context, args ...string) (string, error) {
				cmds = append(cmds, strings.Join(args, " "))
				switch args[2] {
				case "dump-groups":
					dumps++
					return tc.groups[dumps-1], nil
				case "dump-group-stats":
					return groupStatsOut, nil
				case "dump-flows":
					return flowsOut, tc.err
				}
				return "", errors.New("unexpected")
			}
			r, err := ReadBridge(context.Background(), run, "unix:/run/br-int.mgmt")
			if tc.err != nil {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"-O OpenFlow15 dump-groups unix:/run/br-int.mgmt", "-O OpenFlow15 dump-group-stats unix:/run/br-int.mgmt",
				"-O OpenFlow15 dump-flows unix:/run/br-int.mgmt ct_state=+new+trk", "-O OpenFlow15 dump-groups unix:/run/br-int.mgmt"}
			if !reflect.DeepEqual(cmds, want) {
				t.Errorf("commands %q, want %q", cmds, want)
			}
			var got []uint32
			for g := range r.Groups {
				got = append(got, g)
			}
			if len(got) != len(tc.wantGroups) {
				t.Errorf("groups %v, want %v", got, tc.wantGroups)
			}
			for _, g := range tc.wantGroups {
				if r.Groups[g] == nil {
					t.Errorf("group %d missing from %v", g, got)
				}
			}
			if len(r.Flows) != 3 || len(r.Stats) != 2 {
				t.Errorf("flows %d, group stats %d; want 3 and 2", len(r.Flows), len(r.Stats))
			}
		})
	}
}

func TestChassisStatsReadStats(t *testing.T) {
	vip := netip.MustParseAddr("198.18.44.100")
	k := flows.Key{VIP: vip, Protocol: flows.TCP, Port: 80}
	d := &Dataplane{log: slog.New(slog.DiscardHandler), timeout: time.Second,
		services: map[flows.Key]flows.Service{k: {Key: k, OwnVIP: true, LoadBalancerID: "lb1"}}}
	// Each bridge's flow and group counters: n connections, all to the
	// first backend; down: its commands fail.
	type bridge struct {
		n    uint64
		down bool
	}
	bridges := map[string]*bridge{"unix:/a/br-int.mgmt": {}, "unix:/b/br-int.mgmt": {}}
	run := func(_ context.Context, args ...string) (string, error) {
		b := bridges[args[3]]
		if b.down {
			return "", errors.New("connection refused")
		}
		switch args[2] {
		case "dump-groups":
			return " group_id=1,type=select,selection_method=dp_hash,bucket=bucket_id:0,weight:100,actions=ct(commit,table=21,nat(dst=198.18.43.2:8080)),bucket=bucket_id:1,weight:100,actions=ct(commit,table=21,nat(dst=198.18.43.3:8080))\n", nil
		case "dump-group-stats":
			return fmt.Sprintf(" group_id=1,duration=10.0s,ref_count=1,packet_count=%d,byte_count=0,bucket0:packet_count=%d,byte_count=0,bucket1:packet_count=0,byte_count=0\n", b.n, b.n), nil
		case "dump-flows":
			return fmt.Sprintf(" cookie=0x1, duration=10.0s, table=20, n_packets=%d, n_bytes=0, idle_age=1, priority=120,ct_state=+new+trk,tcp,metadata=0x1,nw_dst=198.18.44.100,tp_dst=80 actions=group:1\n", b.n), nil
		}
		return "", errors.New("unexpected")
	}
	cs := d.Counting([]string{"unix:/a/br-int.mgmt", "unix:/b/br-int.mgmt"}, run)
	m1 := netip.MustParseAddrPort("198.18.43.2:8080")
	want := func(n uint64) map[flows.Key]flows.Stats {
		if n == 0 {
			return map[flows.Key]flows.Stats{}
		}
		return map[flows.Key]flows.Stats{k: {Counters: flows.Counters{Connections: n}, Members: map[netip.AddrPort]flows.Counters{m1: {Connections: n}}}}
	}
	for i, step := range []struct {
		a, b         uint64
		aDown, bDown bool
		want         uint64
		err          bool
	}{
		{a: 5, b: 7, want: 0},              // the baseline
		{a: 8, b: 9, bDown: true, want: 3}, // b out of reach: a's alone, no error
		{a: 8, b: 10, want: 3},             // b's since its baseline
		{a: 9, b: 10, aDown: true, bDown: true, err: true},
		{a: 10, b: 11, want: 3},
	} {
		bridges["unix:/a/br-int.mgmt"].n, bridges["unix:/a/br-int.mgmt"].down = step.a, step.aDown
		bridges["unix:/b/br-int.mgmt"].n, bridges["unix:/b/br-int.mgmt"].down = step.b, step.bDown
		got, err := cs.ReadStats()
		if (err != nil) != step.err {
			t.Fatalf("read %d: error %v, want one: %v", i, err, step.err)
		}
		if err == nil && !reflect.DeepEqual(got, want(step.want)) {
			t.Errorf("read %d: got %+v, want %+v", i, got, want(step.want))
		}
	}
}
