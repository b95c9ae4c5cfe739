package nftables

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func TestOpenCheckNeeded(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	recent := now.Add(-5 * time.Second)
	for _, tc := range []struct {
		name    string
		c       openCheck
		counted bool
		want    bool
	}{
		{"nothing known (the first read, or after an error)", openCheck{}, false, true},
		{"quiet: none open, nothing counted then or now", openCheck{known: true, dumped: recent}, false, false},
		{"packets counted now", openCheck{known: true, dumped: recent}, true, true},
		{"packets counted by the last read", openCheck{known: true, counted: true, dumped: recent}, false, true},
		{"connections open at the last read", openCheck{known: true, open: true, dumped: recent}, false, true},
		{"quiet for a minute since the last dump", openCheck{known: true, dumped: now.Add(-openCheckMax)}, false, true},
		{"quiet, just under a minute", openCheck{known: true, dumped: now.Add(-openCheckMax + time.Second)}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.needed(tc.counted, now); got != tc.want {
				t.Errorf("needed(%v) = %v, want %v", tc.counted, got, tc.want)
			}
		})
	}
}

// scriptedStats is a kernel's counters and conntrack as a script: each
// read's stats_new packets for one service, and what each dump finds.
type scriptedStats struct {
	svc     flows.Key
	packets uint64 // stats_new of the read under way (the first family)
	open    uint64 // connections the next dump finds
	failing error  // the next dump's error
	dumps   int
}

func (s *scriptedStats) readReset(f *family, set string) (map[counterKey]counter, error) {
	if f != families[0] || set != statsNewSet || s.packets == 0 {
		return nil, nil
	}
	return map[counterKey]counter{{svc: s.svc}: {packets: s.packets, bytes: 60 * s.packets}}, nil
}

func (s *scriptedStats) active() (map[flows.Key]uint64, error) {
	s.dumps++
	if s.failing != nil {
		return nil, s.failing
	}
	if s.open == 0 {
		return map[flows.Key]uint64{}, nil
	}
	return map[flows.Key]uint64{s.svc: s.open}, nil
}

// TestReadStatsDumpsWhileConnectionsMayBeOpen: a read dumps conntrack
// when it must (the first, after packets were counted by it or the one
// before, while connections were open, after a failed dump, and a
// minute after the last), and reports the connections open then; on a
// quiet node it reads the counters alone.
func TestReadStatsDumpsWhileConnectionsMayBeOpen(t *testing.T) {
	dp, _ := fakeDataplane(t)
	k := flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.TCP, Port: 80}
	st := &scriptedStats{svc: k}
	dp.stats = st
	for i, step := range []struct {
		name          string
		packets, open uint64
		failing       error
		aged          bool // the last dump a minute ago
		dump          bool
		active        uint64
	}{
		{name: "first read", dump: true},
		{name: "quiet"},
		{name: "quiet again"},
		{name: "a connection's first packet, not yet in conntrack", packets: 1, dump: true},
		{name: "the read after it", open: 1, dump: true, active: 1},
		{name: "open, idle", open: 1, dump: true, active: 1},
		{name: "ended", dump: true},
		{name: "quiet after it"},
		{name: "a minute after the last dump", aged: true, dump: true},
		{name: "a dump fails", failing: errors.New("ENOBUFS"), aged: true, dump: true},
		{name: "after the failure", dump: true},
		{name: "quiet once more"},
	} {
		st.packets, st.open, st.failing = step.packets, step.open, step.failing
		if step.aged {
			dp.open.dumped = dp.open.dumped.Add(-openCheckMax)
		}
		before := st.dumps
		got, err := dp.ReadStats()
		if (err != nil) != (step.failing != nil) {
			t.Fatalf("step %d (%s): error %v", i+1, step.name, err)
		}
		if dumped := st.dumps > before; dumped != step.dump {
			t.Errorf("step %d (%s): dumped %v, want %v", i+1, step.name, dumped, step.dump)
		}
		if got[k].Active != step.active || got[k].Connections != step.packets {
			t.Errorf("step %d (%s): %+v, want %d active, %d connections", i+1, step.name, got[k], step.active, step.packets)
		}
	}
}
