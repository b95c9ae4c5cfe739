// Package helm locates the pinned Helm binary that installs the chart of
// deploy/helm/flowlb in the tests (hack/helm-bins.sh builds and caches
// it). Its tests check that the chart renders what deploy/kubernetes
// renders, overlay by overlay.
package helm

import (
	"os"
	"path/filepath"
)

// Version is the Helm release the tests run, hack/helm-bins.sh's default.
const Version = "v3.19.5"

// DefaultCache is where hack/helm-bins.sh caches Helm, one directory per
// version.
const DefaultCache = "/var/cache/flowlb/helm"

// Binary is the path of the pinned helm: $FLOWLB_HELM if set, else
// ${FLOWLB_HELM_CACHE:-/var/cache/flowlb/helm}/Version/helm.
func Binary() string {
	if p := os.Getenv("FLOWLB_HELM"); p != "" {
		return p
	}
	root := os.Getenv("FLOWLB_HELM_CACHE")
	if root == "" {
		root = DefaultCache
	}
	return filepath.Join(root, Version, "helm")
}
