package compiler_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/flowlb/flowlb/internal/server/compiler"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// FuzzCompile grows random load balancer trees through the domain (the
// random requests of TestAcceptedTreesNeverShareAKey, from the fuzzed
// seed) and compiles them after every step: compiling never panics, no
// key is compiled for two load balancers, and every service is one a
// data plane can match (a valid VIP, a port, backends of weight 1..256).
func FuzzCompile(f *testing.F) {
	for seed := range uint64(4) {
		f.Add(seed, uint64(15), uint8(40))
	}
	f.Fuzz(func(t *testing.T, seed1, seed2 uint64, steps uint8) {
		r := rand.New(rand.NewPCG(seed1, seed2))
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		svc, err := lbaas.New(memstore.New(), &poolVIPs{rand: r}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
		if err != nil {
			t.Fatal(err)
		}
		fz := &fuzz{t: t, rand: r, svc: svc, ctx: identity.WithCaller(context.Background(), identity.Caller{ProjectID: "p", IsAdmin: true})}
		for range int(steps) % 64 {
			fz.step()
			fz.checkUnique()
		}
		trees, err := svc.Trees(fz.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range compiler.CompileAll(trees, 1).Services {
			if !s.Key.VIP.IsValid() || s.Key.Port == 0 || s.Key.Protocol == "" {
				t.Fatalf("service with an unmatchable key: %+v", s.Key)
			}
			for _, b := range s.Backends {
				if b.Weight < 1 || b.Weight > 256 || !b.Address.IsValid() {
					t.Fatalf("%v: backend %+v", s.Key, b)
				}
			}
		}
	})
}
