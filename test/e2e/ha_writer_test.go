package e2e

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// pendingClock checks how long load balancers stay PENDING_*: at most
// bound, plus the time the database was down while they were.
type pendingClock struct {
	bound time.Duration
	mu    sync.Mutex
	// outages are the intervals the database was down (end zero: still).
	outages [][2]time.Time
	// The longest pending time of a load balancer, apart from the
	// database's outages and across one, and which it was.
	longest, across  time.Duration
	what, acrossWhat string
	count            int
}

// allowed is how long a change pending from `from` to `to` may take.
func (p *pendingClock) allowed(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bound + p.down(from, to)
}

// down is how long the database was down between from and to. Called
// with p.mu held.
func (p *pendingClock) down(from, to time.Time) time.Duration {
	var d time.Duration
	for _, o := range p.outages {
		end := o[1]
		if end.IsZero() {
			end = to
		}
		if start, stop := maxTime(o[0], from), minTime(end, to); stop.After(start) {
			d += stop.Sub(start)
		}
	}
	return d
}

// observe records that what was pending from `from` to `to`.
func (p *pendingClock) observe(from, to time.Time, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count++
	d := to.Sub(from)
	switch {
	case p.down(from, to) > 0 && d > p.across:
		p.across, p.acrossWhat = d, what
	case p.down(from, to) == 0 && d > p.longest:
		p.longest, p.what = d, what
	}
}

func (p *pendingClock) outage(start bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if start {
		p.outages = append(p.outages, [2]time.Time{time.Now()})
	} else {
		p.outages[len(p.outages)-1][1] = time.Now()
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// lbModel is what a writer knows a load balancer of its own holds.
type lbModel struct {
	id, name, pool string
	// members by id: address and weight.
	members map[string]memberModel
}

type memberModel struct {
	name, addr string
	weight     int
}

// writer is one API client writing on load balancers of its own, one
// change at a time: it waits until each change is ACTIVE (measuring how
// long it was pending) before the next, as a tool like Terraform does.
type writer struct {
	t      *testing.T
	n      int
	api    *replicaAPI
	clock  *pendingClock
	subnet string
	addrs  []string // member addresses to choose from
	rng    *rand.Rand
	seq    int

	lbs []*lbModel
	// Deleted with a 2xx answer (or seen deleted after an answer that
	// left it unknown): they must stay gone.
	deletedLBs, deletedMembers []string
	// stuck are load balancers that never settled (each a test error
	// already): the writer leaves them alone.
	stuck []string
	// acked writes got a 2xx answer; adopted ones were found done after
	// an answer that left it unknown (a replica killed mid-request, a
	// 503 of a commit that went through).
	acked, adopted int
}

// writeDeadline bounds one write's attempts.
const writeDeadline = 60 * time.Second

// run writes until stop is closed.
func (w *writer) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(20+w.rng.IntN(40)) * time.Millisecond): // think time
		}
		w.step()
	}
}

// step makes one random change.
func (w *writer) step() {
	r := w.rng.Float64()
	switch {
	case len(w.lbs) == 0 || (r < 0.08 && len(w.lbs) < 2):
		w.createLB()
		return
	case r < 0.14:
		w.deleteLB(w.lbs[w.rng.IntN(len(w.lbs))])
		return
	}
	lb := w.lbs[w.rng.IntN(len(w.lbs))]
	ids := slices.Sorted(maps.Keys(lb.members))
	switch {
	case len(ids) == 0 || (r < 0.45 && len(ids) < 4):
		w.addMember(lb)
	case r < 0.75:
		w.setWeight(lb, ids[w.rng.IntN(len(ids))])
	default:
		w.deleteMember(lb, ids[w.rng.IntN(len(ids))])
	}
}

func (w *writer) name(kind string) string {
	w.seq++
	return fmt.Sprintf("ha-w%d-%s%d", w.n, kind, w.seq)
}

// change sends a write until a replica answers 2xx, or, after an answer
// that leaves the outcome unknown, done shows that it happened. It
// returns the 2xx answer (or done's finding), when it was sent first, and
// false when it failed for good (a test error).
func (w *writer) change(method, path string, body any, done func() (map[string]any, bool)) (map[string]any, time.Time, bool) {
	start := time.Now()
	for time.Since(start) < writeDeadline {
		code, out, err := w.api.send(method, path, body)
		switch {
		case err == nil && code/100 == 2:
			w.acked++
			return out, start, true
		case errors.Is(err, errRefused):
			continue // not sent: the next replica
		case err == nil && code != 409 && code < 500:
			w.t.Errorf("writer %d: %s %s: %d %v", w.n, method, path, code, out)
			return nil, start, false
		}
		// A lost connection, a 503, or a conflict with an earlier attempt
		// that went through: look before sending again.
		if found, ok := done(); ok {
			w.adopted++
			return found, start, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.t.Errorf("writer %d: %s %s not done within %s", w.n, method, path, writeDeadline)
	return nil, start, false
}

// get reads path through any replica, failing the test if none answers.
func (w *writer) get(path string) (int, map[string]any, bool) {
	code, out, err := w.api.read(path, writeDeadline)
	if err != nil {
		w.t.Errorf("writer %d: GET %s: %v", w.n, path, err)
		return 0, nil, false
	}
	return code, out, true
}

// settled waits until the load balancer is ACTIVE (or, gone, deleted)
// and checks how long it was pending since the write was sent. It
// returns false, the load balancer left behind, if it never settles.
func (w *writer) settled(lb *lbModel, since time.Time, gone bool) bool {
	for {
		code, out, ok := w.get("/v2/lbaas/loadbalancers/" + lb.id)
		if !ok {
			return false
		}
		st := status(out, "loadbalancer")
		now := time.Now()
		if (gone && code == 404) || (!gone && st == "ACTIVE") {
			d, allowed := now.Sub(since), w.clock.allowed(since, now)
			w.clock.observe(since, now, lb.name)
			if d > allowed {
				w.t.Errorf("writer %d: %s pending for %s, more than %s", w.n, lb.name, d.Round(time.Millisecond), allowed)
			}
			return true
		}
		if code != 200 || !strings.HasPrefix(st, "PENDING_") {
			w.t.Errorf("writer %d: %s answers %d %q while settling", w.n, lb.name, code, st)
			return false
		}
		if limit := w.clock.allowed(since, now) + 20*time.Second; now.Sub(since) > limit {
			w.t.Errorf("writer %d: %s still %s %s after the write (bound %s)", w.n, lb.name, st, now.Sub(since).Round(time.Millisecond), w.clock.allowed(since, now))
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drop forgets a load balancer that did not settle (reported already),
// so that the writer goes on with the others.
func (w *writer) drop(lb *lbModel) {
	w.lbs = slices.DeleteFunc(w.lbs, func(x *lbModel) bool { return x == lb })
}
