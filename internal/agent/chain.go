package agent

import (
	"context"

	"github.com/flowlb/flowlb/internal/flows"
)

// Chain is a Programmer made of several data planes that each take every
// change: the eBPF socket programs, for connections that start on a
// local socket, beside nftables for the rest. They are programmed in
// order and the first error stops the change; the agent then programs
// the whole table again, which each data plane takes as it is.
func Chain(ps ...Programmer) Programmer { return chain(ps) }

type chain []Programmer

func (c chain) Sync(ctx context.Context, t flows.Table) error {
	for _, p := range c {
		if err := p.Sync(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func (c chain) Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error {
	for _, p := range c {
		if err := p.Apply(ctx, upserts, deletes); err != nil {
			return err
		}
	}
	return nil
}
