package nftables

import "testing"

func TestMissedUnheard(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		before, after, rejoined uint32
		committed, wantMissed   bool
	}{
		{"own commit only", 7, 8, 8, true, false},
		{"refused, nothing else", 7, 7, 7, false, false},
		{"another committed while unheard", 7, 9, 9, true, true},
		{"another committed before joining", 7, 8, 9, true, true},
		{"refused, yet moved", 7, 8, 8, false, true},
		{"wraps", 0xffffffff, 0, 0, true, false},
	} {
		if got := missedUnheard(tc.before, tc.after, tc.rejoined, tc.committed); got != tc.wantMissed {
			t.Errorf("%s: missed %v, want %v", tc.name, got, tc.wantMissed)
		}
	}
}
