package ids

import (
	"testing"

	"github.com/google/uuid"
)

func TestNewIsOrderedVersion7(t *testing.T) {
	prev := ""
	for range 10000 {
		s := New()
		u, err := uuid.Parse(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("%q: version %d, variant %v", s, u.Version(), u.Variant())
		}
		if u.String() != s {
			t.Fatalf("%q is not canonical (%q)", s, u.String())
		}
		if s <= prev {
			t.Fatalf("%q after %q: not ordered", s, prev)
		}
		prev = s
	}
}
