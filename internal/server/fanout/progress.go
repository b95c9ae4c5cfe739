package fanout

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// takenTimes remembers when this replica's table took each recent
// revision, so that an ack can be timed from it. Its lock is taken last.
type takenTimes struct {
	mu    sync.Mutex
	revs  []int64
	times []time.Time
}

// takenBound is how many recent revisions are timed; an ack of an older
// one goes untimed.
const takenBound = 4096

// add records that revision rev (above every one before) was taken at t.
func (k *takenTimes) add(rev int64, t time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n := len(k.revs); n > 0 && rev <= k.revs[n-1] {
		return
	}
	if len(k.revs) == takenBound {
		k.revs, k.times = k.revs[1:], k.times[1:]
	}
	k.revs = append(k.revs, rev)
	k.times = append(k.times, t)
}

// firstAfter is when the oldest recorded revision above after, and at
// most upTo, was taken: what an ack raising an agent from after to upTo
// newly covers; false when none is recorded.
func (k *takenTimes) firstAfter(after, upTo int64) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	i, _ := slices.BinarySearch(k.revs, after+1)
	if i == len(k.revs) || k.revs[i] > upTo {
		return time.Time{}, false
	}
	return k.times[i], true
}

// lagCollector reports how many revisions each agent of this replica is
// behind its table.
type lagCollector struct {
	h    *Hub
	desc *prometheus.Desc
}

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	rev := c.h.served.revision()
	// A node with two streams (moving between them) is as far behind as
	// its newest.
	for node, acked := range c.h.acks.localRevisions() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(max(rev-acked, 0)), node)
	}
}
