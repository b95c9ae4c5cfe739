package results

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestMedianAndPercentile(t *testing.T) {
	for _, tc := range []struct {
		sorted   []float64
		median   float64
		p50, p99 float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{1, 2}, 1.5, 1, 2},
		{[]float64{1, 2, 9}, 2, 2, 9},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5.5, 5, 10},
	} {
		if got := Median(tc.sorted); got != tc.median {
			t.Errorf("Median(%v) = %v, want %v", tc.sorted, got, tc.median)
		}
		if got := Percentile(tc.sorted, 50); got != tc.p50 {
			t.Errorf("Percentile(%v, 50) = %v, want %v", tc.sorted, got, tc.p50)
		}
		if got := Percentile(tc.sorted, 99); got != tc.p99 {
			t.Errorf("Percentile(%v, 99) = %v, want %v", tc.sorted, got, tc.p99)
		}
	}
}

func TestSummarizeGivesMedianSpreadAndRatioToFlowlb(t *testing.T) {
	c := Contest{Name: "x", Samples: []Sample{
		{"kube-proxy", 10, 1, 4}, {"flowlb", 10, 1, 1}, {"kube-proxy", 10, 2, 8}, {"flowlb", 10, 2, 3},
		{"kube-proxy", 10, 3, 6}, {"flowlb", 10, 3, 2},
		{"kube-proxy", 100, 1, 50}, // no flowlb at 100: no ratio
		{"aaa", 10, 1, 1},
	}}
	want := []Summary{
		{Contender: "flowlb", Size: 10, N: 3, Median: 2, Min: 1, Max: 3, Ratio: 1},
		{Contender: "aaa", Size: 10, N: 1, Median: 1, Min: 1, Max: 1, Ratio: 0.5},
		{Contender: "kube-proxy", Size: 10, N: 3, Median: 6, Min: 4, Max: 8, Ratio: 3},
		{Contender: "kube-proxy", Size: 100, N: 1, Median: 50, Min: 50, Max: 50},
	}
	if got := c.Summarize(); !reflect.DeepEqual(got, want) {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
	if got, want := c.Contenders(), []string{"flowlb", "aaa", "kube-proxy"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Contenders = %v, want %v", got, want)
	}
}

func TestRecordRoundTripsAndMerges(t *testing.T) {
	c := Contest{Name: "c", Title: "C", Unit: "s", Size: "Services", LowerIsBetter: true}
	var a, b Run
	a.Date, a.Commit, a.Machine = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), "abc", ThisMachine("make bench")
	a.Add(c, Sample{"flowlb", 1, 1, 0.5})
	b.Add(c, Sample{"kube-proxy", 1, 1, 2})
	b.Add(Contest{Name: "d"}, Sample{"flowlb", 2, 1, 7})
	path := filepath.Join(t.TempDir(), "sub", "r.json")
	if err := a.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("read back %+v, wrote %+v", got, a)
	}
	if got.Machine.CPUs < 1 || got.Machine.Kernel == "" || got.Machine.MemGiB <= 0 {
		t.Errorf("machine facts missing: %+v", got.Machine)
	}
	got.Merge(b)
	if len(got.Contests) != 2 || len(got.Contests[0].Samples) != 2 || got.Contests[0].Samples[1].Contender != "kube-proxy" || got.Contests[1].Name != "d" {
		t.Errorf("merged: %+v", got.Contests)
	}
}

func TestSummarizeComparesWithTheContestsBaseline(t *testing.T) {
	c := Contest{Name: "api", Baseline: "flowlb (SQLite)", Samples: []Sample{
		{"octavia", 100, 1, 70}, {"flowlb (SQLite)", 100, 1, 2}, {"flowlb (PostgreSQL)", 100, 1, 4}, {"flowlb", 100, 1, 1},
	}}
	want := []Summary{
		{Contender: "flowlb (SQLite)", Size: 100, N: 1, Median: 2, Min: 2, Max: 2, Ratio: 1},
		{Contender: "flowlb", Size: 100, N: 1, Median: 1, Min: 1, Max: 1, Ratio: 0.5},
		{Contender: "flowlb (PostgreSQL)", Size: 100, N: 1, Median: 4, Min: 4, Max: 4, Ratio: 2},
		{Contender: "octavia", Size: 100, N: 1, Median: 70, Min: 70, Max: 70, Ratio: 35},
	}
	if got := c.Summarize(); !reflect.DeepEqual(got, want) {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
}

func TestGatherMergesRecordsAndKeepsTheirSources(t *testing.T) {
	dir := t.TempDir()
	kube := Run{Date: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), Commit: "old", Machine: Machine{CPUs: 2, Command: "make bench-kube"}}
	kube.Add(Contest{Name: "k", LowerIsBetter: true}, Sample{"flowlb", 10, 1, 1})
	api := Run{Date: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), Commit: "new", Machine: Machine{CPUs: 2, Command: "make bench-lbaas"}}
	api.Add(Contest{Name: "a", Baseline: "flowlb (SQLite)", Curve: true}, Sample{"octavia", 100, 1, 70})
	for name, r := range map[string]Run{"kube.json": kube, "lbaas.json": api} {
		if err := r.Write(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{filepath.Join(dir, "kube.json"), filepath.Join(dir, "lbaas.json")}
	got, err := Gather(files)
	if err != nil {
		t.Fatal(err)
	}
	if got.Commit != "new" || !got.Date.Equal(api.Date) {
		t.Errorf("dated %s at %s, want the latest record's", got.Date, got.Commit)
	}
	if len(got.Contests) != 2 || got.Contests[1].Baseline != "flowlb (SQLite)" || !got.Contests[1].Curve {
		t.Errorf("contests %+v", got.Contests)
	}
	want := []Source{
		{File: "kube.json", Date: kube.Date, Commit: "old", Machine: kube.Machine, Contests: []string{"k"}},
		{File: "lbaas.json", Date: api.Date, Commit: "new", Machine: api.Machine, Contests: []string{"a"}},
	}
	if !reflect.DeepEqual(got.Sources, want) {
		t.Errorf("sources\n got %+v\nwant %+v", got.Sources, want)
	}
	if _, err := Gather([]string{filepath.Join(dir, "missing.json")}); err == nil {
		t.Error("a missing record gathered")
	}
}

// TestGatherKeepsEachCellFromItsLatestRecord: a newer record's samples
// of a contender at a size replace an older record's, whatever the files'
// order; other cells of the older record stay.
func TestGatherKeepsEachCellFromItsLatestRecord(t *testing.T) {
	dir := t.TempDir()
	old := Run{Date: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), Commit: "old"}
	old.Add(Contest{Name: "full"}, Sample{"flowlb", 1000, 1, 17})
	old.Add(Contest{Name: "full"}, Sample{"flowlb", 100, 1, 1.1})
	old.Add(Contest{Name: "plain"}, Sample{"octavia", 1000, 1, 1415})
	old.Distributions = []Distribution{{Name: "lat", Contender: "flowlb", Size: 1000, Values: []float64{9}},
		{Name: "lat", Contender: "flowlb", Size: 100, Values: []float64{1}}}
	latest := Run{Date: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Commit: "new"}
	latest.Add(Contest{Name: "full"}, Sample{"flowlb", 1000, 1, 6})
	latest.Add(Contest{Name: "full"}, Sample{"octavia", 1000, 1, 900})
	latest.Distributions = []Distribution{{Name: "lat", Contender: "flowlb", Size: 1000, Values: []float64{2}}}
	// The newer record's file sorts first.
	for name, r := range map[string]Run{"a-new.json": latest, "b-old.json": old} {
		if err := r.Write(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Gather([]string{filepath.Join(dir, "a-new.json"), filepath.Join(dir, "b-old.json")})
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string][]Sample{}
	for _, c := range got.Contests {
		samples[c.Name] = c.Samples
	}
	wantFull := []Sample{{"flowlb", 100, 1, 1.1}, {"flowlb", 1000, 1, 6}, {"octavia", 1000, 1, 900}}
	if !reflect.DeepEqual(samples["full"], wantFull) {
		t.Errorf("full: %+v, want %+v", samples["full"], wantFull)
	}
	if want := []Sample{{"octavia", 1000, 1, 1415}}; !reflect.DeepEqual(samples["plain"], want) {
		t.Errorf("plain: %+v, want %+v", samples["plain"], want)
	}
	var lat []float64
	for _, d := range got.Distributions {
		lat = append(lat, d.Values...)
	}
	if !reflect.DeepEqual(lat, []float64{1, 2}) {
		t.Errorf("distributions' values %v, want the old record's size 100 and the new one's size 1000", lat)
	}
	if got.Commit != "new" || len(got.Sources) != 2 || got.Sources[0].File != "b-old.json" {
		t.Errorf("commit %s, sources %+v: want the latest and both, oldest first", got.Commit, got.Sources)
	}
}
