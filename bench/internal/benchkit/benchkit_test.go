package benchkit

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []int
		err  string
	}{
		{"1,3", []int{1, 3}, ""},
		{" 1000 , 5000", []int{1000, 5000}, ""},
		{"1,0", nil, `-replicas: "0" is not a server count`},
		{"x", nil, `-replicas: "x" is not a server count`},
		{"", nil, `-replicas: "" is not a server count`},
	} {
		got, err := Counts("replicas", "server count", tc.list)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Counts(%q) error = %v, want %s", tc.list, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Counts(%q) = %v, %v; want %v", tc.list, got, err, tc.want)
		}
	}
}

func TestCPUProfile(t *testing.T) {
	stop, err := CPUProfile("")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := CPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.pprof")); err == nil {
		t.Error("a profile into a missing directory did not fail")
	}
	if got := MS(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("MS(1.5ms) = %v", got)
	}
}
