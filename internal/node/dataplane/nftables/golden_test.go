package nftables

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/node/dataplane/nftables/nftfake"
)

var update = flag.Bool("update", false, "rewrite the expected dumps in testdata from what the code produces")

// golden compares got with the file's content, or rewrites the file with
// -update (then read the diff before committing it).
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update and read the diff):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only one side has, marked - (want) and + (got).
func lineDiff(want, got string) string {
	count := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		count[l]--
	}
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if count[l] > 0 {
			b.WriteString("- " + l + "\n")
			count[l]--
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if count[l] < 0 {
			b.WriteString("+ " + l + "\n")
			count[l]++
		}
	}
	return b.String()
}

var _ Conn = (*nftfake.Conn)(nil)

// fakeDataplane is a data plane on an empty in-memory nftables.
func fakeDataplane(t *testing.T, options ...Option) (*Dataplane, *nftfake.Conn) {
	t.Helper()
	conn := nftfake.New()
	dp, err := NewWithConn(conn, "n1", options...)
	if err != nil {
		t.Fatal(err)
	}
	return dp, conn
}

// tableDump renders everything a connection's flowlb tables hold: every
// set's elements and every chain's rules.
func tableDump(t *testing.T, conn Conn) string {
	t.Helper()
	var b strings.Builder
	for _, f := range families {
		b.WriteString("table " + f.name + "\n")
		familyDump(t, conn, f, &b)
	}
	return b.String()
}

func familyDump(t *testing.T, conn Conn, f *family, b *strings.Builder) {
	t.Helper()
	tab := &nftables.Table{Name: tableName, Family: f.table}
	sets, err := conn.GetSets(tab)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		els, err := conn.GetSetElements(s)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("set " + s.Name + "\n")
		for _, e := range sortedElements(setChange{set: s.Name, elements: els}) {
			b.WriteString("  " + f.elementString(s.Name, e) + "\n")
		}
	}
	chains, err := conn.ListChainsOfTableFamily(f.table)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		rules, err := conn.GetRules(tab, c)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("chain " + c.Name + "\n")
		for _, r := range rules {
			b.WriteString("  " + ruleString(r.Exprs) + "\n")
		}
	}
}
