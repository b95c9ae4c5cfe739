// Package results is the benchmark suite's record: every raw sample of
// every contest, with the run's date, commit and machine, as JSON, and
// the summaries (median, spread, ratio to flowlb) that the report and
// the plots are made of.
package results

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Baseline is the contender every other is compared with, unless a
// contest names its own.
const Baseline = "flowlb"

// Sample is one measurement of one contender at one size, in one round.
type Sample struct {
	Contender string  `json:"contender"`
	Size      int     `json:"size"`
	Round     int     `json:"round"`
	Value     float64 `json:"value"`
}

// Contest is one question the suite answers: a metric measured for
// several contenders, alternately, at several sizes.
type Contest struct {
	Name  string `json:"name"`  // file-name safe, e.g. kube-services-forwarding
	Title string `json:"title"` // what is measured, for people
	Unit  string `json:"unit"`  // of Value, e.g. "s"
	Size  string `json:"size"`  // what Size counts, e.g. "Services"
	// LowerIsBetter: times and costs; false for rates.
	LowerIsBetter bool `json:"lower_is_better"`
	// Baseline is the contender the others are compared with (default
	// the package's Baseline), e.g. "flowlb (SQLite)".
	Baseline string `json:"baseline,omitempty"`
	// Curve plots the contest as one line per contender against size on
	// logarithmic axes (sizes and values spanning decades), not as bars.
	Curve   bool     `json:"curve,omitempty"`
	Samples []Sample `json:"samples"`
}

// BaselineName is the contender the others are compared with.
func (c Contest) BaselineName() string {
	if c.Baseline != "" {
		return c.Baseline
	}
	return Baseline
}

// Machine is what the figures depend on.
type Machine struct {
	CPUs    int     `json:"cpus"`
	Model   string  `json:"cpu_model"`
	Kernel  string  `json:"kernel"`
	MemGiB  float64 `json:"mem_gib"`
	Load1   float64 `json:"load1_at_start"`
	GoArch  string  `json:"goarch"`
	Command string  `json:"command"`
}

// Run is one run of the suite (or of one of its benchmarks).
type Run struct {
	Date     time.Time `json:"date"`
	Commit   string    `json:"commit"`
	Machine  Machine   `json:"machine"`
	Contests []Contest `json:"contests"`
	// Distributions: see Distribution.
	Distributions []Distribution `json:"distributions,omitempty"`
	// Sources are the benchmarks' records a gathered run was merged
	// from, each with its own date, commit and machine (they may have
	// been measured on different days).
	Sources []Source `json:"sources,omitempty"`
}

// Source is where some of a gathered run's contests come from.
type Source struct {
	File     string    `json:"file"`
	Date     time.Time `json:"date"`
	Commit   string    `json:"commit"`
	Machine  Machine   `json:"machine"`
	Contests []string  `json:"contests"`
}

// Add records a sample in the contest named c.Name, creating it from c
// the first time.
func (r *Run) Add(c Contest, s Sample) {
	for i := range r.Contests {
		if r.Contests[i].Name == c.Name {
			r.Contests[i].Samples = append(r.Contests[i].Samples, s)
			return
		}
	}
	c.Samples = []Sample{s}
	r.Contests = append(r.Contests, c)
}

// Merge adds o's contests (samples appended to those of the same name)
// and distributions.
func (r *Run) Merge(o Run) {
	r.Distributions = append(r.Distributions, o.Distributions...)
	for _, c := range o.Contests {
		head := c
		head.Samples = nil
		for _, s := range c.Samples {
			r.Add(head, s)
		}
	}
}

// Gather merges records read from files into one run, dated by the
// latest, and lists each as a source. Records merge oldest first, and a
// record's samples of a contender at a size replace an older record's
// of the same contest, contender and size (and its distributions those
// of the same name): each figure of the page comes from one run, the
// latest, since its contenders alternate within a run, not across runs.
func Gather(files []string) (Run, error) {
	type record struct {
		run Run
		src Source
	}
	var recs []record
	for _, f := range files {
		r, err := Read(f)
		if err != nil {
			return Run{}, err
		}
		src := Source{File: filepath.Base(f), Date: r.Date, Commit: r.Commit, Machine: r.Machine}
		for _, c := range r.Contests {
			src.Contests = append(src.Contests, c.Name)
		}
		recs = append(recs, record{r, src})
	}
	slices.SortStableFunc(recs, func(a, b record) int { return a.run.Date.Compare(b.run.Date) })
	var out Run
	for _, rec := range recs {
		r := rec.run
		if r.Date.After(out.Date) {
			out.Date, out.Commit, out.Machine = r.Date, r.Commit, r.Machine
		}
		out.Sources = append(out.Sources, rec.src)
		out.supersede(r)
		out.Merge(r)
	}
	return out, nil
}

// cell is one contender at one size of a contest or distribution.
type cell struct {
	name, contender string
	size            int
}

// supersede drops r's samples and distributions of every cell that the
// newer record o measured.
func (r *Run) supersede(o Run) {
	measured := map[cell]bool{}
	for _, c := range o.Contests {
		for _, s := range c.Samples {
			measured[cell{c.Name, s.Contender, s.Size}] = true
		}
	}
	for i := range r.Contests {
		c := &r.Contests[i]
		c.Samples = slices.DeleteFunc(c.Samples, func(s Sample) bool { return measured[cell{c.Name, s.Contender, s.Size}] })
	}
	shown := map[cell]bool{}
	for _, d := range o.Distributions {
		shown[cell{d.Name, d.Contender, d.Size}] = true
	}
	r.Distributions = slices.DeleteFunc(r.Distributions, func(d Distribution) bool { return shown[cell{d.Name, d.Contender, d.Size}] })
}

// Write writes r as indented JSON to path, through a temporary file so
// that a crash never leaves half a record.
func (r Run) Write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Read reads a record Write wrote.
func Read(path string) (Run, error) {
	var r Run
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Summary is one contender at one size.
type Summary struct {
	Contender        string
	Size             int
	N                int
	Median, Min, Max float64
	// Ratio is Median over the baseline's median at the same size (0
	// when there is no baseline there).
	Ratio float64
}

// Summarize returns the contest's summaries, by size then contender,
// the baseline first.
func (c Contest) Summarize() []Summary {
	type key struct {
		contender string
		size      int
	}
	by := map[key][]float64{}
	for _, s := range c.Samples {
		k := key{s.Contender, s.Size}
		by[k] = append(by[k], s.Value)
	}
	var out []Summary
	for k, vs := range by {
		slices.Sort(vs)
		out = append(out, Summary{Contender: k.contender, Size: k.size, N: len(vs), Median: Median(vs), Min: vs[0], Max: vs[len(vs)-1]})
	}
	baseline := c.BaselineName()
	base := map[int]float64{}
	for _, s := range out {
		if s.Contender == baseline {
			base[s.Size] = s.Median
		}
	}
	for i := range out {
		if b := base[out[i].Size]; b != 0 {
			out[i].Ratio = out[i].Median / b
		}
	}
	slices.SortFunc(out, func(a, b Summary) int {
		return cmp.Or(cmp.Compare(a.Size, b.Size), baselineFirst(baseline, a.Contender, b.Contender))
	})
	return out
}

// baselineFirst orders contenders by name, the baseline first.
func baselineFirst(baseline, a, b string) int {
	if (a == baseline) != (b == baseline) {
		if a == baseline {
			return -1
		}
		return 1
	}
	return cmp.Compare(a, b)
}

// Contenders returns the contest's contenders, the baseline first.
func (c Contest) Contenders() []string {
	var out []string
	for _, s := range c.Summarize() {
		if !slices.Contains(out, s.Contender) {
			out = append(out, s.Contender)
		}
	}
	return out
}

// Median of sorted values (the mean of the middle two for an even count).
func Median(sorted []float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return sorted[n/2]
	default:
		return (sorted[n/2-1] + sorted[n/2]) / 2
	}
}

// Percentile of sorted values, nearest rank (p in 0..100).
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ThisMachine reads the machine's facts from /proc and uname.
func ThisMachine(command string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoArch: runtime.GOARCH, Command: command}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		m.Kernel = cString(u.Release[:])
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		m.MemGiB = float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.Load1, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return m
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
