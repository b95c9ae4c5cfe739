package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// TestNodeBindings: the rules that keep a node name to one identity, on
// every engine.
func TestNodeBindings(t *testing.T) {
	ctx := context.Background()
	hour := time.Now().Add(time.Hour)
	id := func(node, key, ca string, notAfter time.Time) store.NodeIdentity {
		return store.NodeIdentity{Node: node, Key: key, CA: ca, NotAfter: notAfter, Issued: time.Now()}
	}
	for _, e := range everyStore(t) {
		t.Run(e.Name, func(t *testing.T) {
			s := e.Store
			want := func(what string, got store.NodeIdentity, err error, wantErr error, wantKey string) {
				t.Helper()
				if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
					t.Fatalf("%s: %v, want %v", what, err, wantErr)
				}
				if got.Key != wantKey {
					t.Fatalf("%s: binding of key %q, want %q", what, got.Key, wantKey)
				}
			}
			got, err := s.EnrollNode(ctx, id("n1", "A", "ca1", hour))
			want("first enrollment", got, err, nil, "A")
			got, err = s.EnrollNode(ctx, id("n1", "B", "ca1", hour))
			want("the token enrolling a bound name", got, err, store.ErrConflict, "A")
			if got.NotAfter.Unix() != hour.Unix() {
				t.Errorf("the refusal names an identity valid until %v, want %v", got.NotAfter, hour)
			}
			got, err = s.EnrollNode(ctx, id("n1", "A", "ca1", hour))
			want("the same key enrolling again (its answer lost)", got, err, nil, "A")

			got, err = s.RenewNode(ctx, id("n1", "C", "ca1", hour), "A")
			want("renewal by the bound identity", got, err, nil, "C")
			got, err = s.RenewNode(ctx, id("n1", "D", "ca1", hour), "A")
			want("renewal by the one before (the answer to its renewal lost)", got, err, nil, "D")
			got, err = s.RenewNode(ctx, id("n1", "X", "ca1", hour), "C")
			want("renewal by an identity two back", got, err, store.ErrConflict, "D")
			got, err = s.RenewNode(ctx, id("n1", "X", "ca1", hour), "Z")
			want("renewal by another key", got, err, store.ErrConflict, "D")

			got, err = s.EnrollNode(ctx, id("n1", "E", "ca2", hour))
			want("the token enrolling a name bound under a CA rotated since", got, err, nil, "E")

			_, err = s.EnrollNode(ctx, id("n2", "A", "ca1", time.Now().Add(-time.Second)))
			want("an identity already expired", store.NodeIdentity{}, err, nil, "")
			got, err = s.EnrollNode(ctx, id("n2", "B", "ca1", hour))
			want("the token enrolling a name whose identity expired", got, err, nil, "B")

			got, err = s.RenewNode(ctx, id("n3", "B", "ca1", hour), "A")
			want("renewal of a name never bound (an identity from before bindings)", got, err, nil, "B")

			was, bound, err := s.ForgetNode(ctx, "n1")
			if err != nil || !bound || was.Key != "E" {
				t.Fatalf("forget n1: %+v %v %v, want its binding to E", was, bound, err)
			}
			got, err = s.RenewNode(ctx, id("n1", "F", "ca2", hour), "E")
			want("renewal by the identity of a forgotten name", got, err, store.ErrConflict, "")
			got, err = s.EnrollNode(ctx, id("n1", "G", "ca2", hour))
			want("the token enrolling a forgotten name", got, err, nil, "G")

			if _, bound, err := s.ForgetNode(ctx, "n4"); err != nil || bound {
				t.Fatalf("forget n4, never bound: %v %v", bound, err)
			}
			got, err = s.RenewNode(ctx, id("n4", "B", "ca1", hour), "A")
			want("renewal of a name forgotten before it was ever bound", got, err, store.ErrConflict, "")

			list, err := s.NodeIdentities(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, n := range list {
				names = append(names, fmt.Sprintf("%s=%s/%v", n.Node, n.Key, n.Released()))
			}
			if got, want := fmt.Sprint(names), "[n1=G/false n2=B/false n3=B/false n4=/true]"; got != want {
				t.Errorf("bindings %s, want %s", got, want)
			}

			// Replicas enrolling one name at once: one wins.
			var wg sync.WaitGroup
			wins := make(chan string, 8)
			for i := range 8 {
				wg.Go(func() {
					key := fmt.Sprint("K", i)
					if _, err := s.EnrollNode(ctx, id("n5", key, "ca1", hour)); err == nil {
						wins <- key
					} else if !errors.Is(err, store.ErrConflict) {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			close(wins)
			var won []string
			for k := range wins {
				won = append(won, k)
			}
			if len(won) != 1 {
				t.Errorf("%d enrollments of one name won at once: %v", len(won), won)
			}
		})
	}
}
