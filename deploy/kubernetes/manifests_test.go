package kubernetes

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteTo: what the binary carries is the tree of this directory.
func TestWriteTo(t *testing.T) {
	dir, err := WriteTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"kustomization.yaml", "base/agent.yaml", "base/kustomization.yaml", "overlays/lab/kustomization.yaml", "overlays/postgres/kustomization.yaml",
		"components/ebpf/kustomization.yaml", "overlays/ebpf/kustomization.yaml", "overlays/lab-ebpf/kustomization.yaml"} {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from the repository's", p)
		}
	}
}
