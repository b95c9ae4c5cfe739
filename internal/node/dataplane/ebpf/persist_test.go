package ebpf

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// netnsCookie is the cookie of the calling thread's network namespace:
// the client identity of SOURCE_IP and of its persistence.
func netnsCookie(t testing.TB) uint64 {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// netnsSlot is the slot SOURCE_IP picks for the namespace with cookie c
// (pick and mix in bpf/socklb.c): the test's oracle of a fresh pick.
func netnsSlot(c uint64) int {
	return int(uint32((c*0x9E3779B97F4A7C15)>>32) % Slots)
}

// sticky is a SOURCE_IP service with persistence on port, with the
// weights w of the three backends (0: not a backend).
func sticky(port uint16, timeout time.Duration, w [3]int) flows.Service {
	s := service(port, flows.TCP, w[:]...)
	s.Algorithm = flows.SourceIP
	s.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: timeout}
	return s
}

// slotBackend is the backend address in slot i of s's table.
func slotBackend(t testing.TB, s flows.Service, i int) string {
	t.Helper()
	_, v, ok := encode(s, "n1", "")
	if !ok || v.Flags&flagRefuse != 0 {
		t.Fatalf("%v: not a carried service with backends", s.Key)
	}
	return decodeAddr(v.Slots[i].Addr).String()
}

// repicked is s with other weights (one backend possibly left out) so
// that a fresh pick of slot i is another backend than keep, which stays
// one of s's backends; ok is false when no weights do that (a slot that
// is keep's first choice stays keep's while keep has the largest weight
// or is alone in taking its first turn).
func repicked(t testing.TB, s flows.Service, i int, keep string) (_ flows.Service, other string, ok bool) {
	t.Helper()
	for n := range 9 * 9 * 9 {
		w := [3]int{n % 9, n / 9 % 9, n / 81}
		k := slices.IndexFunc(backends, func(b netip.Addr) bool { return b.String() == keep })
		if w[k] == 0 || w[0]+w[1]+w[2] == w[k] {
			continue
		}
		r := sticky(s.Key.Port, s.Persistence.Timeout, w)
		if b := slotBackend(t, r, i); b != keep {
			return r, b, true
		}
	}
	return s, "", false
}

// askAll connects n times to the VIP's port and fails unless want
// answered each time.
func askAll(t testing.TB, port uint16, n int, want, why string) {
	t.Helper()
	for range n {
		who, _, err := dial(netip.AddrPortFrom(vip, port))
		if err != nil || who != want {
			t.Fatalf("%s: port %d answered by %q (%v), want %s", why, port, who, err, want)
		}
	}
}

// TestPersistence: SOURCE_IP persistence in the programs. A client (a
// network namespace) keeps the backend it used while it reconnects
// within the timeout, even when a fresh pick would now choose another;
// another namespace picks for itself; after the timeout the client picks
// afresh; when its backend leaves the service it moves at once; and the
// affinities survive an agent restart with pinned maps. The fresh picks
// are known in advance: SOURCE_IP's slot is the hash of the namespace's
// cookie, which the test reads with SO_NETNS_COOKIE.
func TestPersistence(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	fs := testBPFFS(t)
	cfg := Config{Node: "n1", Cgroup: cg, PinDir: filepath.Join(fs, "flowlb")}
	dp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if dp == nil { // a restart failed
			err = Cleanup(cfg.PinDir)
		} else {
			err = dp.Remove()
		}
		if err != nil {
			t.Error(err)
		}
	}()
	// Two seconds: long enough for the steps within it on a loaded
	// machine, short enough to wait out.
	const timeout = 2 * time.Second
	s1 := sticky(80, timeout, [3]int{1, 1, 1})
	if err := dp.Sync(context.Background(), tableOf(s1)); err != nil {
		t.Fatal(err)
	}
	long := sticky(81, time.Hour, [3]int{1, 1, 1})
	enterCgroup(t, cg)
	// The steps need a client whose slot other weights can move, in both
	// services: a few fresh namespaces find one.
	for try, done := 0, false; !done; try++ {
		if try == 20 {
			t.Fatal("no namespace of 20 has a slot that other weights move")
		}
		inNetns(t, backends, func() {
			slot := netnsSlot(netnsCookie(t))
			_, _, ok1 := repicked(t, s1, slot, slotBackend(t, s1, slot))
			_, _, ok2 := repicked(t, long, slot, slotBackend(t, long, slot))
			if done = ok1 && ok2; done {
				persistenceSteps(t, &dp, cfg, s1, long)
			}
		})
	}
}

// persistenceSteps are TestPersistence's steps from a client namespace
// whose slot other weights move in s1 and long; *dp is replaced by the
// restart.
func persistenceSteps(t *testing.T, dp **Dataplane, cfg Config, s1, long flows.Service) {
	ctx := context.Background()
	timeout := s1.Persistence.Timeout
	serve(t)
	cookie := netnsCookie(t)
	slot := netnsSlot(cookie)
	first := slotBackend(t, s1, slot)
	askAll(t, 80, 20, first, "one client")
	var a socklbAffVal
	if err := (*dp).objs.Affinity.Lookup(socklbAffKey{Svc: encodeKey(s1.Key), Client: cookie}, &a); err != nil ||
		decodeAddr(a.Backend.Addr).String() != first || decodePort(a.Backend.Port) != 8080 {
		t.Fatalf("affinity of the client: %+v, %v; want %s:8080", a, err, first)
	}

	// A fresh pick would now be another backend; the client keeps its own.
	s2, other, _ := repicked(t, s1, slot, first)
	if err := (*dp).Apply(ctx, []flows.Service{s2}, nil); err != nil {
		t.Fatal(err)
	}
	askAll(t, 80, 20, first, "within the timeout, after a change that moves the client's slot")

	// Another client picks for itself (in its own namespace, with its
	// own listeners on the backends' addresses).
	inNetns(t, backends, func() {
		serve(t)
		askAll(t, 80, 10, slotBackend(t, s2, netnsSlot(netnsCookie(t))), "a second client")
	})

	// Not a synchronisation: the timeout must pass without a connect().
	time.Sleep(timeout + 200*time.Millisecond)
	askAll(t, 80, 10, other, "after the timeout")

	// The remembered backend leaves: the client moves at once.
	var w [3]int
	for i, b := range backends {
		if b.String() != other {
			w[i] = 1
		}
	}
	s3 := sticky(80, timeout, w)
	if err := (*dp).Apply(ctx, []flows.Service{s3}, nil); err != nil {
		t.Fatal(err)
	}
	askAll(t, 80, 10, slotBackend(t, s3, slot), fmt.Sprintf("after %s left", other))

	// A restarted agent adopts the affinities with the maps.
	if err := (*dp).Apply(ctx, []flows.Service{long}, nil); err != nil {
		t.Fatal(err)
	}
	kept := slotBackend(t, long, slot)
	askAll(t, 81, 1, kept, "a long persistence")
	longer, moved, _ := repicked(t, long, slot, kept)
	if err := (*dp).Close(); err != nil {
		t.Fatal(err)
	}
	var err error
	if *dp, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := (*dp).Apply(ctx, []flows.Service{longer}, nil); err != nil {
		t.Fatal(err)
	}
	askAll(t, 81, 10, kept, fmt.Sprintf("after a restart (a fresh pick is %s)", moved))
}
