// Command suite gathers the records the suite's benchmarks wrote (one
// JSON file each, under -raw) into one record of the run, and generates
// from it the plots and the page of docs/.
//
//	go run ./bench/suite -raw bench/results/raw -out bench/results/suite.json \
//	    -page docs/bench-suite.md -plots docs/images/bench
//
// With -in instead of -raw, it regenerates the page and plots from a
// record already gathered.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/flowlb/flowlb/bench/suite/report"
	"github.com/flowlb/flowlb/bench/suite/results"
)

func main() {
	raw := flag.String("raw", "", "directory of the benchmarks' records (*.json) to gather")
	in := flag.String("in", "", "a gathered record to regenerate the page and plots from (instead of -raw)")
	out := flag.String("out", "bench/results/suite.json", "where the gathered record is written (with -raw)")
	page := flag.String("page", "docs/bench-suite.md", "the page generated from the record")
	plots := flag.String("plots", "docs/images/bench", "directory of the plots, one PNG per contest")
	flag.Parse()
	if err := run(*raw, *in, *out, *page, *plots); err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		os.Exit(1)
	}
}

func run(raw, in, out, page, plots string) error {
	var rec results.Run
	switch {
	case raw != "" && in != "":
		return fmt.Errorf("give -raw or -in, not both")
	case raw != "":
		files, err := filepath.Glob(filepath.Join(raw, "*.json"))
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("no records in %s", raw)
		}
		slices.Sort(files)
		if rec, err = results.Gather(files); err != nil {
			return err
		}
		if err := rec.Write(out); err != nil {
			return err
		}
		fmt.Printf("record: %s (%d contests)\n", out, len(rec.Contests))
	case in != "":
		r, err := results.Read(in)
		if err != nil {
			return err
		}
		rec = r
	default:
		return fmt.Errorf("give -raw or -in")
	}
	images := map[string]string{}
	if plots != "" {
		if err := os.MkdirAll(plots, 0o755); err != nil {
			return err
		}
		// save draws one plot into plots and files it under key for the
		// page, relative to it.
		save := func(key, file string, draw func(path string) error) error {
			path := filepath.Join(plots, file)
			if err := draw(path); err != nil {
				return fmt.Errorf("plot %s: %w", key, err)
			}
			rel, err := filepath.Rel(filepath.Dir(page), path)
			if err != nil {
				rel = path
			}
			images[key] = filepath.ToSlash(rel)
			fmt.Printf("plot: %s\n", path)
			return nil
		}
		for _, c := range rec.Contests {
			if err := save(c.Name, c.Name+".png", func(path string) error { return report.Plot(c, path) }); err != nil {
				return err
			}
		}
		for _, g := range rec.CDFs() {
			if err := save(report.CDFKey(g), fmt.Sprintf("%s-%d-cdf.png", g.Name, g.Size), func(path string) error { return report.PlotCDF(g, path) }); err != nil {
				return err
			}
		}
	}
	var b bytes.Buffer
	if err := report.Markdown(&b, rec, images); err != nil {
		return err
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("page: %s\n", page)
	return nil
}
