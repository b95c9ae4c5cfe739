package agent

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// failing is a data plane whose every call fails.
type failing struct{ calls int }

func (f *failing) Sync(context.Context, flows.Table) error {
	f.calls++
	return errors.New("sync failed")
}
func (f *failing) Apply(context.Context, []flows.Service, []flows.Key) error {
	f.calls++
	return errors.New("apply failed")
}

func TestChainProgramsEachInOrder(t *testing.T) {
	ctx := context.Background()
	k := flows.Key{VIP: netip.MustParseAddr("198.19.0.1"), Protocol: flows.TCP, Port: 80}
	a, b := &recorder{}, &recorder{}
	c := Chain(a, b)
	if err := c.Sync(ctx, flows.Table{Services: map[flows.Key]flows.Service{k: {Key: k, LoadBalancerID: "lb1"}}}); err != nil {
		t.Fatal(err)
	}
	k2 := k
	k2.Port = 81
	if err := c.Apply(ctx, []flows.Service{{Key: k2, LoadBalancerID: "lb2"}}, []flows.Key{k}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recorder{a, b} {
		syncs, applies, vips := r.calls()
		if syncs != 1 || applies != 1 || len(vips) != 1 || vips[0] != "198.19.0.1/lb2" {
			t.Errorf("syncs %d, applies %d, table %v; want 1, 1, [198.19.0.1/lb2]", syncs, applies, vips)
		}
	}

	// The first error stops the change: the next data plane is not called.
	f, after := &failing{}, &recorder{}
	c = Chain(f, after)
	if err := c.Sync(ctx, flows.Table{}); err == nil {
		t.Fatal("Sync: no error")
	}
	if err := c.Apply(ctx, nil, nil); err == nil {
		t.Fatal("Apply: no error")
	}
	if syncs, applies, _ := after.calls(); f.calls != 2 || syncs != 0 || applies != 0 {
		t.Errorf("failing called %d times, the next %d+%d; want 2 and none", f.calls, syncs, applies)
	}
}

type fixedStats struct {
	stats map[flows.Key]flows.Stats
	err   error
}

func (f fixedStats) ReadStats() (map[flows.Key]flows.Stats, error) { return f.stats, f.err }

func TestSumStats(t *testing.T) {
	a := flows.Key{VIP: netip.MustParseAddr("198.19.0.1"), Protocol: flows.TCP, Port: 80}
	b := flows.Key{VIP: netip.MustParseAddr("198.19.0.2"), Protocol: flows.UDP, Port: 53}
	m := netip.MustParseAddrPort("198.18.1.2:8080")
	failed := errors.New("read failed")
	got, err := SumStats(
		fixedStats{stats: map[flows.Key]flows.Stats{a: {Counters: flows.Counters{Connections: 2, BytesIn: 100}, Active: 1,
			Members: map[netip.AddrPort]flows.Counters{m: {Connections: 2, BytesIn: 100}}}}},
		fixedStats{stats: map[flows.Key]flows.Stats{a: {Counters: flows.Counters{Connections: 3, Refused: 1},
			Members: map[netip.AddrPort]flows.Counters{m: {Connections: 3}}}, b: {Counters: flows.Counters{Refused: 4}}}, err: failed},
	).ReadStats()
	if !errors.Is(err, failed) {
		t.Errorf("err = %v, want the second reader's", err)
	}
	want := map[flows.Key]flows.Stats{
		a: {Counters: flows.Counters{Connections: 5, BytesIn: 100, Refused: 1}, Active: 1,
			Members: map[netip.AddrPort]flows.Counters{m: {Connections: 5, BytesIn: 100}}},
		b: {Counters: flows.Counters{Refused: 4}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sum = %v, want %v", got, want)
	}
}
