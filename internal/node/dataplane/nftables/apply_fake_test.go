package nftables

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/node/dataplane/nftables/nftfake"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// bookkeeping renders what the data plane believes the kernel holds.
func bookkeeping(dp *Dataplane) string {
	s := fmt.Sprint(dp.Dump())
	for _, p := range dp.planes {
		s += fmt.Sprint(" ", p.fam.name, p.refs, p.chainRefs, p.chains)
	}
	return s
}

// recorded counts what the data plane's planes record: services,
// backends and class chains.
func recorded(dp *Dataplane) int {
	n := 0
	for _, p := range dp.planes {
		n += len(p.programmed) + len(p.refs) + len(p.chainRefs) + len(p.chains)
	}
	return n
}

func tableOf(services ...flows.Service) flows.Table {
	t := flows.Table{Services: map[flows.Key]flows.Service{}}
	for _, s := range services {
		t.Services[s.Key] = s
	}
	return t
}

// steps are the tables a data plane is synced to in turn: services come
// and go, share backends, class chains are created, shared and removed.
func steps() []flows.Table {
	other := own(service("198.19.0.11", flows.TCP, 443, flows.SourceIP, b1, b3))
	dns := service("198.19.0.53", flows.UDP, 53, flows.SourceIPPort, b1, b2, b3)
	sticky := persistent(time.Minute)
	return []flows.Table{
		tableOf(web(flows.SourceIP, b1, b2), dns),
		tableOf(edit(own(web(flows.SourceIP, b1, b2)), sticky), edit(other, sticky), dns, edit(own(web6(flows.SourceIP, b6a, b6b)), sticky)),
		tableOf(edit(own(web(flows.SourceIP, b1, b2, b3)), limited(10)), edit(other, sticky), service("198.19.0.53", flows.UDP, 53, flows.SourceIPPort, b3),
			edit(web6(flows.RoundRobin, b6b), limited(10))),
		tableOf(edit(web(flows.RoundRobin, b2), func(s *flows.Service) { s.LocalOnly = true }), edit(other, limited(10)), web6(flows.RoundRobin)),
		tableOf(edit(web(flows.RoundRobin), limited(20)), edit2(other, sticky, limited(10))),
		tableOf(),
	}
}

func edit2(s flows.Service, fns ...func(*flows.Service)) flows.Service {
	for _, fn := range fns {
		s = edit(s, fn)
	}
	return s
}

// TestApplyFailureChangesNothing: when the kernel refuses a change, the
// kernel and the data plane's bookkeeping are as before, whatever the
// change created or removed; the same change then applies.
func TestApplyFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	all := steps()
	for i := 1; i < len(all); i++ {
		dp, conn := fakeDataplane(t)
		if err := dp.Sync(ctx, all[i-1]); err != nil {
			t.Fatal(err)
		}
		kernel, books := tableDump(t, conn), bookkeeping(dp)
		conn.FailNextFlushes(1)
		if err := dp.Sync(ctx, all[i]); !errors.Is(err, nftfake.ErrInjected) {
			t.Fatalf("step %d: Sync under a failing Flush: %v", i, err)
		}
		if got := tableDump(t, conn); got != kernel {
			t.Errorf("step %d: the kernel changed:\n%s", i, lineDiff(kernel, got))
		}
		if got := bookkeeping(dp); got != books {
			t.Errorf("step %d: the bookkeeping changed:\n%s\nwas\n%s", i, got, books)
		}
		if err := dp.Sync(ctx, all[i]); err != nil {
			t.Fatalf("step %d: retry: %v", i, err)
		}
		clean, cleanConn := fakeDataplane(t)
		if err := clean.Sync(ctx, all[i]); err != nil {
			t.Fatal(err)
		}
		if got, want := tableDump(t, conn), tableDump(t, cleanConn); got != want {
			t.Errorf("step %d: after the retry the kernel differs from a clean run:\n%s", i, lineDiff(want, got))
		}
	}
}

// TestConvergesUnderFailures: with a third of the Flushes failing, a data
// plane that retries until each Sync succeeds (New included) holds the
// same elements, chains and bookkeeping as one that never failed, step by
// step.
func TestConvergesUnderFailures(t *testing.T) {
	ctx := context.Background()
	clean, cleanConn := fakeDataplane(t)
	var kernels, books []string
	for _, tab := range steps() {
		if err := clean.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		kernels, books = append(kernels, tableDump(t, cleanConn)), append(books, bookkeeping(clean))
	}
	for seed := range uint64(5) {
		conn := nftfake.New()
		conn.FailFraction(0.3, seed)
		var dp *Dataplane
		retry(t, func() (err error) { dp, err = NewWithConn(conn, "n1"); return err })
		for i, tab := range steps() {
			retry(t, func() error { return dp.Sync(ctx, tab) })
			if got := tableDump(t, conn); got != kernels[i] {
				t.Fatalf("seed %d step %d: the kernel differs from a clean run:\n%s", seed, i, lineDiff(kernels[i], got))
			}
			if got := bookkeeping(dp); got != books[i] {
				t.Fatalf("seed %d step %d: bookkeeping %s, clean %s", seed, i, got, books[i])
			}
		}
		applied, refused := conn.Flushes()
		t.Logf("seed %d: %d applied, %d refused", seed, applied, refused)
		if refused == 0 {
			t.Errorf("seed %d: no Flush failed; the test proves nothing", seed)
		}
		if recorded(dp) != 0 {
			t.Errorf("seed %d: bookkeeping left with no services: %s", seed, bookkeeping(dp))
		}
	}
}

// retry calls fn until it succeeds, failing the test after 100 tries.
func retry(t *testing.T, fn func() error) {
	t.Helper()
	var err error
	for range 100 {
		if err = fn(); err == nil {
			return
		}
		if !errors.Is(err, nftfake.ErrInjected) {
			t.Fatalf("not an injected failure: %v", err)
		}
	}
	t.Fatalf("still failing after 100 tries: %v", err)
}
