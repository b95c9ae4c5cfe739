package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// TestCountGrouped: records are counted by kind and by their documents'
// fields, a field absent or null counting as "", a number as its text,
// kinds not asked for not at all, the same on every store.
func TestCountGrouped(t *testing.T) {
	ctx := context.Background()
	engines := append(storetest.Engines(t), storetest.Engine{Name: "memstore", Store: memstore.New()})
	for _, e := range engines {
		t.Run(e.Name, func(t *testing.T) {
			docs := []struct {
				kind store.Kind
				id   string
				data string
			}{
				{store.KindLoadBalancer, "a", `{"provisioning_status": "ACTIVE", "operating_status": "ONLINE"}`},
				{store.KindLoadBalancer, "b", `{"provisioning_status": "ACTIVE", "operating_status": "ONLINE", "name": "x"}`},
				{store.KindLoadBalancer, "c", `{"provisioning_status": "PENDING_CREATE", "operating_status": "OFFLINE"}`},
				{store.KindMember, "m1", `{"provisioning_status": "ACTIVE", "operating_status": 7}`},
				{store.KindMember, "m2", `{"provisioning_status": "ACTIVE"}`},
				{store.KindMember, "m3", `{"provisioning_status": "ACTIVE", "operating_status": null}`},
				{store.KindPool, "p", `{"provisioning_status": "ACTIVE", "operating_status": "ONLINE"}`},
				{store.KindNetwork, "n", `{"provisioning_status": "ACTIVE", "operating_status": "ONLINE"}`},
			}
			_, err := e.Store.Update(ctx, func(tx store.Tx) error {
				for _, d := range docs {
					if err := tx.Insert(store.Record{Kind: d.kind, ID: d.id, Data: []byte(d.data)}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var groups []store.GroupCount
			err = e.Store.View(ctx, func(tx store.ReadTx) (err error) {
				groups, err = tx.CountGrouped([]store.Kind{store.KindLoadBalancer, store.KindMember, store.KindPool}, []string{"provisioning_status", "operating_status"})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range groups {
				got = append(got, string(g.Kind)+" "+strings.Join(g.Values, " ")+" "+string(rune('0'+g.N)))
			}
			slices.Sort(got)
			want := []string{
				"loadbalancer ACTIVE ONLINE 2",
				"loadbalancer PENDING_CREATE OFFLINE 1",
				"member ACTIVE  2",
				"member ACTIVE 7 1",
				"pool ACTIVE ONLINE 1",
			}
			if !slices.Equal(got, want) {
				t.Errorf("groups %q, want %q", got, want)
			}
		})
	}
}
