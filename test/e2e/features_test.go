package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
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
// persistence holds a client on one member, allowed_cidrs drops other
// sources, and a UDP listener keeps a client's flow working when the
// member serving it is deleted.
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
			map[string]any{"protocol": "UDP", "protocol_port": 53,
				"default_pool": map[string]any{"name": "udp", "protocol": "UDP", "lb_algorithm": "SOURCE_IP_PORT", "members": udpMembers}},
		}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	lbID, vipAddr := lb["id"].(string), lb["vip_address"].(string)
	vip := net.JoinHostPort(vipAddr, "80")

	// Persistence: every new connection of a client lands on one member,
	// from either node.
	for _, from := range []lab.Host{allowed, c.lab.Pod(1, 3)} {
		seen := map[string]int{}
		for range 20 {
			r, err := ask(from, vip)
			if err != nil {
				t.Fatalf("%s -> %s: %v", from.Name, vip, err)
			}
			seen[r.Pod]++
		}
		if len(seen) != 1 {
			t.Errorf("SOURCE_IP persistence: %s reached %v, want one member", from.Name, seen)
		}
	}
	// allowed_cidrs: another source gets nothing.
	if r, err := blocked.Ask(context.Background(), vip, time.Second); err == nil {
		t.Errorf("%s is outside allowed_cidrs but reached %s", blocked.Name, r.Pod)
	}

	// UDP: one socket (one 5-tuple) keeps working when its member goes.
	conn, err := allowed.Dial(context.Background(), "udp", net.JoinHostPort(vipAddr, "53"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
	next, err := askUDP(conn)
	if err != nil {
		t.Fatalf("UDP after its member was deleted: %v (the flow was black-holed)", err)
	}
	if next.Pod == first.Pod {
		t.Errorf("UDP still reaches deleted member %s", first.Pod)
	}
}
