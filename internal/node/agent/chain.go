package agent

import (
	"context"
	"errors"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Chain is a Programmer made of several data planes that each take every
// change: the eBPF socket programs, for connections that start on a
// local socket, beside nftables for the rest. Used as a Programmer, they
// are programmed in order and the first error stops the change; the
// agent instead keeps a record of what each data plane took and writes
// each on its own (plane), so that one's refusal costs the others
// nothing.
func Chain(ps ...Programmer) Programmer { return chain(ps) }

// plane is one data plane as the reconciler drives it: what it holds,
// as this node serves it, and whether its next write must be whole (a
// write it refused leaves what it holds uncertain).
type plane struct {
	dp    Programmer
	held  map[flows.Key]flows.Service
	force bool
}

// planesOf are dp's data planes: a Chain's, in order, or dp alone.
func planesOf(dp Programmer) []*plane {
	ps := []Programmer{dp}
	if c, ok := dp.(chain); ok {
		ps = c
	}
	out := make([]*plane, 0, len(ps))
	for _, p := range ps {
		out = append(out, &plane{dp: p, held: map[flows.Key]flows.Service{}})
	}
	return out
}

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
