package fanout_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestNoProbesAgent: an agent whose Hello says it takes no probes (an
// OVN data plane's) is given no member to probe and no L2 VIP, by the
// replica it streams to and by the others, which learn it from the
// store; even a member on its own node goes to another agent, and with
// no other agent, nobody probes and nobody answers.
func TestNoProbesAgent(t *testing.T) {
	tr := tree("a", "198.19.250.1")
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		m := &lbaas.Member{Base: lbaas.Base{ID: id, AdminStateUp: true}, PoolID: "a-pool", Address: "198.18.17.9", ProtocolPort: 80, Weight: 1}
		m.Tags = []string{flows.TagNodePrefix + "ovn"}
		tr.Members = append(tr.Members, m)
	}
	tr.Monitors = []*lbaas.HealthMonitor{{Base: lbaas.Base{ID: "hm", AdminStateUp: true}, PoolID: "a-pool", Type: "TCP",
		Delay: 1, Timeout: 1, MaxRetries: 1, MaxRetriesDown: 2}}
	w := newWorld(memstore.New(), tr)
	l2 := func(o *fanout.Options) { o.L2Ranges = []netip.Prefix{netip.MustParsePrefix("198.19.250.0/24")} }
	hub1, addr1, _ := serveOpts(t, w, "r1", 5*time.Second, l2)
	hub2, addr2, _ := serveOpts(t, w, "r2", 5*time.Second, l2)
	vip := netip.MustParseAddr("198.19.250.1")

	rawSubscribeHello(t, addr1, &agentv1.Hello{Node: "ovn", NoProbes: true})
	waitAgents(t, hub1, 1, 5*time.Second)
	for _, hub := range []*fanout.Hub{hub1, hub2} {
		testutil.Eventually(t, 5*time.Second, "the probe-less agent alone: nobody probes, nobody answers", func() (bool, string) {
			p, o := hub.Probers(), hub.L2Owners()
			// An unowned member or VIP has no entry at all.
			_, owned := o[vip]
			return len(p) == 0 && !owned, fmt.Sprint(p, o)
		})
	}

	// Another agent comes, on the other replica: it takes everything,
	// on both replicas' reckoning.
	rawSubscribe(t, addr2, "n1")
	for _, hub := range []*fanout.Hub{hub1, hub2} {
		testutil.Eventually(t, 5*time.Second, "every member and the VIP with n1", func() (bool, string) {
			p, o := hub.Probers(), hub.L2Owners()
			return p["m1"] == "n1" && p["m2"] == "n1" && p["m3"] == "n1" && p["m4"] == "n1" && o[vip] == "n1", fmt.Sprint(p, o)
		})
	}

	// A third agent, without the flag, on the probe-less agent's
	// replica: the members spread over the two that probe.
	rawSubscribe(t, addr1, "plain")
	for _, hub := range []*fanout.Hub{hub1, hub2} {
		testutil.Eventually(t, 5*time.Second, "members spread over n1 and plain only", func() (bool, string) {
			p, o := hub.Probers(), hub.L2Owners()
			spread := map[string]int{}
			for _, n := range p {
				spread[n]++
			}
			return spread["ovn"] == 0 && spread[""] == 0 && spread["n1"]+spread["plain"] == 4 && o[vip] != "ovn" && o[vip] != "",
				fmt.Sprint(p, o)
		})
	}
}
