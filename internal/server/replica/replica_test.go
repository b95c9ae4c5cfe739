package replica

import (
	"context"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

func TestLeader(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want string
	}{
		{nil, ""},
		{[]string{"b"}, "b"},
		{[]string{"host-b", "host-a", "host-c"}, "host-a"},
	} {
		var rs []store.Replica
		for _, id := range tc.ids {
			rs = append(rs, store.Replica{ID: id})
		}
		if got := Leader(rs); got != tc.want {
			t.Errorf("Leader(%v) = %q, want %q", tc.ids, got, tc.want)
		}
	}
}

// TestLeads: of two live replicas of one store, exactly the one with the
// least id leads; when it retires, the other does.
func TestLeads(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	a := New(st, nil, func() int64 { return 0 }, Options{ID: "a", LeaseTTL: time.Minute}, nil)
	b := New(st, nil, func() int64 { return 0 }, Options{ID: "b", LeaseTTL: time.Minute}, nil)
	for _, r := range []*Replica{a, b} {
		if err := r.Register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if la, _ := a.Leads(ctx); !la {
		t.Error("a does not lead")
	}
	if lb, _ := b.Leads(ctx); lb {
		t.Error("b leads beside a")
	}
	if err := a.Retire(ctx); err != nil {
		t.Fatal(err)
	}
	if lb, err := b.Leads(ctx); !lb || err != nil {
		t.Errorf("b does not lead once a is gone: %v", err)
	}
}
