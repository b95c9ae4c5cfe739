package agent

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func TestMergeStats(t *testing.T) {
	k1 := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
	k2 := flows.Key{VIP: netip.MustParseAddr("198.19.0.11"), Protocol: flows.UDP, Port: 53}
	k3 := flows.Key{VIP: netip.MustParseAddr("198.19.0.12"), Protocol: flows.TCP, Port: 80}
	owner := func(k flows.Key, lb, l string) flows.Service {
		return flows.Service{Key: k, LoadBalancerID: lb, ListenerID: l}
	}
	programmed := map[flows.Key]flows.Service{
		k1: {Key: k1, LoadBalancerID: "lb1", ListenerID: "l1", PoolID: "p1"},
		k2: {Key: k2, LoadBalancerID: "lb2", ListenerID: "l2"},
	}
	c := func(n uint64) flows.Counters {
		return flows.Counters{Connections: n, BytesIn: 10 * n, BytesOut: 20 * n, Refused: n}
	}
	m1 := netip.MustParseAddrPort("198.18.17.2:8080")
	m2 := netip.MustParseAddrPort("198.18.17.3:8080")
	withMembers := map[flows.Key]flows.Service{k1: {Key: k1, LoadBalancerID: "lb1", ListenerID: "l1",
		Backends: []flows.Backend{{MemberID: "member-1", Address: m1.Addr(), Port: m1.Port(), Weight: 3, Node: "n1"}}}}
	owned := func(bs ...flows.Backend) flows.Service {
		s := owner(k1, "lb1", "l1")
		s.Backends = bs
		return s
	}
	be := func(id string, ap netip.AddrPort) flows.Backend {
		return flows.Backend{MemberID: id, Address: ap.Addr(), Port: ap.Port()}
	}
	mc := func(n uint64) map[netip.AddrPort]flows.Counters {
		return map[netip.AddrPort]flows.Counters{m1: {Connections: n, BytesIn: 10 * n}}
	}
	for _, tc := range []struct {
		name       string
		pending    map[flows.Key]pendingStats
		read       map[flows.Key]flows.Stats
		programmed map[flows.Key]flows.Service
		want       map[flows.Key]pendingStats
	}{
		{name: "members' counters add up under their member ids", programmed: withMembers,
			pending: map[flows.Key]pendingStats{k1: {service: owned(be("member-1", m1)), Stats: flows.Stats{Counters: c(1), Members: mc(1)}}},
			read:    map[flows.Key]flows.Stats{k1: {Counters: c(2), Members: mc(2)}},
			want:    map[flows.Key]pendingStats{k1: {service: owned(be("member-1", m1)), Stats: flows.Stats{Counters: c(3), Members: mc(3)}}}},
		{name: "an L7 listener's members are those of all its pools",
			programmed: map[flows.Key]flows.Service{k1: {Key: k1, LoadBalancerID: "lb1", ListenerID: "l1",
				Backends: []flows.Backend{be("member-1", m1)},
				L7:       &flows.L7{Pools: []flows.L7Pool{{ID: "p1", Backends: []flows.Backend{be("member-1", m1)}}, {ID: "p2", Backends: []flows.Backend{be("member-2", m2)}}}}}},
			read: map[flows.Key]flows.Stats{k1: {Members: map[netip.AddrPort]flows.Counters{m2: {Connections: 4}}}},
			want: map[flows.Key]pendingStats{k1: {service: owned(be("member-1", m1), be("member-2", m2)),
				Stats: flows.Stats{Members: map[netip.AddrPort]flows.Counters{m2: {Connections: 4}}}}}},
		{name: "a backend that left keeps its member", programmed: withMembers,
			pending: map[flows.Key]pendingStats{k1: {service: owned(be("member-2", m2)),
				Stats: flows.Stats{Members: map[netip.AddrPort]flows.Counters{m2: {Connections: 1}}}}},
			read: map[flows.Key]flows.Stats{k1: {Members: mc(1)}},
			want: map[flows.Key]pendingStats{k1: {service: owned(be("member-1", m1), be("member-2", m2)),
				Stats: flows.Stats{Members: map[netip.AddrPort]flows.Counters{m1: {Connections: 1, BytesIn: 10}, m2: {Connections: 1}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeStats(tc.pending, tc.read, tc.programmed); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name    string
		pending map[flows.Key]pendingStats
		read    map[flows.Key]flows.Stats
		want    map[flows.Key]pendingStats
	}{
		{name: "first read", pending: map[flows.Key]pendingStats{},
			read: map[flows.Key]flows.Stats{k1: {Counters: c(2), Active: 1}},
			want: map[flows.Key]pendingStats{k1: {service: owner(k1, "lb1", "l1"), Stats: flows.Stats{Counters: c(2), Active: 1}}}},
		{name: "unsent counters add up, open connections are the latest",
			pending: map[flows.Key]pendingStats{k1: {service: owner(k1, "lb1", "l1"), Stats: flows.Stats{Counters: c(2), Active: 5}}},
			read:    map[flows.Key]flows.Stats{k1: {Counters: c(3), Active: 1}, k2: {Active: 4}},
			want: map[flows.Key]pendingStats{k1: {service: owner(k1, "lb1", "l1"), Stats: flows.Stats{Counters: c(5), Active: 1}},
				k2: {service: owner(k2, "lb2", "l2"), Stats: flows.Stats{Active: 4}}}},
		{name: "a service not read has no open connection; one with nothing goes",
			pending: map[flows.Key]pendingStats{k1: {service: owner(k1, "lb1", "l1"), Stats: flows.Stats{Counters: c(2), Active: 5}},
				k2: {service: owner(k2, "lb2", "l2"), Stats: flows.Stats{Active: 4}}},
			read: map[flows.Key]flows.Stats{},
			want: map[flows.Key]pendingStats{k1: {service: owner(k1, "lb1", "l1"), Stats: flows.Stats{Counters: c(2)}}}},
		{name: "a deleted service keeps its owners; an unknown one is dropped",
			pending: map[flows.Key]pendingStats{k3: {service: owner(k3, "lb3", "l3"), Stats: flows.Stats{Counters: c(1)}}},
			read:    map[flows.Key]flows.Stats{k3: {Counters: c(1)}, {VIP: netip.MustParseAddr("198.19.0.99"), Protocol: flows.TCP, Port: 1}: {Counters: c(9)}},
			want:    map[flows.Key]pendingStats{k3: {service: owner(k3, "lb3", "l3"), Stats: flows.Stats{Counters: c(2)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeStats(tc.pending, tc.read, programmed); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestStatsWait(t *testing.T) {
	for _, c := range []struct {
		interval, read, want time.Duration
	}{
		{5 * time.Second, 10 * time.Millisecond, 5 * time.Second},     // cheap: as configured
		{5 * time.Second, 250 * time.Millisecond, 5 * time.Second},    // a twentieth exactly
		{5 * time.Second, 300 * time.Millisecond, 6 * time.Second},    // 1,000 services × 10 backends
		{5 * time.Second, 20 * time.Second, 400 * time.Second},        // 10,000: a read every few minutes
		{time.Second, 0, time.Second},                                 // a failed read takes no time
		{30 * time.Second, 1500 * time.Millisecond, 30 * time.Second}, // a long interval stays
		{30 * time.Second, 1600 * time.Millisecond, 32 * time.Second}, // until a read exceeds its twentieth
	} {
		if got := statsWait(c.interval, c.read); got != c.want {
			t.Errorf("statsWait(%v, %v) = %v, want %v", c.interval, c.read, got, c.want)
		}
	}
}
