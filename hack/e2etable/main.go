// Command e2etable turns the junit reports of Kubernetes' e2e specs run
// on the lab with real nodes (test/upstream: flowlb, and kube-proxy in
// each mode) into the side-by-side table of docs/kubernetes.md: one row
// per spec, one column per contender, and the count of each outcome.
//
//	go run ./hack/e2etable flowlb=_artifacts/upstream-e2e/junit.xml \
//	    "kube-proxy nftables=_artifacts/upstream-e2e-kube-proxy-nftables/junit.xml" ...
package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type report struct {
	Suites []struct {
		Cases []struct {
			Name    string    `xml:"name,attr"`
			Status  string    `xml:"status,attr"`
			Failure *struct{} `xml:"failure"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// labels are ginkgo's "[It] " and the trailing label list of a name.
var labels = regexp.MustCompile(`^\[It\] | \[[^\]]*\]$`)

// outcomes reads a report: spec name → passed, failed or skipped; the
// suite's set-up and tear-down nodes are left out.
func outcomes(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r report
	if err := xml.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			if !strings.HasPrefix(c.Name, "[It]") {
				continue
			}
			name := strings.TrimSpace(labels.ReplaceAllString(c.Name, ""))
			switch {
			case c.Failure != nil || c.Status == "failed" || c.Status == "panicked" || c.Status == "timedout":
				out[name] = "failed"
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				out[name] = "skipped"
			default:
				out[name] = "passed"
			}
		}
	}
	return out, nil
}

// table writes the markdown table of the contenders' outcomes, every spec
// that ran for at least one of them.
func table(w io.Writer, names []string, results []map[string]string) {
	specs := map[string]bool{}
	for _, r := range results {
		for s, o := range r {
			if o != "skipped" {
				specs[s] = true
			}
		}
	}
	var rows []string
	for s := range specs {
		rows = append(rows, s)
	}
	sort.Strings(rows)
	fmt.Fprintf(w, "| spec | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	counts := make([]map[string]int, len(results))
	for i := range counts {
		counts[i] = map[string]int{}
	}
	for _, s := range rows {
		var cells []string
		for i, r := range results {
			o := r[s]
			if o == "" {
				o = "not run"
			}
			counts[i][o]++
			if o == "failed" {
				o = "**failed**"
			}
			cells = append(cells, o)
		}
		fmt.Fprintf(w, "| %s | %s |\n", strings.ReplaceAll(s, "|", "\\|"), strings.Join(cells, " | "))
	}
	var totals []string
	for i := range results {
		totals = append(totals, fmt.Sprintf("%d passed, %d failed", counts[i]["passed"], counts[i]["failed"]))
	}
	fmt.Fprintf(w, "| **%d specs** | %s |\n", len(rows), strings.Join(totals, " | "))
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: e2etable NAME=junit.xml ...")
		os.Exit(2)
	}
	var names []string
	var results []map[string]string
	for _, a := range os.Args[1:] {
		name, path, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "e2etable: %q is not NAME=junit.xml\n", a)
			os.Exit(2)
		}
		r, err := outcomes(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2etable:", err)
			os.Exit(1)
		}
		names, results = append(names, name), append(results, r)
	}
	table(os.Stdout, names, results)
}
