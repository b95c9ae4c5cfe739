package lbaas

import (
	"testing"

	"github.com/flowlb/flowlb/internal/store"
	"github.com/flowlb/flowlb/internal/store/memstore"
)

func newStore(t *testing.T) store.Store {
	t.Helper()
	return memstore.New()
}
