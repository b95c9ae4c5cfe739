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
