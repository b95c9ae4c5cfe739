// Package dataplane turns the node-neutral flow table into kernel state.
// Implementations: nftables (the default). The agent is the only writer.
package dataplane

import (
	"context"

	"github.com/flowlb/flowlb/internal/flows"
)

// Dataplane programs a node's kernel.
type Dataplane interface {
	// Sync makes the kernel match the desired table, changing only what
	// differs from what is programmed.
	Sync(ctx context.Context, t flows.Table) error
	Close() error
}
