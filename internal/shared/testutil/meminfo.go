package testutil

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// UnreclaimableSlab is the kernel's SUnreclaim (bytes), where nftables
// set elements and eBPF map elements live; t fails without it. It is
// machine-wide: other activity adds noise.
func UnreclaimableSlab(t testing.TB) int64 {
	t.Helper()
	v, err := ReadUnreclaimableSlab()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ReadUnreclaimableSlab is UnreclaimableSlab for a goroutine that cannot
// fail a test: the error says why there is no figure.
func ReadUnreclaimableSlab() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SUnreclaim:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no SUnreclaim in /proc/meminfo")
}
