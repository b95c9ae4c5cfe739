package lbaas

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
)

// TestCountByStatusMatchesTrees: the store's count of objects by kind
// and status is what counting the decoded trees gives, with objects in
// several statuses (completed, pending, an update pending), on every
// store.
func TestCountByStatusMatchesTrees(t *testing.T) {
	eachEngine(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, false, st)
		var ids []string
		for range 3 {
			tr, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, tr.LB.ID)
		}
		e.prov.finish(nil)
		if _, err := e.svc.CreateLoadBalancer(e.ctx, fullLB(t)); err != nil {
			t.Fatal(err) // left PENDING_CREATE
		}
		if _, err := e.svc.UpdateLoadBalancer(e.ctx, ids[0], req[LoadBalancerUpdate](t, `{"name": "renamed"}`)); err != nil {
			t.Fatal(err) // PENDING_UPDATE
		}
		got, err := e.svc.CountByStatus(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		trees, err := e.svc.Trees(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := countTrees(trees)
		if !maps.Equal(got, want) {
			t.Errorf("counted by the store:\n%v\nfrom the trees:\n%v", got, want)
		}
		// Five kinds, and load balancers in three provisioning statuses.
		lbs := 0
		for k := range want {
			if k[0] == "loadbalancer" {
				lbs++
			}
		}
		if len(want) < 9 || lbs < 3 {
			t.Errorf("%d groups, %d of load balancers: the test meant several statuses (%v)", len(want), lbs, want)
		}
	})
}

// countTrees counts the trees' objects by kind and status, as
// CountByStatus did by decoding every tree.
func countTrees(trees []*Tree) map[[3]string]int {
	out := map[[3]string]int{}
	for _, tr := range trees {
		for _, o := range tr.objects() {
			b := o.base()
			out[[3]string{string(o.kind()), b.ProvisioningStatus, b.OperatingStatus}]++
		}
	}
	return out
}

// BenchmarkCountByStatus: what a scrape of flowlb_objects costs on SQLite
// with N fully populated load balancers (6 objects each): counted by the
// store ("store", what the metric does) or by decoding every tree
// ("trees", what it did before).
//
//	go test -run '^$' -bench CountByStatus -benchtime 20x ./internal/server/lbaas/
func BenchmarkCountByStatus(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(b.TempDir(), "flowlb.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	e := newEnv(b, true, st)
	svc, cctx := e.svc, e.ctx
	const n = 2000
	for range n {
		if _, err := svc.CreateLoadBalancer(cctx, fullLB(b)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("store", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := svc.CountByStatus(cctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/lb")
	})
	b.Run("trees", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			trees, err := svc.Trees(cctx)
			if err != nil {
				b.Fatal(err)
			}
			countTrees(trees)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/lb")
	})
}
