package l2

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var (
	hw    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	asker = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	vip   = netip.MustParseAddr("198.18.5.10")
	other = netip.MustParseAddr("198.18.5.11")
)

func TestChanges(t *testing.T) {
	v6 := netip.MustParseAddr("2001:2:0:5::10")
	for _, tc := range []struct {
		name         string
		have         []netip.Addr
		want         []netip.Addr
		gained, lost []netip.Addr
	}{
		{"from none, sorted, once each", nil, []netip.Addr{v6, other, vip, vip}, []netip.Addr{vip, other, v6}, nil},
		{"the same", []netip.Addr{vip}, []netip.Addr{vip}, nil, nil},
		{"one moves away, one comes", []netip.Addr{vip, v6}, []netip.Addr{other, v6}, []netip.Addr{other}, []netip.Addr{vip}},
		{"an IPv4-mapped address is its IPv4 one", []netip.Addr{vip}, []netip.Addr{netip.AddrFrom16(vip.As16())}, nil, nil},
		{"to none", []netip.Addr{vip, v6}, nil, nil, []netip.Addr{vip, v6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := map[netip.Addr]bool{}
			for _, v := range tc.have {
				have[v] = true
			}
			gained, lost := Changes(have, tc.want)
			if !slices.Equal(gained, tc.gained) || !slices.Equal(lost, tc.lost) {
				t.Errorf("gained %v lost %v, want %v and %v", gained, lost, tc.gained, tc.lost)
			}
		})
	}
}

func TestReply(t *testing.T) {
	owns := func(v netip.Addr) bool { return v == vip }
	req := func(op arp.Operation, sender, target netip.Addr) *arp.Packet {
		p, err := arp.NewPacket(op, asker, sender, ethernet.Broadcast, target)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	asking := netip.MustParseAddr("198.18.5.2")
	if r := Reply(req(arp.OperationRequest, asking, vip), hw, owns); r == nil || r.Operation != arp.OperationReply ||
		r.SenderIP != vip || !slices.Equal(r.SenderHardwareAddr, hw) || r.TargetIP != asking || !slices.Equal(r.TargetHardwareAddr, asker) {
		t.Errorf("a request for a held address: %+v, want a reply from %s at %s to %s at %s", r, vip, hw, asking, asker)
	}
	for name, p := range map[string]*arp.Packet{
		"another address":  req(arp.OperationRequest, asking, other),
		"a reply":          req(arp.OperationReply, asking, vip),
		"a gratuitous ARP": req(arp.OperationRequest, vip, vip),
		"no packet (nil)":  nil,
	} {
		if r := Reply(p, hw, owns); r != nil {
			t.Errorf("%s: answered %+v", name, r)
		}
	}
	g := Gratuitous(hw, vip)
	if g.Operation != arp.OperationRequest || g.SenderIP != vip || g.TargetIP != vip || !slices.Equal(g.SenderHardwareAddr, hw) {
		t.Errorf("gratuitous ARP %+v", g)
	}
	if a := Advertisement(hw, netip.MustParseAddr("2001:2:0:5::10"), true); !a.Solicited || !a.Override || len(a.Options) != 1 {
		t.Errorf("advertisement %+v", a)
	}
}

// TestResponderOnVeth: a responder in one namespace answers the kernel of
// another, across a veth, for the addresses it holds (ARP and NDP), makes
// that kernel move an address it had elsewhere at once (gratuitous ARP,
// unsolicited advertisement), and leaves an address it gave up
// unanswered.
func TestResponderOnVeth(t *testing.T) {
	v6, other6 := netip.MustParseAddr("2001:2:0:5::10"), netip.MustParseAddr("2001:2:0:5::11")
	testutil.InNewNetns(t, func(a netns.NsHandle) {
		noDAD(t)
		b, err := netns.New()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		noDAD(t)
		if err := netns.Set(a); err != nil {
			t.Fatal(err)
		}
		hb, err := netlink.NewHandleAt(b)
		if err != nil {
			t.Fatal(err)
		}
		defer hb.Close()
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "a0"}, PeerName: "b0", PeerNamespace: netlink.NsFd(b)}); err != nil {
			t.Fatal(err)
		}
		a0, _ := netlink.LinkByName("a0")
		b0, err := hb.LinkByName("b0")
		if err != nil {
			t.Fatal(err)
		}
		mustAddr(t, netlink.AddrAdd(a0, addr("198.18.5.1/24")))
		mustAddr(t, netlink.AddrAdd(a0, addr("2001:2:0:5::1/64")))
		mustAddr(t, hb.AddrAdd(b0, addr("198.18.5.2/24")))
		mustAddr(t, hb.AddrAdd(b0, addr("2001:2:0:5::2/64")))
		mustAddr(t, netlink.LinkSetUp(a0))
		mustAddr(t, hb.LinkSetUp(b0))
		// IPv6 is up on both ends once each has its link-local address
		// (and has joined the all-nodes group).
		for _, l := range []struct {
			h    *netlink.Handle
			link netlink.Link
		}{{nil, a0}, {hb, b0}} {
			testutil.Eventually(t, 5*time.Second, l.link.Attrs().Name+"'s link-local address", func() (bool, string) {
				list := netlink.AddrList
				if l.h != nil {
					list = l.h.AddrList
				}
				as, _ := list(l.link, netlink.FAMILY_V6)
				return slices.ContainsFunc(as, func(x netlink.Addr) bool { return x.IP.IsLinkLocalUnicast() }), fmt.Sprint(as)
			})
		}

		r, err := New("a0", slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t1, t2 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 8, 0, 5, 0, time.UTC)
		r.now = func() time.Time { return t1 }
		ctx := t.Context()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() {
			r.Close()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		// b's kernel had other and other6 at another host.
		stale := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
		for _, v := range []netip.Addr{other, other6} {
			fam := netlink.FAMILY_V4
			if v.Is6() {
				fam = netlink.FAMILY_V6
			}
			if err := hb.NeighSet(&netlink.Neigh{LinkIndex: b0.Attrs().Index, Family: fam, State: netlink.NUD_STALE, IP: v.AsSlice(), HardwareAddr: stale}); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Set([]netip.Addr{vip, v6, other, other6}); err != nil {
			t.Fatal(err)
		}
		mine := a0.Attrs().HardwareAddr
		st := r.State()
		if want := (State{Interface: "a0", ARP: true, NDP: true, Owned: map[netip.Addr]time.Time{vip: t1, v6: t1, other: t1, other6: t1},
			Refused: map[netip.Addr]string{}, ListAt: t1, Counts: Counts{GratuitousARP: 2, UnsolicitedNA: 2}}); !reflect.DeepEqual(st, want) {
			t.Errorf("state after the first list: %+v, want %+v", st, want)
		}
		// Moved at once, without b asking.
		for _, v := range []netip.Addr{other, other6} {
			testutil.Eventually(t, 5*time.Second, "b's entry of "+v.String()+" moved by the announcement", neighIs(hb, b0, v, mine))
		}
		// Answered when b asks.
		for _, v := range []netip.Addr{vip, v6} {
			send(t, b, v)
			testutil.Eventually(t, 5*time.Second, "b resolves "+v.String()+" to a0", neighIs(hb, b0, v, mine))
		}
		testutil.Eventually(t, 5*time.Second, "the answers counted", func() (bool, string) {
			c := r.State().Counts
			return c.ARPReplies >= 1 && c.NDPReplies >= 1, fmt.Sprintf("%+v", c)
		})
		// Given up: b's next question goes unanswered. What stays keeps
		// its time.
		r.now = func() time.Time { return t2 }
		if err := r.Set([]netip.Addr{v6}); err != nil {
			t.Fatal(err)
		}
		if st := r.State(); !reflect.DeepEqual(st.Owned, map[netip.Addr]time.Time{v6: t1}) || st.ListAt != t2 || st.Counts.GratuitousARP != 2 || st.Counts.UnsolicitedNA != 2 {
			t.Errorf("state after the second list: %+v", st)
		}
		if err := hb.NeighDel(&netlink.Neigh{LinkIndex: b0.Attrs().Index, Family: netlink.FAMILY_V4, IP: vip.AsSlice()}); err != nil {
			t.Fatal(err)
		}
		send(t, b, vip)
		testutil.Eventually(t, 10*time.Second, "b fails to resolve the address given up", func() (bool, string) {
			n := neighOf(hb, b0, vip)
			return n != nil && n.State == netlink.NUD_FAILED, neighString(n)
		})

		// The link goes down and up again (a cable, a switch port, a
		// bond's failover): the responder answers again, and announces
		// what it holds as soon as the link is back.
		if err := r.Set([]netip.Addr{vip, v6}); err != nil {
			t.Fatal(err)
		}
		before := r.State().Counts
		mustAddr(t, netlink.LinkSetDown(a0))
		testutil.Eventually(t, 5*time.Second, "a0 down", func() (bool, string) {
			l, err := netlink.LinkByName("a0")
			return err == nil && l.Attrs().OperState == netlink.OperDown, fmt.Sprint(err)
		})
		for _, v := range []netip.Addr{vip, v6} {
			fam := netlink.FAMILY_V4
			if v.Is6() {
				fam = netlink.FAMILY_V6
			}
			_ = hb.NeighDel(&netlink.Neigh{LinkIndex: b0.Attrs().Index, Family: fam, IP: v.AsSlice()})
		}
		mustAddr(t, netlink.LinkSetUp(a0))
		// The kernel dropped a0's global IPv6 address with the link; the
		// node's network configuration puts it back.
		mustAddr(t, netlink.AddrReplace(a0, addr("2001:2:0:5::1/64")))
		testutil.Eventually(t, 5*time.Second, "the holdings announced again once the link is up", func() (bool, string) {
			c := r.State().Counts
			return c.GratuitousARP >= before.GratuitousARP+1 && c.UnsolicitedNA >= before.UnsolicitedNA+1, fmt.Sprintf("%+v, before %+v", c, before)
		})
		for _, v := range []netip.Addr{vip, v6} {
			if n := neighOf(hb, b0, v); n != nil && !slices.Equal(n.HardwareAddr, mine) {
				_ = hb.NeighDel(n)
			}
			testutil.Eventually(t, 10*time.Second, "b resolves "+v.String()+" to a0 after the flap", func() (bool, string) {
				send(t, b, v)
				return neighIs(hb, b0, v, mine)()
			})
		}
	})
}

func addr(s string) *netlink.Addr {
	a, err := netlink.ParseAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}

func mustAddr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// noDAD turns off duplicate address detection in the thread's (test's
// own) namespace, so that link-local addresses are usable at once.
func noDAD(t *testing.T) {
	t.Helper()
	for _, f := range []string{"/proc/sys/net/ipv6/conf/default/accept_dad", "/proc/sys/net/ipv6/conf/all/accept_dad"} {
		if err := os.WriteFile(f, []byte("0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// send makes ns's kernel resolve v: a UDP datagram to its discard port.
func send(t *testing.T, ns netns.NsHandle, v netip.Addr) {
	t.Helper()
	back, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer netns.Set(back)
	c, err := net.Dial("udp", netip.AddrPortFrom(v, 9).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("who has"))
}

func neighOf(h *netlink.Handle, l netlink.Link, v netip.Addr) *netlink.Neigh {
	fam := netlink.FAMILY_V4
	if v.Is6() {
		fam = netlink.FAMILY_V6
	}
	ns, _ := h.NeighList(l.Attrs().Index, fam)
	for i := range ns {
		if ip, ok := netip.AddrFromSlice(ns[i].IP); ok && ip.Unmap() == v {
			return &ns[i]
		}
	}
	return nil
}

func neighString(n *netlink.Neigh) string {
	if n == nil {
		return "no entry"
	}
	return n.String() + " " + n.HardwareAddr.String()
}

func neighIs(h *netlink.Handle, l netlink.Link, v netip.Addr, mac net.HardwareAddr) func() (bool, string) {
	return func() (bool, string) {
		n := neighOf(h, l, v)
		return n != nil && slices.Equal(n.HardwareAddr, mac) && n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE) != 0, neighString(n)
	}
}
