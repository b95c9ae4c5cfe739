package testutil

import (
	"bufio"
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
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SUnreclaim:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no SUnreclaim in /proc/meminfo")
	return 0
}
