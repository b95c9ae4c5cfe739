package fanout

import (
	"testing"
	"time"
)

func TestTakenTimesFirstAfter(t *testing.T) {
	base := time.Unix(1000, 0)
	var k takenTimes
	for _, rev := range []int64{3, 5, 5, 4, 9} { // repeats and a step back are ignored
		k.add(rev, base.Add(time.Duration(rev)*time.Second))
	}
	for _, c := range []struct {
		after, upTo int64
		want        int64 // the revision whose time is found; 0: none
	}{
		{0, 9, 3},
		{3, 9, 5},
		{3, 4, 0}, // 4 was never taken alone
		{5, 9, 9},
		{5, 8, 0},
		{9, 12, 0},
		{2, 3, 3},
	} {
		got, ok := k.firstAfter(c.after, c.upTo)
		switch {
		case c.want == 0 && ok:
			t.Errorf("firstAfter(%d, %d) = %s, want none", c.after, c.upTo, got)
		case c.want != 0 && (!ok || !got.Equal(base.Add(time.Duration(c.want)*time.Second))):
			t.Errorf("firstAfter(%d, %d) = %s, %v; want revision %d's time", c.after, c.upTo, got, ok, c.want)
		}
	}
	var b takenTimes
	for rev := int64(1); rev <= takenBound+10; rev++ {
		b.add(rev, base)
	}
	if len(b.revs) != takenBound || b.revs[0] != 11 {
		t.Fatalf("bounded: %d revisions from %d, want %d from 11", len(b.revs), b.revs[0], takenBound)
	}
	if _, ok := b.firstAfter(0, 5); ok {
		t.Error("a revision older than the bound was timed")
	}
}
