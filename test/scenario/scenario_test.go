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
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
	"rsc.io/script"
	"rsc.io/script/scripttest"
)

// update rewrites, in each script, the files that `cmp stdout` compares
// with what the command printed.
var update = flag.Bool("update", false, "rewrite the files cmp stdout compares in testdata/*.txtar")

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
			if *update {
				e.Cmds["cmp"] = updatingCmp(t, file, ar)
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

// updatingCmp is cmp stdout <file> that writes stdout into the script's
// file of that name instead of comparing, and the script back.
func updatingCmp(t *testing.T, file string, ar *txtar.Archive) script.Cmd {
	return script.Command(script.CmdUsage{Summary: "update a file from stdout", Args: "stdout file"}, func(s *script.State, args ...string) (script.WaitFunc, error) {
		if len(args) != 2 || args[0] != "stdout" {
			t.Fatalf("update: cmp %v: only cmp stdout <file> is updated", args)
		}
		for i := range ar.Files {
			if ar.Files[i].Name == args[1] {
				ar.Files[i].Data = []byte(s.Stdout())
			}
		}
		return nil, os.WriteFile(file, txtar.Format(ar), 0o644)
	})
}
