// Package scenario holds readable end-to-end scenarios of the whole path
// of a change — API or Kubernetes objects in, the server's flow table, the
// transactions each node's data plane sends and what its kernel then
// holds out — with every part real but the kernel, an in-memory nftables
// (nftfake) that can be told to refuse transactions. They need no root.
//
// Each testdata/*.txtar is a script (rsc.io/script) with the commands of
// commands_test.go; `go test ./test/scenario -run TestScenarios -v` shows
// them as they run.
package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
	"rsc.io/script"
	"rsc.io/script/scripttest"
)

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios (%v)", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			w := newWorld(t)
			e := script.NewEngine()
			e.Cmds = scripttest.DefaultCmds()
			for name, c := range w.commands() {
				e.Cmds[name] = c
			}
			e.Conds = scripttest.DefaultConds()
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			s, err := script.NewState(w.ctx, t.TempDir(), os.Environ())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.ExtractFiles(ar); err != nil {
				t.Fatal(err)
			}
			// The VIP subnets a request names.
			for k, v := range map[string]string{"SUBNET": w.clusterSubnet, "EXTERNAL_SUBNET": w.externalSubnet} {
				if err := s.Setenv(k, v); err != nil {
					t.Fatal(err)
				}
			}
			scripttest.Run(t, e, s, file, strings.NewReader(string(ar.Comment)))
		})
	}
}
