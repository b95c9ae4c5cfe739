package kubecontroller

import (
	"math/rand/v2"
	"testing"
	"time"
)

// readUntil reads a change that becomes ACTIVE at active on the schedule
// after, and returns the reads it took, when the last read that did not
// see ACTIVE was (0: none) and when the one that did.
func readUntil(after func(reads int) time.Duration, active time.Duration) (reads int, notYet, seen time.Duration) {
	for {
		notYet, seen = seen, seen+after(reads)
		reads++
		if seen >= active {
			return reads, notYet, seen
		}
	}
}

// TestSettleReadsPerChange simulates changes whose time to ACTIVE varies
// around a typical time, each read at the settle schedule, and checks
// the reads per change and how late ACTIVE is seen, against the fixed
// schedule the controller had before (5 ms, doubling to 200 ms).
func TestSettleReadsPerChange(t *testing.T) {
	fixed := func(reads int) time.Duration { return min(5*time.Millisecond<<reads, 200*time.Millisecond) }
	for _, c := range []struct {
		name    string
		typical time.Duration
		// maxReads bounds the mean reads per change once learnt;
		// maxLate the mean time from ACTIVE to the read that sees it.
		maxReads float64
		maxLate  time.Duration
	}{
		{"quiet: a few ms, read at 5 ms as before", 2 * time.Millisecond, 1.0, 5 * time.Millisecond},
		{"1,000 Services at once: tens of ms", 50 * time.Millisecond, 1.6, 30 * time.Millisecond},
		{"slow agents: 300 ms", 300 * time.Millisecond, 1.7, 120 * time.Millisecond},
		{"very slow: 3 s (the first read is at most 1 s)", 3 * time.Second, 12, 120 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var s settle
			var reads, oldReads int
			var late, oldLate time.Duration
			const warm, n = 200, 1000
			for i := range warm + n {
				// ±50 % around the typical time.
				active := c.typical/2 + time.Duration(rng.Int64N(int64(c.typical)))
				r, notYet, seen := readUntil(s.after, active)
				s.observe(notYet, seen)
				o, _, oldSeen := readUntil(fixed, active)
				if i >= warm {
					reads, late, oldReads, oldLate = reads+r, late+seen-active, oldReads+o, oldLate+oldSeen-active
				}
			}
			mean, meanLate, oldMean := float64(reads)/n, late/n, float64(oldReads)/n
			t.Logf("%.2f reads per change, ACTIVE seen %s late on average, first read at %s (fixed schedule: %.2f reads, %s late)",
				mean, meanLate.Round(time.Millisecond), s.first().Round(time.Millisecond), oldMean, (oldLate / n).Round(time.Millisecond))
			if mean > c.maxReads {
				t.Errorf("%.2f reads per change, want at most %.2f", mean, c.maxReads)
			}
			if meanLate > c.maxLate {
				t.Errorf("ACTIVE seen %s late on average, want at most %s", meanLate, c.maxLate)
			}
			if mean > oldMean {
				t.Errorf("%.2f reads per change, more than the fixed schedule's %.2f", mean, oldMean)
			}
		})
	}
}

func TestSettleBounds(t *testing.T) {
	var s settle
	if s.after(0) != minFirstCheck || s.after(1) != minFirstCheck || s.after(2) != 2*minFirstCheck || s.after(10) != maxCheckGap {
		t.Errorf("unlearnt schedule %s, %s, %s, %s: want 5 ms, 5 ms, 10 ms, 200 ms", s.after(0), s.after(1), s.after(2), s.after(10))
	}
	s.est = 50 * time.Millisecond
	// One change that took 2 minutes (the agents were away) raises the
	// first read by at most 3/4 of it.
	s.observe(time.Minute, 2*time.Minute)
	if got := s.first(); got > 50*time.Millisecond*7/4 {
		t.Errorf("first read at %s after one slow change, want at most 87.5 ms", got)
	}
	for range 100 {
		s.observe(time.Minute, 2*time.Minute)
	}
	if got, gap := s.first(), s.after(3); got != maxFirstCheck || gap != maxCheckGap {
		t.Errorf("after slow changes: first read at %s and a later one %s after the previous, want %s and %s", got, gap, maxFirstCheck, maxCheckGap)
	}
	for range 200 {
		s.observe(0, time.Millisecond)
	}
	if got := s.first(); got != minFirstCheck {
		t.Errorf("after fast changes: first read at %s, want %s", got, minFirstCheck)
	}
}
