package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
)

// runLab runs `flowlb lab --name name args...` in this process and returns
// its output.
func runLab(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	rootCmd.SetArgs(append([]string{"lab", "--name", name}, args...))
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&out)
	err := rootCmd.Execute()
	return out.String(), err
}

// TestLabUpServersPostgres: `lab up --servers 3 --postgres` builds the
// server hosts and the database, `lab status` shows them and the DSN,
// `lab postgres stop|start` restart the database, `lab down` removes it
// all; more than 9 servers are refused before anything is built.
func TestLabUpServersPostgres(t *testing.T) {
	labtest.SkipUnlessRoot(t)
	labtest.RequirePostgres(t)
	name := labtest.Name()
	t.Cleanup(func() { _ = lab.Down(name, "") })
	must := func(args ...string) string {
		t.Helper()
		out, err := runLab(t, name, args...)
		if err != nil {
			t.Fatalf("lab %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out, err := runLab(t, name, "up", "--nodes", "1", "--pods-per-node", "0", "--no-echo", "--servers", "10"); err == nil || !strings.Contains(err.Error(), "servers 10") {
		t.Fatalf("up --servers 10: %v\n%s", err, out)
	}
	if nss, _ := filepath.Glob(filepath.Join(lab.NetnsDir, lab.Prefix(name)+"*")); len(nss) > 0 {
		t.Fatalf("a refused up built %v", nss)
	}

	out := must("up", "--nodes", "1", "--pods-per-node", "0", "--no-echo", "--servers", "3", "--postgres")
	for _, want := range []string{"server hosts: s1 198.18.0.241, s2 198.18.0.242, s3 198.18.0.243", lab.PostgresDSN} {
		if !strings.Contains(out, want) {
			t.Errorf("lab up output lacks %q:\n%s", want, out)
		}
	}
	out = must("status")
	if !strings.Contains(out, "(running): dsn "+lab.PostgresDSN) {
		t.Errorf("lab status lacks the running database's DSN:\n%s", out)
	}
	for _, want := range []string{"s1 flb-" + name + "-s1 198.18.0.241", "s3 flb-" + name + "-s3 198.18.0.243", "db flb-" + name + "-db 198.18.0.239:5432 postgres["} {
		if !hasLinePrefix(out, want) {
			t.Errorf("lab status has no line %q:\n%s", want, out)
		}
	}
	must("postgres", "stop", "--mode", "immediate")
	if out := must("status"); !strings.Contains(out, "(STOPPED)") {
		t.Errorf("status after postgres stop:\n%s", out)
	}
	must("postgres", "start")
	var st lab.Status
	if err := json.Unmarshal([]byte(must("status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Postgres == nil || !st.Postgres.Running || st.Postgres.DSN != lab.PostgresDSN {
		t.Errorf("status -o json postgres %+v, want running at %s", st.Postgres, lab.PostgresDSN)
	}
	must("down")
	if _, err := os.Stat(filepath.Join(lab.DefaultStateRoot, name)); !os.IsNotExist(err) {
		t.Errorf("state directory (with the database's data) after down: %v", err)
	}
	if nss, _ := filepath.Glob(filepath.Join(lab.NetnsDir, lab.Prefix(name)+"*")); len(nss) > 0 {
		t.Errorf("namespaces after down: %v", nss)
	}
}

// hasLinePrefix reports whether a line of out, its fields joined by single
// spaces, starts with prefix.
func hasLinePrefix(out, prefix string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.Join(strings.Fields(line), " "), prefix) {
			return true
		}
	}
	return false
}

// TestLabDemoDataplane: `lab demo --dataplane` takes the two data planes
// only, refusing another before building anything; `lab up --flowlb`
// deploys the overlay of the lab's data plane.
func TestLabDemoDataplane(t *testing.T) {
	cmd := labDemoCmd()
	cmd.SetArgs([]string{"--dataplane", "xdp"})
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetErr(new(bytes.Buffer))
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `"xdp" is not one of nftables, ebpf`) {
		t.Errorf("lab demo --dataplane xdp: %v", err)
	}
	for dp, want := range map[string]string{lab.DataplaneNftables: "lab", lab.DataplaneEBPF: "lab-ebpf"} {
		if got := labOverlayName(dp); got != want {
			t.Errorf("overlay for %s: %s, want %s", dp, got, want)
		}
		if _, err := os.Stat(filepath.Join("..", "..", "deploy", "kubernetes", "overlays", want, "kustomization.yaml")); err != nil {
			t.Error(err)
		}
	}
}
