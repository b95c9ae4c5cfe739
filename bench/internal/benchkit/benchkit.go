// Package benchkit holds what the bench programs share: parsing their
// count lists, CPU profiles and the units of their tables.
package benchkit

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// Counts reads a comma-separated list of positive counts, such as "1,3",
// given to flag name as a count of what.
func Counts(name, what, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("-%s: %q is not a %s", name, f, what)
		}
		out = append(out, k)
	}
	return out, nil
}

// CPUProfile starts a CPU profile into path ("" profiles nothing) and
// returns what stops it.
func CPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// MS is d in milliseconds, for tables.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
