package testutil

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	n := 0
	if err := Wait(time.Second, func() (bool, string) { n++; return n == 3, "n" }); err != nil || n != 3 {
		t.Fatalf("Wait returned %v after %d checks, want nil after 3", err, n)
	}
	start := time.Now()
	err := Wait(30*time.Millisecond, func() (bool, string) { return false, "still 7" })
	var te *TimeoutError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "still 7") {
		t.Fatalf("Wait on a condition that never holds = %v, want a TimeoutError naming the last detail", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Wait gave up after %s, before its 30ms", d)
	}
}
