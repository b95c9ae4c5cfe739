package announce

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

type fakeRoutes struct {
	have map[netip.Addr]bool
	fail map[netip.Addr]bool // Add fails for these
	ops  int
}

func (f *fakeRoutes) List() ([]netip.Addr, error) {
	var out []netip.Addr
	for v := range f.have {
		out = append(out, v)
	}
	return out, nil
}

func (f *fakeRoutes) Add(v netip.Addr) error {
	f.ops++
	if f.fail[v] {
		return errors.New("refused")
	}
	f.have[v] = true
	return nil
}

func (f *fakeRoutes) Del(v netip.Addr) error {
	f.ops++
	delete(f.have, v)
	return nil
}

type fakeDP struct{ err error }

func (f fakeDP) Sync(context.Context, flows.Table) error { return f.err }
func (f fakeDP) Apply(context.Context, []flows.Service, []flows.Key) error {
	return f.err
}

var ext = []netip.Prefix{netip.MustParsePrefix("198.19.128.0/17")}

func service(vip string, port uint16, localOnly bool, nodes ...string) flows.Service {
	s := flows.Service{Key: flows.Key{VIP: netip.MustParseAddr(vip), Protocol: flows.TCP, Port: port}, LocalOnly: localOnly}
	for i, n := range nodes {
		s.Backends = append(s.Backends, flows.Backend{Address: netip.AddrFrom4([4]byte{198, 18, 17, byte(2 + i)}), Port: 8080, Weight: 1, Node: n})
	}
	return s
}

func table(ss ...flows.Service) flows.Table {
	t := flows.Table{Services: map[flows.Key]flows.Service{}}
	for _, s := range ss {
		t.Services[s.Key] = s
	}
	return t
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// TestAnnouncer: node n1 announces the VIPs within the ranges that it can
// serve, follows every change in O(changes), adopts what a previous run
// left, and retries a refused route at the next change.
func TestAnnouncer(t *testing.T) {
	ctx := context.Background()
	stale := netip.MustParseAddr("198.19.128.99")
	r := &fakeRoutes{have: map[netip.Addr]bool{stale: true}, fail: map[netip.Addr]bool{}}
	a, err := New(fakeDP{}, "n1", ext, r, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Announced(); !slices.Equal(got, []netip.Addr{stale}) {
		t.Fatalf("adopted %v", got)
	}
	step := func(name string, want []netip.Addr) {
		t.Helper()
		if got := a.Announced(); !slices.Equal(got, want) {
			t.Errorf("%s: announced %v, want %v", name, got, want)
		}
		var kernel []netip.Addr
		for v := range r.have {
			kernel = append(kernel, v)
		}
		slices.SortFunc(kernel, netip.Addr.Compare)
		if !slices.Equal(kernel, a.Announced()) {
			t.Errorf("%s: routes %v, announced %v", name, kernel, a.Announced())
		}
	}
	local := service("198.19.128.1", 80, true, "n2")    // local-only, no backend here
	cluster := service("198.19.128.2", 80, false, "n3") // served from anywhere
	internal := service("198.19.0.5", 80, false, "n1")  // outside the ranges
	empty := service("198.19.128.3", 80, false)         // no backend at all
	if err := a.Sync(ctx, table(local, cluster, internal, empty)); err != nil {
		t.Fatal(err)
	}
	step("snapshot", addrs("198.19.128.2"))

	// A backend of the local-only service comes to n1.
	local = service("198.19.128.1", 80, true, "n2", "n1")
	r.ops = 0
	if err := a.Apply(ctx, []flows.Service{local}, nil); err != nil {
		t.Fatal(err)
	}
	step("a local backend", addrs("198.19.128.1", "198.19.128.2"))
	if r.ops != 1 {
		t.Errorf("%d route operations for one change, want 1", r.ops)
	}
	// A second port of the same VIP, not servable here: the VIP stays.
	local81 := service("198.19.128.1", 81, true, "n3")
	if err := a.Apply(ctx, []flows.Service{local81}, nil); err != nil {
		t.Fatal(err)
	}
	step("a second port", addrs("198.19.128.1", "198.19.128.2"))
	// The local backend leaves: only port 81 remains, not servable here.
	if err := a.Apply(ctx, nil, []flows.Key{local.Key}); err != nil {
		t.Fatal(err)
	}
	step("the local backend gone", addrs("198.19.128.2"))

	// A refused route is retried at the next change.
	r.fail[empty.Key.VIP] = true
	empty = service("198.19.128.3", 80, false, "n2")
	if err := a.Apply(ctx, []flows.Service{empty}, nil); err != nil {
		t.Fatalf("a refused route failed the change: %v", err)
	}
	step("refused", addrs("198.19.128.2"))
	delete(r.fail, empty.Key.VIP)
	if err := a.Apply(ctx, nil, []flows.Key{internal.Key}); err != nil {
		t.Fatal(err)
	}
	step("retried", addrs("198.19.128.2", "198.19.128.3"))

	// A data plane that fails: nothing is announced for the change.
	b, _ := New(fakeDP{err: errors.New("kernel says no")}, "n1", ext, &fakeRoutes{have: map[netip.Addr]bool{}}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := b.Sync(ctx, table(cluster)); err == nil || len(b.Announced()) != 0 {
		t.Errorf("failed sync: %v, announced %v", err, b.Announced())
	}
}

// batchRoutes is a Routes that takes whole changes (a BGP speaker).
type batchRoutes struct {
	fakeRoutes
	updates [][2][]netip.Addr
	synced  int
	fail    bool
}

func (b *batchRoutes) Update(add, del []netip.Addr) error {
	b.updates = append(b.updates, [2][]netip.Addr{add, del})
	if b.fail {
		return errors.New("refused")
	}
	for _, v := range del {
		delete(b.have, v)
	}
	for _, v := range add {
		b.have[v] = true
	}
	return nil
}

func (b *batchRoutes) Synced() { b.synced++ }

// TestAnnouncerBatch: a Routes that takes a change at once gets one
// Update per change, sorted, never Add or Del; it is told after every
// whole table; a refused Update is sent again whole at the next change.
func TestAnnouncerBatch(t *testing.T) {
	ctx := context.Background()
	r := &batchRoutes{fakeRoutes: fakeRoutes{have: map[netip.Addr]bool{}}}
	a, err := New(fakeDP{}, "n1", ext, r, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx, table(service("198.19.128.9", 80, false, "n2"), service("198.19.128.2", 80, false, "n2"), service("198.19.128.3", 80, true, "n2"))); err != nil {
		t.Fatal(err)
	}
	if len(r.updates) != 1 || !slices.Equal(r.updates[0][0], addrs("198.19.128.2", "198.19.128.9")) || r.synced != 1 || r.ops != 0 {
		t.Fatalf("after the table: updates %v, synced %d, single operations %d", r.updates, r.synced, r.ops)
	}
	r.fail = true
	if err := a.Apply(ctx, []flows.Service{service("198.19.128.3", 80, true, "n1")}, []flows.Key{service("198.19.128.9", 80, false).Key}); err != nil {
		t.Fatalf("a refused update failed the change: %v", err)
	}
	if got := a.Announced(); !slices.Equal(got, addrs("198.19.128.2", "198.19.128.9")) {
		t.Errorf("after a refused update: announced %v", got)
	}
	r.fail = false
	if err := a.Apply(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	last := r.updates[len(r.updates)-1]
	if !slices.Equal(last[0], addrs("198.19.128.3")) || !slices.Equal(last[1], addrs("198.19.128.9")) {
		t.Errorf("retry: +%v -%v, want +198.19.128.3 -198.19.128.9", last[0], last[1])
	}
	if got := a.Announced(); !slices.Equal(got, addrs("198.19.128.2", "198.19.128.3")) {
		t.Errorf("after the retry: announced %v", got)
	}
}
