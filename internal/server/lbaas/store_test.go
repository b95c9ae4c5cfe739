package lbaas

import (
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// eachEngine runs fn on the in-memory store and on every SQL engine.
func eachEngine(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, memstore.New()) })
	for _, e := range storetest.Engines(t) {
		t.Run(e.Name, func(t *testing.T) { fn(t, e.Store) })
	}
}
