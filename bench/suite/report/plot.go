package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/flowlb/flowlb/bench/suite/results"
)

// palette: flowlb first, in the same color on every plot.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// Plot draws a contest as grouped bars: one group per size, one bar per
// contender at its median, with the spread (lowest–highest) as error
// bars; a Curve contest as lines instead (see curve). It writes the
// image to path (the extension picks the format: .png or .svg).
func Plot(c results.Contest, path string) error {
	sums := c.Summarize()
	if len(sums) == 0 {
		return fmt.Errorf("contest %s has no samples", c.Name)
	}
	if c.Curve {
		return curve(c, sums, path)
	}
	var sizes []int
	for _, s := range sums {
		if !slices.Contains(sizes, s.Size) {
			sizes = append(sizes, s.Size)
		}
	}
	contenders := c.Contenders()
	p := plot.New()
	p.Title.Text = c.Title
	p.Y.Label.Text = c.Unit
	p.X.Label.Text = c.Size
	p.Y.Min = 0
	w, width := barLayout(len(sizes), len(contenders))
	for i, who := range contenders {
		med := make(plotter.Values, len(sizes))
		errs := make(spread, len(sizes))
		for j, size := range sizes {
			for _, s := range sums {
				if s.Contender == who && s.Size == size {
					med[j] = s.Median
					errs[j] = [3]float64{s.Median, s.Median - s.Min, s.Max - s.Median}
				}
			}
		}
		bars, err := plotter.NewBarChart(med, width)
		if err != nil {
			return err
		}
		bars.Color = palette[i%len(palette)]
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(contenders)-1)/2)
		p.Add(bars)
		p.Legend.Add(who, bars)
		p.Add(errorBars{s: errs, offset: bars.Offset})
	}
	names := make([]string, len(sizes))
	for j, s := range sizes {
		names[j] = thousands(s)
	}
	p.NominalX(names...)
	p.Legend.Top = true
	// Room above the highest bar for the legend.
	var top float64
	for _, s := range sums {
		top = max(top, s.Max)
	}
	p.Y.Max = top * (1.15 + 0.12*float64(len(contenders)))
	return p.Save(w, 85*vg.Millimeter, path)
}

// barLayout is the image's width and each bar's for groups of bars (one
// per size, one bar per contender): the image widens with the bars, up
// to a point; past it the bars narrow, so that each group stays within
// its own slot of the axis (the axis and its labels take about 70 points
// of the width).
func barLayout(sizes, contenders int) (image, bar vg.Length) {
	image = max(165*vg.Millimeter, vg.Length(30+14*sizes*contenders)*vg.Millimeter)
	slot := (image.Points() - 70) / float64(sizes)
	return image, vg.Points(min(60, 240/float64(contenders), 0.8*slot/float64(contenders)))
}

// spread holds, per size, the median and how far below and above it the
// samples reach.
type spread [][3]float64

// errorBars draws a spread at each group's x moved by offset, the place
// of its contender's bar (gonum's error bars have no offset).
type errorBars struct {
	s      spread
	offset vg.Length
}

func (e errorBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := plotter.DefaultLineStyle
	for i, v := range e.s {
		x := trX(float64(i)) + e.offset
		lo, hi := trY(v[0]-v[1]), trY(v[0]+v[2])
		c.StrokeLine2(sty, x, lo, x, hi)
		c.StrokeLine2(sty, x-3, lo, x+3, lo)
		c.StrokeLine2(sty, x-3, hi, x+3, hi)
	}
}

// DataRange makes the y axis reach the highest sample.
func (e errorBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = 0, float64(len(e.s)-1)
	for _, v := range e.s {
		ymax = max(ymax, v[0]+v[2])
	}
	return xmin, xmax, 0, ymax
}

// curve draws one line per contender through its medians against size,
// with the spread as error bars, on logarithmic axes: the contenders'
// figures may lie decades apart and so may the sizes.
func curve(c results.Contest, sums []results.Summary, path string) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.Y.Label.Text = c.Unit + " (log scale)"
	p.X.Label.Text = c.Size + " (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	lo, hi := math.Inf(1), 0.0
	xlo, xhi := math.Inf(1), 0.0
	for i, who := range c.Contenders() {
		var pts plotter.XYs
		var errs plotter.YErrors
		for _, s := range sums {
			if s.Contender != who || s.Min <= 0 || s.Size <= 0 {
				continue // no place on a log scale
			}
			pts = append(pts, plotter.XY{X: float64(s.Size), Y: s.Median})
			errs = append(errs, struct{ Low, High float64 }{s.Median - s.Min, s.Max - s.Median})
			lo, hi = min(lo, s.Min), max(hi, s.Max)
			xlo, xhi = min(xlo, float64(s.Size)), max(xhi, float64(s.Size))
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		col := palette[i%len(palette)]
		line.Color, points.Color = col, col
		line.Width = vg.Points(2)
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{pts, errs})
		if err != nil {
			return err
		}
		bars.Color = col
		p.Add(line, points, bars)
		p.Legend.Add(who, line, points)
	}
	if hi == 0 {
		return fmt.Errorf("contest %s has no positive values", c.Name)
	}
	p.Legend.Top, p.Legend.Left = true, true
	// A decade of room above for the legend.
	p.Y.Min, p.Y.Max = lo/2, hi*10
	p.X.Min, p.X.Max = xlo/2, xhi*2
	return p.Save(165*vg.Millimeter, 100*vg.Millimeter, path)
}
