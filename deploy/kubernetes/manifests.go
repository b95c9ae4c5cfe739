// Package kubernetes carries the manifests of deploy/kubernetes in the
// flowlb binary, so that `flowlb lab up --kubernetes --flowlb` deploys
// exactly these wherever the binary runs.
package kubernetes

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed kustomization.yaml base components overlays
var files embed.FS

// WriteTo copies the manifests into dir (kustomization.yaml, base/,
// components/, overlays/) and returns dir.
func WriteTo(dir string) (string, error) {
	return dir, fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, p)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
