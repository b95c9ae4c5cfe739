// Package version holds build identification, set at link time.
package version

// Version is overridden with -ldflags "-X github.com/flowlb/flowlb/internal/shared/version.Version=...".
var Version = "0.1.0-dev"
