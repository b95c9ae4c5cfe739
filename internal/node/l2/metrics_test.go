package l2

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetrics: the VIPs answered by family, and the messages sent, read
// from the responder at the scrape; a family without any at zero.
func TestMetrics(t *testing.T) {
	r := &Responder{ifi: &net.Interface{Name: "eth0"}, owned: map[netip.Addr]time.Time{v4a: at1, v4b: at1}, refused: map[netip.Addr]string{}}
	r.announced4.Store(3)
	r.answered4.Store(9)
	r.answered6.Store(1)
	want := `
# HELP flowlb_agent_l2_announcements_total Gratuitous ARPs (ipv4) and unsolicited neighbour advertisements (ipv6) sent, one per VIP taken.
# TYPE flowlb_agent_l2_announcements_total counter
flowlb_agent_l2_announcements_total{family="ipv4"} 3
flowlb_agent_l2_announcements_total{family="ipv6"} 0
# HELP flowlb_agent_l2_replies_total ARP replies (ipv4) and solicited neighbour advertisements (ipv6) sent for the VIPs answered.
# TYPE flowlb_agent_l2_replies_total counter
flowlb_agent_l2_replies_total{family="ipv4"} 9
flowlb_agent_l2_replies_total{family="ipv6"} 1
# HELP flowlb_agent_l2_vips External VIPs this node answers ARP (ipv4) or neighbour discovery (ipv6) for (--l2-interface).
# TYPE flowlb_agent_l2_vips gauge
flowlb_agent_l2_vips{family="ipv4"} 2
flowlb_agent_l2_vips{family="ipv6"} 0
`
	if err := promtest.CollectAndCompare(r.Collector(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	r.mu.Lock()
	r.owned[v6a] = at2
	delete(r.owned, v4b)
	r.mu.Unlock()
	if err := promtest.CollectAndCompare(r.Collector(), strings.NewReader(`
# HELP flowlb_agent_l2_vips External VIPs this node answers ARP (ipv4) or neighbour discovery (ipv6) for (--l2-interface).
# TYPE flowlb_agent_l2_vips gauge
flowlb_agent_l2_vips{family="ipv4"} 1
flowlb_agent_l2_vips{family="ipv6"} 1
`), "flowlb_agent_l2_vips"); err != nil {
		t.Error(err)
	}
}
