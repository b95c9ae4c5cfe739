package results

import (
	"math"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	// 10 observations: 4 at most 0.25 s, 8 at most 0.5 s, 10 at most 1 s.
	bs := []Bucket{{0.5, 8}, {0.25, 4}, {1, 10}, {inf, 10}}
	for _, tc := range []struct {
		q    float64
		want float64
	}{
		{0.2, 0.125}, // rank 2 of 4 in (0, 0.25]
		{0.4, 0.25},
		{0.5, 0.3125}, // rank 5: 1 of 4 in (0.25, 0.5]
		{0.9, 0.75},
		{1, 1},
	} {
		if got := HistogramQuantile(tc.q, bs); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("q %v: %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := HistogramQuantile(0.99, []Bucket{{1, 1}, {inf, 3}}); got != 1 {
		t.Errorf("a rank in +Inf: %v, want the highest finite bound", got)
	}
	if got := HistogramQuantile(0.5, []Bucket{{1, 0}, {inf, 0}}); !math.IsNaN(got) {
		t.Errorf("no observation: %v", got)
	}
	if got := HistogramQuantile(0.5, nil); !math.IsNaN(got) {
		t.Errorf("no buckets: %v", got)
	}
}

func TestSubIsWhatHappenedBetween(t *testing.T) {
	inf := math.Inf(1)
	before := []Bucket{{1, 3}, {inf, 4}}
	after := []Bucket{{1, 5}, {inf, 9}}
	got := Sub(after, before)
	if got[0].Count != 2 || got[1].Count != 5 || after[0].Count != 5 {
		t.Errorf("Sub = %v (after now %v)", got, after)
	}
}
