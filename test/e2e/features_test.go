package e2e

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// askUDP sends one datagram on the connected UDP socket c and parses the
// reply.
func askUDP(c net.Conn) (echo.Reply, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return echo.Reply{}, err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return echo.Reply{}, err
	}
	return echo.Parse(strings.TrimSpace(string(buf[:n])))
}

// TestListenerFeaturesOnLab drives, through the API and every node's
// agent, what a listener and pool can ask of the flows: SOURCE_IP
// persistence holds a client on one member, with allowed_cidrs (port 80)
// and without (port 81); allowed_cidrs drops other sources; and a UDP
// listener keeps a client's flow working when the member serving it is
// deleted (on nftables the same socket moves; on eBPF it is destroyed,
// and a socket dialled again reaches a member left), and sends new flows
// elsewhere. On eBPF the socket programs
// carry ports 81 and 53 and nftables port 80 (the programs do not see a
// source address at connect(): docs/dataplane.md), which the nodes'
// pinned maps show.
func TestListenerFeaturesOnLab(t *testing.T) {
	c := newCluster(t, 2, 3)
	members := []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(1, 2), c.lab.Pod(2, 1)}
	allowed, blocked := c.lab.Pod(2, 2), c.lab.Pod(2, 3)
	var tcpMembers, udpMembers []any
	for _, p := range members {
		node, _, _ := strings.Cut(p.Name, "-")
		tags := []string{"flowlb:node=" + node}
		tcpMembers = append(tcpMembers, map[string]any{"address": p.Addr.String(), "protocol_port": 8080, "name": p.Name, "tags": tags})
		udpMembers = append(udpMembers, map[string]any{"address": p.Addr.String(), "protocol_port": 9090, "name": p.Name, "tags": tags})
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "features", "vip_subnet_id": c.subnet("flowlb-vip-subnet"), "listeners": []any{
			map[string]any{"protocol": "TCP", "protocol_port": 80, "allowed_cidrs": []string{allowed.Addr.String() + "/32", c.lab.Pod(1, 3).Addr.String() + "/32"},
				"default_pool": map[string]any{"name": "tcp", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
					"session_persistence": map[string]any{"type": "SOURCE_IP", "persistence_timeout": 60}, "members": tcpMembers}},
			map[string]any{"protocol": "TCP", "protocol_port": 81,
				"default_pool": map[string]any{"name": "persist", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
					"session_persistence": map[string]any{"type": "SOURCE_IP", "persistence_timeout": 60}, "members": tcpMembers}},
			map[string]any{"protocol": "UDP", "protocol_port": 53,
				"default_pool": map[string]any{"name": "udp", "protocol": "UDP", "lb_algorithm": "SOURCE_IP_PORT", "members": udpMembers}},
		}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	lbID, vipAddr := lb["id"].(string), lb["vip_address"].(string)
	vip, vipOpen := net.JoinHostPort(vipAddr, "80"), net.JoinHostPort(vipAddr, "81")
	if c.lab.Dataplane() == lab.DataplaneEBPF {
		key := func(port uint16, p flows.Protocol) flows.Key {
			return flows.Key{VIP: netip.MustParseAddr(vipAddr), Protocol: p, Port: port}
		}
		for i := 1; i <= 2; i++ {
			svcs := c.bpfServices(i)
			if s, ok := svcs[key(81, flows.TCP)]; !ok || s.Algorithm != flows.RoundRobin || s.Persistence != time.Minute || len(s.Backends) != 3 {
				t.Errorf("n%d's pinned map: port 81 %+v (present %v), want ROUND_ROBIN with SOURCE_IP persistence of 60 s over 3 backends", i, s, ok)
			}
			if s, ok := svcs[key(53, flows.UDP)]; !ok || len(s.Backends) != 3 {
				t.Errorf("n%d's pinned map: UDP port 53 %+v (present %v), want 3 backends", i, s, ok)
			}
			if _, ok := svcs[key(80, flows.TCP)]; ok {
				t.Errorf("n%d's pinned map holds port 80, whose allowed_cidrs only nftables can apply", i)
			}
		}
	}

	// Persistence: every new connection of a client lands on one member,
	// from either node, with allowed_cidrs and without.
	for _, to := range []string{vip, vipOpen} {
		for _, from := range []lab.Host{allowed, c.lab.Pod(1, 3)} {
			seen := map[string]int{}
			for range 20 {
				r, err := ask(from, to)
				if err != nil {
					t.Fatalf("%s -> %s: %v", from.Name, to, err)
				}
				seen[r.Pod]++
			}
			if len(seen) != 1 {
				t.Errorf("SOURCE_IP persistence: %s -> %s reached %v, want one member", from.Name, to, seen)
			}
		}
	}
	// allowed_cidrs: another source gets nothing, and reaches the
	// listener without allowed_cidrs.
	if r, err := blocked.Ask(context.Background(), vip, time.Second); err == nil {
		t.Errorf("%s is outside allowed_cidrs but reached %s", blocked.Name, r.Pod)
	}
	if _, err := blocked.Ask(context.Background(), vipOpen, 3*time.Second); err != nil {
		t.Errorf("%s -> %s (no allowed_cidrs): %v", blocked.Name, vipOpen, err)
	}

	// UDP: one socket (one 5-tuple) keeps working when its member goes.
	conn, err := allowed.Dial(context.Background(), "udp", net.JoinHostPort(vipAddr, "53"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { conn.Close() }() // conn is dialled again on eBPF
	first, err := askUDP(conn)
	if err != nil {
		t.Fatalf("UDP through the VIP: %v", err)
	}
	var pool string
	for _, p := range lb["pools"].([]any) {
		if p := p.(map[string]any); p["name"] == "udp" {
			pool = p["id"].(string)
		}
	}
	if pool == "" {
		// The LB body lists pools by id only: find the UDP pool by name.
		_, pb := c.call("GET", "/v2/lbaas/pools?name=udp", nil)
		pool = pb["pools"].([]any)[0].(map[string]any)["id"].(string)
	}
	_, mb := c.call("GET", "/v2/lbaas/pools/"+pool+"/members?name="+first.Pod, nil)
	victim := mb["members"].([]any)[0].(map[string]any)["id"].(string)
	if code, _ := c.call("DELETE", "/v2/lbaas/pools/"+pool+"/members/"+victim, nil); code != 204 {
		t.Fatalf("delete member: %d", code)
	}
	c.waitActive(lbID)
	// New flows go to the members left.
	for range 10 {
		fresh, err := allowed.Dial(context.Background(), "udp", net.JoinHostPort(vipAddr, "53"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := askUDP(fresh)
		fresh.Close()
		if err != nil {
			t.Fatalf("UDP on a new socket after a member was deleted: %v", err)
		}
		if r.Pod == first.Pod {
			t.Errorf("a new UDP socket reached deleted member %s", first.Pod)
		}
	}
	if c.lab.Dataplane() == lab.DataplaneEBPF {
		// The programs translated this connected socket once, at
		// connect(), to the member now deleted; the agent destroyed it
		// before it acknowledged the change (docs/dataplane.md, "Sockets
		// of a backend that leaves"): its next write fails, and the
		// application dials again, through the VIP, to a member left.
		// On nftables the same socket goes on, its conntrack entry
		// flushed and its next datagram picked again (below).
		_, err := askUDP(conn)
		if !errors.Is(err, syscall.EDESTADDRREQ) && !errors.Is(err, syscall.ECONNABORTED) {
			t.Fatalf("on eBPF, the connected UDP socket of deleted member %s: %v, want it destroyed (EDESTADDRREQ or ECONNABORTED)", first.Pod, err)
		}
		conn.Close()
		if conn, err = allowed.Dial(context.Background(), "udp", net.JoinHostPort(vipAddr, "53")); err != nil {
			t.Fatal(err)
		}
		t.Logf("eBPF: the connected UDP socket of deleted member %s was destroyed; dialled again", first.Pod)
	}
	next, err := askUDP(conn)
	if err != nil {
		t.Fatalf("UDP after its member was deleted: %v (the flow was black-holed)", err)
	}
	if next.Pod == first.Pod {
		t.Errorf("UDP still reaches deleted member %s", first.Pod)
	}
}
