package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(`<testsuites><testsuite>`+body+`</testsuite></testsuites>`), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.xml", `<testcase name="[SynchronizedBeforeSuite]" status="passed"></testcase>
<testcase name="[It] [sig-network] Services should x [Conformance]" status="passed"></testcase>
<testcase name="[It] [sig-network] Services should y [sig-network]" status="failed"><failure message="m">t</failure></testcase>
<testcase name="[It] [sig-apps] other" status="skipped"><skipped/></testcase>`)
	b := write("b.xml", `<testcase name="[It] [sig-network] Services should x [Conformance]" status="passed"></testcase>
<testcase name="[It] [sig-network] Services should y [sig-network]" status="passed"></testcase>`)
	var results []map[string]string
	for _, p := range []string{a, b} {
		r, err := outcomes(p)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	var out strings.Builder
	table(&out, []string{"flowlb", "kube-proxy"}, results)
	want := `| spec | flowlb | kube-proxy |
|---|---|---|
| [sig-network] Services should x | passed | passed |
| [sig-network] Services should y | **failed** | passed |
| **2 specs** | 1 passed, 1 failed | 2 passed, 0 failed |
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}
