package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The L2 ranges of TestL2Announcements: within the external VIP ranges,
// on-link for the router (a client on the nodes' segment).
var (
	l2Range4 = netip.MustParsePrefix("198.19.250.0/24")
	l2Range6 = netip.MustParsePrefix("2001:2:0:c000::fa00/120")
)

// TestL2Announcements: on a flat network (the router, on the nodes'
// fabric, routes the L2 ranges on-link and so asks ARP and neighbour
// discovery for their VIPs), one node answers for a VIP, in both
// families, and says so in its agent's /status, agent dump and the
// dashboard; when that node dies (links cut) another takes the VIP over
// with a gratuitous ARP and an unsolicited advertisement, and the
// router's connections reach the VIP again. The time is reported, not
// asserted (docs/benchmarks.md). The new owner's /status lists the VIP;
// the cut node's agent, still running, lets it go at its lease's end
// and says so, and is then killed.
func TestL2Announcements(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 3, pods: 1, serverArgs: append(ipv6ServerArgs(), "--l2-cidrs", l2Range4.String()+","+l2Range6.String()),
		agentArgs: []string{"--l2-interface", "eth0"}})
	l := c.lab
	rh, err := l.Router().Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	reth, err := rh.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{l2Range4, l2Range6} {
		dst := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		if err := rh.RouteReplace(&netlink.Route{LinkIndex: reth.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatal(err)
		}
	}
	macs := map[string]int{}
	for i := 1; i <= 3; i++ {
		h, err := l.Node(i).Netlink()
		if err != nil {
			t.Fatal(err)
		}
		eth, err := h.LinkByName("eth0")
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		macs[eth.Attrs().HardwareAddr.String()] = i
	}
	// ownerOf: the node whose MAC the router resolved v to (0: none).
	ownerOf := func(v netip.Addr) (int, string) {
		fam := netlink.FAMILY_V4
		if v.Is6() {
			fam = netlink.FAMILY_V6
		}
		ns, err := rh.NeighList(reth.Attrs().Index, fam)
		if err != nil {
			return 0, err.Error()
		}
		for _, n := range ns {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == v {
				return macs[n.HardwareAddr.String()], fmt.Sprintf("%s %s", n.HardwareAddr, neighState(n.State))
			}
		}
		return 0, "no entry"
	}

	vip4, vip6 := netip.MustParseAddr("198.19.250.10"), netip.MustParseAddr("2001:2:0:c000::fa10")
	member := func(p lab.Host) []any {
		a6, _ := lab.Twin6(p.Addr)
		return []any{map[string]any{"address": p.Addr.String(), "protocol_port": 8080, "name": p.Name},
			map[string]any{"address": a6.String(), "protocol_port": 8080, "name": p.Name + "-6"}}
	}
	var members []any
	for i := 1; i <= 3; i++ {
		members = append(members, member(l.Pod(i, 1))...)
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "l2", "vip_subnet_id": c.subnet("flowlb-external-subnet"), "vip_address": vip4.String(),
		"additional_vips": []any{map[string]any{"subnet_id": c.subnet("flowlb-external-subnet6"), "ip_address": vip6.String()}},
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP_PORT", "members": members}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	addr4, addr6 := net.JoinHostPort(vip4.String(), "80"), net.JoinHostPort(vip6.String(), "80")
	for _, a := range []string{addr4, addr6} {
		testutil.Eventually(t, 10*time.Second, "the router reaches "+a+" on-link", func() (bool, string) {
			_, err := ask(l.Router(), a)
			return err == nil, fmt.Sprint(err)
		})
	}
	owner4, st4 := ownerOf(vip4)
	owner6, st6 := ownerOf(vip6)
	if owner4 == 0 || owner6 == 0 {
		t.Fatalf("the router resolved %s to %s and %s to %s: want a node's MAC each", vip4, st4, vip6, st6)
	}
	t.Logf("%s answered by n%d, %s by n%d", vip4, owner4, vip6, owner6)
	// Each owner's agent says it answers for its VIP, the others do not.
	waitL2(t, l, 10*time.Second, "the owners' /status", map[netip.Addr]int{vip4: owner4, vip6: owner6}, nil)
	var out bytes.Buffer
	if err := l.Node(owner4).Run(context.Background(), nil, &out, &out, flowlb(t), "agent", "dump"); err != nil {
		t.Fatalf("dump: %v\n%s", err, out.String())
	}
	for _, want := range []string{"l2: ARP and NDP on eth0, ", "l2:   " + vip4.String() + " ARP since "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dump on n%d lacks %q:\n%s", owner4, want, out.String())
		}
	}
	t.Logf("agent dump on n%d:\n%s", owner4, out.String())
	// The dashboard shows each VIP on its owner's row.
	testutil.Eventually(t, 10*time.Second, "the L2 VIPs on the dashboard", func() (bool, string) {
		code, body := c.call("GET", "/dashboard/api/state", nil)
		got := map[string]bool{}
		agents, _ := body["agents"].([]any)
		for _, a := range agents {
			vips, _ := a.(map[string]any)["l2"].([]any)
			for _, v := range vips {
				got[fmt.Sprint(a.(map[string]any)["node"], " ", v)] = true
			}
		}
		return code == 200 && got[lab.NodeName(owner4)+" "+vip4.String()] && got[lab.NodeName(owner6)+" "+vip6.String()], fmt.Sprintf("%d: %v", code, agents)
	})
	// The API says so too (what the kube-controller's ingress gate reads).
	_, ann := c.call("GET", "/v2/lbaas/loadbalancers/"+lb["id"].(string)+"/announcements", nil)
	want := map[string]string{vip4.String(): lab.NodeName(owner4), vip6.String(): lab.NodeName(owner6)}
	for _, x := range dig(ann, "announcements", "addresses") {
		a := x.(map[string]any)
		if w, ok := want[a["address"].(string)]; ok {
			if nodes, _ := a["nodes"].([]any); len(nodes) != 1 || nodes[0] != w || a["in_announced_ranges"] != true {
				t.Errorf("announcements of %s: %v, want [%s] in the ranges", a["address"], a, w)
			}
			delete(want, a["address"].(string))
		}
	}
	if len(want) > 0 {
		t.Errorf("announcements %v miss %v", ann, want)
	}

	// The dying node's own pod leaves the pool first, so that every
	// connection after the failover has a live backend.
	dead := owner4
	var keep []any
	for i := 1; i <= 3; i++ {
		if i != dead {
			keep = append(keep, member(l.Pod(i, 1))...)
		}
	}
	pool := lb["listeners"].([]any)[0].(map[string]any)["default_pool_id"]
	if pool == nil {
		_, lbs := c.call("GET", "/v2/lbaas/pools?loadbalancer_id="+lb["id"].(string), nil)
		pool = lbs["pools"].([]any)[0].(map[string]any)["id"]
	}
	if code, body := c.call("PUT", fmt.Sprintf("/v2/lbaas/pools/%s/members", pool), map[string]any{"members": keep}); code != 202 {
		t.Fatalf("batch member update: %d %v", code, body)
	}
	c.waitActive(lb["id"].(string))

	cut := cutNode(t, l, dead)
	var back time.Time
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("the router reaching %s again after n%d died", addr4, dead), func() (bool, string) {
		if _, err := l.Router().Ask(t.Context(), addr4, 200*time.Millisecond); err != nil {
			return false, err.Error()
		}
		back = time.Now()
		return true, ""
	})
	now4, st := ownerOf(vip4)
	if now4 == dead || now4 == 0 {
		t.Errorf("after the failover the router resolves %s to %s (n%d), want a live node", vip4, st, now4)
	}
	t.Logf("L2 failover: %s answered again %v after n%d's links were cut, by n%d", vip4, back.Sub(cut).Round(time.Millisecond), dead, now4)
	// Every new connection is answered, in both families.
	for _, a := range []string{addr4, addr6} {
		testutil.Eventually(t, 30*time.Second, "the router reaching "+a, func() (bool, string) {
			_, err := ask(l.Router(), a)
			return err == nil, fmt.Sprint(err)
		})
		for range 10 {
			if _, err := ask(l.Router(), a); err != nil {
				t.Fatalf("router -> %s after the failover: %v", a, err)
			}
		}
	}
	if n, _ := ownerOf(vip6); n == dead {
		t.Errorf("%s still resolved to the dead n%d", vip6, dead)
	}
	// The new owner says it answers for vip4, the other live node does
	// not; the cut node's agent (its loopback still up) has let its VIPs
	// go at its lease's end and says why.
	waitL2(t, l, 10*time.Second, "the new owner's /status", map[netip.Addr]int{vip4: now4}, []int{dead})
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("n%d's lease ended, no VIP answered", dead), func() (bool, string) {
		s, err := agentStatusOf(l.Node(dead))
		if err != nil || s.L2 == nil {
			return false, fmt.Sprint(err)
		}
		return len(s.L2.VIPs) == 0 && s.L2.Lease != nil && s.L2.Lease.Ended, fmt.Sprintf("%+v lease %+v", s.L2, s.L2.Lease)
	})
	if s, err := agentStatusOf(l.Node(dead)); err == nil && s.L2 != nil {
		var b strings.Builder
		s.L2.Write(&b)
		t.Logf("n%d's agent, cut off:\n%s", dead, b.String())
	}
	if err := l.Node(dead).Kill("agent", unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// waitL2 waits until the /status of each node's agent but those of skip
// lists the VIPs of owners it owns, with the family's protocol, and none
// it does not own; an owner's also counts an announcement sent.
func waitL2(t *testing.T, l *lab.Lab, within time.Duration, what string, owners map[netip.Addr]int, skip []int) {
	t.Helper()
	testutil.Eventually(t, within, what, func() (bool, string) {
		for i := 1; i <= len(l.Nodes()); i++ {
			if slices.Contains(skip, i) {
				continue
			}
			s, err := agentStatusOf(l.Node(i))
			if err != nil {
				return false, fmt.Sprintf("n%d: %v", i, err)
			}
			if s.L2 == nil || s.L2.Interface != "eth0" || s.L2.ListAt == "" || s.L2.Lease != nil {
				return false, fmt.Sprintf("n%d: %+v", i, s.L2)
			}
			answered := map[string]string{}
			for _, v := range s.L2.VIPs {
				answered[v.VIP] = v.By
			}
			for v, o := range owners {
				by, ok := answered[v.String()]
				want := map[bool]string{true: "arp", false: "ndp"}[v.Is4()]
				if o == i && (!ok || by != want || s.L2.Sent.GratuitousARP+s.L2.Sent.UnsolicitedNA == 0) {
					return false, fmt.Sprintf("n%d owns %s: %+v", i, v, s.L2)
				}
				if o != i && ok {
					return false, fmt.Sprintf("n%d answers for %s, n%d's: %+v", i, v, o, s.L2)
				}
			}
		}
		return true, ""
	})
}

func neighState(s int) string {
	switch {
	case s&netlink.NUD_REACHABLE != 0:
		return "REACHABLE"
	case s&netlink.NUD_STALE != 0:
		return "STALE"
	case s&netlink.NUD_DELAY != 0:
		return "DELAY"
	case s&netlink.NUD_PROBE != 0:
		return "PROBE"
	case s&netlink.NUD_FAILED != 0:
		return "FAILED"
	case s&netlink.NUD_INCOMPLETE != 0:
		return "INCOMPLETE"
	}
	return fmt.Sprint(s)
}
