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
