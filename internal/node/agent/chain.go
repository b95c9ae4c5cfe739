package agent

import (
	"context"
	"errors"

	"github.com/flowlb/flowlb/internal/shared/flows"
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

// SumStats is a StatsReader adding up what several data planes counted
// for each service and backend (the eBPF socket programs count the connections they
// translated, which nftables never sees). A reader's error does not stop
// the others; what was read is returned with the errors joined.
func SumStats(rs ...StatsReader) StatsReader { return sumStats(rs) }

type sumStats []StatsReader

func (s sumStats) ReadStats() (map[flows.Key]flows.Stats, error) {
	out := map[flows.Key]flows.Stats{}
	var errs []error
	for _, r := range s {
		read, err := r.ReadStats()
		if err != nil {
			errs = append(errs, err)
		}
		for k, v := range read {
			sum := out[k]
			sum.Counters = sum.Counters.Add(v.Counters)
			sum.Active += v.Active
			sum.Members = flows.AddMembers(sum.Members, v.Members)
			out[k] = sum
		}
	}
	return out, errors.Join(errs...)
}
