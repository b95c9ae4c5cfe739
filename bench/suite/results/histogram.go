package results

import (
	"cmp"
	"math"
	"slices"
)

// Bucket is one cumulative bucket of a Prometheus histogram: Count
// observations at most UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// HistogramQuantile estimates the q-quantile (0..1) of the observations
// in cumulative buckets as Prometheus' histogram_quantile does: it finds
// the bucket holding the rank and interpolates linearly within it (from
// 0 for the first bucket); a rank in the +Inf bucket gives the highest
// finite bound. NaN when there is no observation.
func HistogramQuantile(q float64, buckets []Bucket) float64 {
	bs := slices.Clone(buckets)
	slices.SortFunc(bs, func(a, b Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) })
	if len(bs) == 0 || bs[len(bs)-1].Count == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].Count
	lower, below := 0.0, 0.0
	for i, b := range bs {
		if b.Count >= rank {
			if math.IsInf(b.UpperBound, 1) {
				if i == 0 {
					return math.NaN()
				}
				return bs[i-1].UpperBound
			}
			if b.Count == below {
				return b.UpperBound
			}
			return lower + (b.UpperBound-lower)*(rank-below)/(b.Count-below)
		}
		lower, below = b.UpperBound, b.Count
	}
	return bs[len(bs)-1].UpperBound
}

// Sub returns the buckets of a histogram read after minus those read
// before, bound by bound: the observations made in between.
func Sub(after, before []Bucket) []Bucket {
	out := slices.Clone(after)
	for i, a := range out {
		for _, b := range before {
			if b.UpperBound == a.UpperBound {
				out[i].Count -= b.Count
			}
		}
	}
	return out
}
