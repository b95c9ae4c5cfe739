package results

import "slices"

// Distribution is every value of one measurement of one contender in
// one round (e.g. each Service's time to every node), for the latency
// CDFs that a median and a spread would hide.
type Distribution struct {
	Name      string    `json:"name"` // file-name safe, e.g. kube-service-latency
	Title     string    `json:"title"`
	Unit      string    `json:"unit"`
	Contender string    `json:"contender"`
	Size      int       `json:"size"`
	Round     int       `json:"round"`
	Values    []float64 `json:"values"`
}

// CDF is one contender's values of a measurement at one size, all
// rounds together, sorted.
type CDF struct {
	Contender string
	Values    []float64
}

// CDFGroup is one measurement at one size: what one CDF plot shows.
type CDFGroup struct {
	Name, Title, Unit string
	Size              int
	CDFs              []CDF // the baseline first
}

// CDFs groups the run's distributions by measurement and size, in the
// order they were first recorded.
func (r Run) CDFs() []CDFGroup {
	var out []CDFGroup
	for _, d := range r.Distributions {
		gi := slices.IndexFunc(out, func(g CDFGroup) bool { return g.Name == d.Name && g.Size == d.Size })
		if gi < 0 {
			out = append(out, CDFGroup{Name: d.Name, Title: d.Title, Unit: d.Unit, Size: d.Size})
			gi = len(out) - 1
		}
		g := &out[gi]
		ci := slices.IndexFunc(g.CDFs, func(c CDF) bool { return c.Contender == d.Contender })
		if ci < 0 {
			g.CDFs = append(g.CDFs, CDF{Contender: d.Contender})
			ci = len(g.CDFs) - 1
		}
		g.CDFs[ci].Values = append(g.CDFs[ci].Values, d.Values...)
	}
	for i := range out {
		for j := range out[i].CDFs {
			slices.Sort(out[i].CDFs[j].Values)
		}
		slices.SortStableFunc(out[i].CDFs, func(a, b CDF) int { return baselineFirst(Baseline, a.Contender, b.Contender) })
	}
	return out
}
