package announce

import (
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestKernelTable: announcements are blackhole host routes of protocol
// 249 in their own table, listed back as they are; other routes of that
// table and the main table are not announcements, and main, local and
// default are refused as announcement tables.
func TestKernelTable(t *testing.T) {
	testutil.RequireRoot(t)
	for _, bad := range []int{0, unix.RT_TABLE_MAIN, unix.RT_TABLE_LOCAL, unix.RT_TABLE_DEFAULT} {
		if _, err := OpenTable(bad); err == nil {
			t.Errorf("table %d accepted", bad)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the thread ends in its namespace, never unlocked
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Error(err)
			return
		}
		// Not announcements: another protocol in the table, and a route
		// of the protocol in main.
		other := &netlink.Route{Dst: &net.IPNet{IP: net.ParseIP("198.19.128.50"), Mask: net.CIDRMask(32, 32)}, Table: 200, Type: unix.RTN_BLACKHOLE}
		mainRoute := &netlink.Route{Dst: &net.IPNet{IP: net.ParseIP("198.19.128.51"), Mask: net.CIDRMask(32, 32)}, Type: unix.RTN_BLACKHOLE, Protocol: Protocol}
		for _, r := range []*netlink.Route{other, mainRoute} {
			if err := netlink.RouteAdd(r); err != nil {
				t.Error(err)
				return
			}
		}
		k, err := OpenTable(200)
		if err != nil {
			t.Error(err)
			return
		}
		defer k.Close()
		vips := []netip.Addr{netip.MustParseAddr("198.19.128.1"), netip.MustParseAddr("198.19.128.2"), netip.MustParseAddr("2001:2:0:180::1")}
		for _, v := range vips {
			if err := k.Add(v); err != nil {
				t.Error(err)
			}
		}
		if err := k.Add(vips[0]); err != nil {
			t.Errorf("announcing twice: %v", err)
		}
		got, err := k.List()
		slices.SortFunc(got, netip.Addr.Compare)
		if err != nil || !slices.Equal(got, vips) {
			t.Errorf("listed %v (%v), want %v", got, err, vips)
		}
		if err := k.Del(vips[0]); err != nil {
			t.Error(err)
		}
		if err := k.Del(vips[0]); err != nil {
			t.Errorf("withdrawing twice: %v", err)
		}
		if got, _ := k.List(); !slices.Equal(got, vips[1:]) {
			t.Errorf("after a withdrawal: %v", got)
		}
		rs, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 200}, netlink.RT_FILTER_TABLE)
		if len(rs) != 2 {
			t.Errorf("table 200 holds %d routes, want the other one and one announcement", len(rs))
		}
	}()
	<-done
}
