package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server"
)

// With --vip-cidr6 the default VIP network has an IPv6 subnet beside the
// IPv4 one, so one load balancer holds a VIP of each family; each VIP
// reaches the agents with the members of its own family.
func TestDualStackLoadBalancer(t *testing.T) {
	c := newCluster(t)
	c.options = func(o *server.Options) {
		o.VIPCIDR6, o.ExternalVIPCIDR6 = "2001:2:0:8000::/65", "2001:2:0:8000:8000::/65"
	}
	a := c.start("a", time.Minute)
	k := newKernel()
	c.startAgent("node-1", k, a.AgentAddr.String())
	// Until the replica knows of the agent, ACTIVE waits for nobody.
	waitAgentSeen(t, a)

	var subs struct {
		Subnets []struct {
			ID        string `json:"id"`
			Name      string `json:"name"`
			NetworkID string `json:"network_id"`
			CIDR      string `json:"cidr"`
			IPVersion int    `json:"ip_version"`
		} `json:"subnets"`
	}
	call(t, a, "GET", "/v2.0/subnets", nil, &subs)
	byName := map[string]string{}
	nets := map[string]string{}
	for _, s := range subs.Subnets {
		byName[s.Name] = s.CIDR
		nets[s.Name] = s.NetworkID
	}
	want := map[string]string{"flowlb-vip-subnet": "198.19.0.0/24", "flowlb-vip-subnet6": "2001:2:0:8000::/65",
		"flowlb-external-subnet": "198.19.128.0/24", "flowlb-external-subnet6": "2001:2:0:8000:8000::/65"}
	for name, cidr := range want {
		if byName[name] != cidr {
			t.Fatalf("subnet %s: %q, want %s (all: %v)", name, byName[name], cidr, byName)
		}
	}
	if nets["flowlb-vip-subnet"] != nets["flowlb-vip-subnet6"] || nets["flowlb-external-subnet"] != nets["flowlb-external-subnet6"] {
		t.Fatalf("IPv6 subnets not on the IPv4 subnets' networks: %v", nets)
	}
	id := func(name string) string {
		for _, s := range subs.Subnets {
			if s.Name == name {
				return s.ID
			}
		}
		return ""
	}

	var lb struct {
		LoadBalancer struct {
			ID             string `json:"id"`
			VIPAddress     string `json:"vip_address"`
			AdditionalVIPs []struct {
				SubnetID  string `json:"subnet_id"`
				IPAddress string `json:"ip_address"`
			} `json:"additional_vips"`
		} `json:"loadbalancer"`
	}
	call(t, a, "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "dual", "vip_subnet_id": id("flowlb-vip-subnet6"),
		"additional_vips": []any{map[string]any{"subnet_id": id("flowlb-vip-subnet")}},
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "allowed_cidrs": []string{"198.18.0.0/15", "2001:2::/48"},
			"default_pool": map[string]any{"name": "pool", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": []any{
				map[string]any{"address": "198.18.17.2", "protocol_port": 8080},
				map[string]any{"address": "2001:2:0:17::2", "protocol_port": 8080},
				map[string]any{"address": "2001:2:0:18::2", "protocol_port": 8080},
			}}}},
	}}, &lb)
	v6, avs := lb.LoadBalancer.VIPAddress, lb.LoadBalancer.AdditionalVIPs
	if !strings.HasPrefix(v6, "2001:2:0:8000::") || len(avs) != 1 || !strings.HasPrefix(avs[0].IPAddress, "198.19.0.") {
		t.Fatalf("VIPs %s %+v", v6, avs)
	}
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)
	if got := k.backends(v6); !slices.Equal(sorted(got), []string{"2001:2:0:17::2", "2001:2:0:18::2"}) {
		t.Fatalf("IPv6 VIP %s backends %v", v6, got)
	}
	if got := k.backends(avs[0].IPAddress); !slices.Equal(got, []string{"198.18.17.2"}) {
		t.Fatalf("IPv4 VIP %s backends %v", avs[0].IPAddress, got)
	}

	// Octavia's refusals of additional VIPs: a subnet of another network
	// (the external IPv6 one), a subnet that does not exist.
	const missing = "00000000-0000-0000-0000-0000000000ff"
	for _, tc := range []struct{ subnet, want string }{
		{id("flowlb-external-subnet6"), "Validation failure: All VIP subnets must belong to the same network."},
		{missing, "Validation failure: Subnet " + missing + " not found"},
	} {
		body, _ := json.Marshal(map[string]any{"loadbalancer": map[string]any{
			"vip_subnet_id": id("flowlb-vip-subnet"), "additional_vips": []any{map[string]any{"subnet_id": tc.subnet}},
		}})
		resp, err := http.Post("http://"+a.APIAddr.String()+"/v2/lbaas/loadbalancers", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var fault struct {
			Faultstring string `json:"faultstring"`
		}
		err = json.NewDecoder(resp.Body).Decode(&fault)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 400 || fault.Faultstring != tc.want {
			t.Fatalf("additional VIP on %s: %d %q %v, want 400 %q", tc.subnet, resp.StatusCode, fault.Faultstring, err, tc.want)
		}
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }

// A --vip-cidr6 that is not IPv6 (or a --vip-cidr that is) stops the
// server at start, before anything is created.
func TestVIPCIDRFamilyChecked(t *testing.T) {
	for _, o := range []server.Options{{VIPCIDR6: "198.19.0.0/24"}, {ExternalVIPCIDR: "2001:2:0:8000::/65"}} {
		dir := t.TempDir()
		o.Listen, o.AgentListen, o.DataDir, o.AgentTokenFile = "127.0.0.1:0", "127.0.0.1:0", dir, filepath.Join(dir, "agent-token")
		s, err := server.Start(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil {
			s.Crash()
			t.Fatalf("%+v: started", o)
		}
		if !strings.Contains(err.Error(), "not an IPv") {
			t.Fatalf("%+v: %v", o, err)
		}
	}
}

// --network neutron-api without Keystone (or a Neutron endpoint) stops
// the server at start, naming what it needs; the default VIP subnets of
// the embedded subset are not made.
func TestNeutronAPINeedsKeystone(t *testing.T) {
	dir := t.TempDir()
	o := server.Options{Network: "neutron-api", Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", DataDir: dir,
		AgentTokenFile: filepath.Join(dir, "agent-token"), VIPCIDR: "198.19.0.0/17"}
	s, err := server.Start(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		_ = s.Shutdown(context.Background())
		t.Fatal("started without Keystone")
	}
	if !strings.Contains(err.Error(), "--keystone-url") {
		t.Fatalf("error %q does not name --keystone-url", err)
	}
}
