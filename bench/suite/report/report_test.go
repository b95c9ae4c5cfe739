package report

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/bench/suite/results"
)

func TestFigure(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.01234: "0.0123", 1.234: "1.23", 12.34: "12.3", 1234.5: "1,235", 12345678: "12,345,678", -2.5: "-2.50"} {
		if got := Figure(v); got != want {
			t.Errorf("Figure(%v) = %q, want %q", v, got, want)
		}
	}
}

func record() results.Run {
	r := results.Run{Date: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), Commit: "abc123", Machine: results.Machine{CPUs: 2, Model: "m", Kernel: "6.1", MemGiB: 24}}
	c := results.Contest{Name: "fwd", Title: "Services created to every node forwarding", Unit: "s", Size: "Services", LowerIsBetter: true}
	for round, v := range []float64{1, 2, 3} {
		r.Add(c, results.Sample{Contender: "flowlb", Size: 1000, Round: round, Value: v})
		r.Add(c, results.Sample{Contender: "kube-proxy nftables", Size: 1000, Round: round, Value: 4 * v})
	}
	return r
}

func TestMarkdownHasTheTableAndThePlot(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, record(), map[string]string{"fwd": "images/bench/fwd.png"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- Commit: `abc123`",
		"## Services created to every node forwarding",
		"![Services created to every node forwarding](images/bench/fwd.png)",
		"| 1,000 | flowlb | 3 | 2.00 | 1.00–3.00 | – |",
		"| 1,000 | kube-proxy nftables | 3 | 8.00 | 4.00–12.0 | 4.00× |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, b.String())
		}
	}
}

func TestPlotWritesAnImage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fwd.png")
	if err := Plot(record().Contests[0], path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
		t.Errorf("image %v too small", b)
	}
	if err := Plot(results.Contest{Name: "empty"}, path); err == nil {
		t.Error("a contest without samples plotted")
	}
}

// withCDF is record() with two contenders' per-Service latencies over
// two rounds.
func withCDF() results.Run {
	r := record()
	d := results.Distribution{Name: "svc", Title: "One Service created → every node forwards it", Unit: "s", Size: 1000}
	for round := 1; round <= 2; round++ {
		d.Round = round
		d.Contender, d.Values = "kube-proxy nftables", []float64{4, 1, 3}
		r.Distributions = append(r.Distributions, d)
		d.Contender, d.Values = "flowlb", []float64{0.05, 0}
		r.Distributions = append(r.Distributions, d)
	}
	return r
}

func TestMarkdownHasTheDistributions(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, withCDF(), map[string]string{"cdf/svc/1000": "images/bench/svc-1000-cdf.png"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Distribution: One Service created → every node forwards it, 1,000 Services",
		"![One Service created → every node forwards it](images/bench/svc-1000-cdf.png)",
		"| flowlb | 4 | 0 | 0.05 | 0.05 | 0.05 |",
		"| kube-proxy nftables | 6 | 3.00 | 4.00 | 4.00 | 4.00 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, b.String())
		}
	}
	if i, j := strings.Index(b.String(), "| flowlb | 4"), strings.Index(b.String(), "| kube-proxy nftables | 6"); i > j {
		t.Error("flowlb is not the first row")
	}
}

func TestPlotCDFWritesAnImage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.png")
	groups := withCDF().CDFs()
	if len(groups) != 1 || len(groups[0].CDFs) != 2 || groups[0].CDFs[0].Contender != "flowlb" {
		t.Fatalf("groups %+v: want one with flowlb first", groups)
	}
	if err := PlotCDF(groups[0], path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatal(err)
	}
	if err := PlotCDF(results.CDFGroup{Name: "empty"}, path); err == nil {
		t.Error("a group without values plotted")
	}
}

func TestCurvePlotsOnLogAxes(t *testing.T) {
	c := results.Contest{Name: "active", Title: "N load balancers → all ACTIVE", Unit: "s", Size: "load balancers",
		LowerIsBetter: true, Baseline: "flowlb (SQLite)", Curve: true}
	c.Samples = []results.Sample{
		{Contender: "flowlb (SQLite)", Size: 100, Round: 1, Value: 0.3}, {Contender: "octavia", Size: 100, Round: 1, Value: 72},
		{Contender: "flowlb (SQLite)", Size: 1000, Round: 1, Value: 2}, {Contender: "octavia", Size: 1000, Round: 1, Value: 700},
	}
	dir := t.TempDir()
	if err := Plot(c, filepath.Join(dir, "two.png")); err != nil {
		t.Fatal(err)
	}
	// One size only, as the smoke run has: the axes still have a range.
	c.Samples = c.Samples[:2]
	if err := Plot(c, filepath.Join(dir, "one.png")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"two.png", "one.png"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
			t.Errorf("%s: image %v too small", name, b)
		}
	}
	c.Samples = []results.Sample{{Contender: "octavia", Size: 100, Value: 0}}
	if err := Plot(c, filepath.Join(dir, "zero.png")); err == nil {
		t.Error("a curve of zeros plotted on a log scale")
	}
}

func TestMarkdownNamesTheContestsBaselineAndSources(t *testing.T) {
	r := record()
	r.Contests[0].Baseline = "kube-proxy nftables"
	r.Sources = []results.Source{{File: "kube.json", Commit: "k1", Contests: []string{"fwd"}}, {File: "lbaas.json", Commit: "a1", Contests: []string{"x", "y"}}}
	var b bytes.Buffer
	if err := Markdown(&b, r, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Services | contender | rounds | median | spread | ratio to kube-proxy nftables |",
		"| 1,000 | flowlb | 3 | 2.00 | 1.00–3.00 | 0.25× |",
		"| 1,000 | kube-proxy nftables | 3 | 8.00 | 4.00–12.0 | – |",
		"  - `lbaas.json` (x, y): ",
		"commit `k1`",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, b.String())
		}
	}
}

// TestBarGroupsStayInTheirSlots: however many sizes and contenders, a
// size's group of bars is narrower than its share of the axis (three
// sizes of three contenders overlapped their neighbours with a fixed
// bar width).
func TestBarGroupsStayInTheirSlots(t *testing.T) {
	for sizes := 1; sizes <= 6; sizes++ {
		for contenders := 1; contenders <= 4; contenders++ {
			image, bar := barLayout(sizes, contenders)
			slot := (image.Points() - 70) / float64(sizes)
			if group := bar.Points() * float64(contenders); group > slot || bar <= 0 {
				t.Errorf("%d sizes × %d contenders: group %.0f pt in a slot of %.0f pt", sizes, contenders, group, slot)
			}
		}
	}
}
