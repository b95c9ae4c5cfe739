package fanout_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestAnnouncementsReported: the hub keeps what each of its nodes
// announces as the agent reports it, at the start of a session and when
// it changes (a BGP session going down, a VIP more), and forgets it when
// the node leaves.
func TestAnnouncementsReported(t *testing.T) {
	w := newWorld(memstore.New(), tree("a", "198.19.0.1", "198.18.17.2"))
	hub, addr, _ := serve(t, w, "r1", 5*time.Second)
	var mu sync.Mutex
	now := &agentv1.AnnounceStatus{Mode: "bgp", Vips: [][]byte{netip.MustParseAddr("198.19.128.2").AsSlice()},
		Sessions: []*agentv1.BGPSession{{Peer: "198.18.0.254", Asn: 64500, State: "established", SinceUnixMs: 1_700_000_000_000, Bfd: "up"}}}
	set := func(f func(*agentv1.AnnounceStatus)) {
		mu.Lock()
		defer mu.Unlock()
		f(now)
	}
	a := agent.New(agent.Config{Server: addr, Token: token, Node: "n1", NoHealth: true, AnnounceInterval: 20 * time.Millisecond,
		Announced: func() *agentv1.AnnounceStatus {
			mu.Lock()
			defer mu.Unlock()
			return proto.Clone(now).(*agentv1.AnnounceStatus) // the test goes on changing now
		}}, &recorder{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	announced := func(want func(fanout.Announcements, bool) bool) func() (bool, string) {
		return func() (bool, string) {
			an, ok := hub.Announcements()["n1"]
			return want(an, ok), fmt.Sprintf("%+v %v", an, ok)
		}
	}
	testutil.Eventually(t, 5*time.Second, "the announcements reported", announced(func(an fanout.Announcements, ok bool) bool {
		return ok && an.Mode == "bgp" && slices.Equal(an.VIPs, []netip.Addr{netip.MustParseAddr("198.19.128.2")}) && an.Established() == 1 &&
			an.Sessions[0] == fanout.BGPSession{Peer: "198.18.0.254", ASN: 64500, State: "established", Since: time.UnixMilli(1_700_000_000_000), BFD: "up"}
	}))
	// The session goes down, a VIP comes: told without a flow change.
	set(func(m *agentv1.AnnounceStatus) {
		m.Sessions[0].State, m.Sessions[0].Bfd = "active", "down"
		m.Vips = append(m.Vips, netip.MustParseAddr("2001:2:0:c000::2").AsSlice())
	})
	testutil.Eventually(t, 5*time.Second, "the change reported", announced(func(an fanout.Announcements, ok bool) bool {
		return ok && an.Established() == 0 && len(an.VIPs) == 2 && an.VIPs[1] == netip.MustParseAddr("2001:2:0:c000::2")
	}))
	cancel()
	<-done
	testutil.Eventually(t, 5*time.Second, "the announcements forgotten with the node", announced(func(_ fanout.Announcements, ok bool) bool { return !ok }))
}

// TestAnnouncedLB: the hub says which of its nodes announce each address
// of a load balancer's flows, how many announce at all, and how many of
// the cluster's agents it does not hear from (they stream to another
// replica).
func TestAnnouncedLB(t *testing.T) {
	w := newWorld(memstore.New(), tree("a", "198.19.128.2", "198.18.17.2"), tree("b", "198.19.128.3", "198.18.17.3"),
		tree("c", "198.19.128.8", "198.18.17.4"))
	hub, addr, _ := serve(t, w, "r1", 5*time.Second)
	hub2, addr2, _ := serve(t, w, "r2", 5*time.Second)
	vip, other := netip.MustParseAddr("198.19.128.2"), netip.MustParseAddr("198.19.128.9")
	start := func(addr, node string, vips ...netip.Addr) func() {
		st := &agentv1.AnnounceStatus{Mode: "table", Ranges: []string{"198.19.128.0/29"}}
		for _, v := range vips {
			st.Vips = append(st.Vips, v.AsSlice())
		}
		a := agent.New(agent.Config{Server: addr, Token: token, Node: node, NoHealth: true, AnnounceInterval: 20 * time.Millisecond,
			Announced: func() *agentv1.AnnounceStatus { return proto.Clone(st).(*agentv1.AnnounceStatus) }},
			&recorder{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	stop1 := start(addr, "n1", other, vip) // unsorted, as an agent may send them
	defer stop1()
	stop2 := start(addr, "n2", other)
	defer stop2()
	stop3 := start(addr2, "n3", vip)
	defer stop3()
	testutil.Eventually(t, 5*time.Second, "both nodes' announcements, and the other replica's node unseen", func() (bool, string) {
		got := hub.Announced("a")
		return got.Announcing == 2 && slices.Equal(got.Addresses[vip], []string{"n1"}) && len(got.Addresses) == 1 && got.Unseen == 1 &&
			got.InRanges[vip], fmt.Sprintf("%+v", got)
	})
	testutil.Eventually(t, 5*time.Second, "the other replica's view", func() (bool, string) {
		got := hub2.Announced("a")
		return got.Announcing == 1 && slices.Equal(got.Addresses[vip], []string{"n3"}) && got.Unseen == 2, fmt.Sprintf("%+v", got)
	})
	if got := hub.Announced("b"); !slices.Equal(got.Addresses[netip.MustParseAddr("198.19.128.3")], []string{}) || len(got.Addresses) != 1 || !got.InRanges[netip.MustParseAddr("198.19.128.3")] {
		t.Errorf("load balancer b, whose address no node announces: %+v", got)
	}
	if got := hub.Announced("c"); got.InRanges[netip.MustParseAddr("198.19.128.8")] || len(got.Addresses) != 1 {
		t.Errorf("load balancer c, outside every node's ranges: %+v", got)
	}
	if got := hub.Announced("nope"); len(got.Addresses) != 0 || got.Announcing != 2 {
		t.Errorf("a load balancer the table does not have: %+v", got)
	}
	stop1()
	testutil.Eventually(t, 5*time.Second, "n1's announcements forgotten with its stream", func() (bool, string) {
		got := hub.Announced("a")
		return got.Announcing == 1 && len(got.Addresses[vip]) == 0, fmt.Sprintf("%+v", got)
	})
}

func TestAnnouncementsHas(t *testing.T) {
	a := fanout.Announcements{VIPs: []netip.Addr{netip.MustParseAddr("198.19.128.2"), netip.MustParseAddr("2001:2::5")}}
	for v, want := range map[string]bool{"198.19.128.2": true, "2001:2::5": true, "198.19.128.3": false, "::ffff:198.19.128.2": false} {
		if got := a.Has(netip.MustParseAddr(v)); got != want {
			t.Errorf("Has(%s) = %v, want %v", v, got, want)
		}
	}
}
