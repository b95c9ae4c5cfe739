package report

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/flowlb/flowlb/bench/suite/results"
)

// CDFKey is the key of a CDF group's image in Markdown's images.
func CDFKey(g results.CDFGroup) string { return fmt.Sprintf("cdf/%s/%d", g.Name, g.Size) }

// PlotCDF draws a group's distributions as cumulative curves, one per
// contender, on a logarithmic value axis (contenders differ by orders of
// magnitude), and writes the image to path.
func PlotCDF(g results.CDFGroup, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s %s", g.Title, thousands(g.Size), "Services")
	p.X.Label.Text = g.Unit + " (log scale)"
	p.Y.Label.Text = "fraction at most"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	lines := 0
	for i, c := range g.CDFs {
		if len(c.Values) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(c.Values))
		for j, v := range c.Values {
			// A log axis has no zero: the smallest value shown is 0.1 ms.
			pts[j] = plotter.XY{X: math.Max(v, 1e-4), Y: float64(j+1) / float64(len(c.Values))}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(2)
		p.Add(l)
		p.Legend.Add(c.Contender, l)
		lines++
	}
	if lines == 0 {
		return fmt.Errorf("distribution %s at %d has no values", g.Name, g.Size)
	}
	// Bottom right: every curve has risen by the time it is that far right.
	p.Legend.Top, p.Legend.Left = false, false
	p.Add(plotter.NewGrid())
	return p.Save(165*vg.Millimeter, 85*vg.Millimeter, path)
}
