package main

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestLBBodyPlainAndFull(t *testing.T) {
	var plain map[string]map[string]any
	if err := json.Unmarshal(lbBody(7, 0, "sub"), &plain); err != nil {
		t.Fatal(err)
	}
	if want := (map[string]any{"name": "bench-7", "vip_subnet_id": "sub"}); !reflect.DeepEqual(plain["loadbalancer"], want) {
		t.Errorf("plain body %v, want %v", plain["loadbalancer"], want)
	}
	var full struct {
		LB struct {
			Listeners []struct {
				Protocol    string         `json:"protocol"`
				DefaultPool map[string]any `json:"default_pool"`
			} `json:"listeners"`
			Pools []struct {
				Name    string `json:"name"`
				Members []struct {
					Address string `json:"address"`
					Port    int    `json:"protocol_port"`
				} `json:"members"`
				HM map[string]any `json:"healthmonitor"`
			} `json:"pools"`
		} `json:"loadbalancer"`
	}
	if err := json.Unmarshal(lbBody(1001, 300, "sub"), &full); err != nil {
		t.Fatal(err)
	}
	lb := full.LB
	if len(lb.Listeners) != 1 || lb.Listeners[0].DefaultPool["name"] != "p" || len(lb.Pools) != 1 || lb.Pools[0].Name != "p" || lb.Pools[0].HM["type"] != "TCP" {
		t.Fatalf("full body: %+v", lb)
	}
	ms := lb.Pools[0].Members
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Address] = true
		if m.Port != 8001 {
			t.Errorf("member port %d, want 8001", m.Port)
		}
	}
	if len(ms) != 300 || len(seen) != 300 || ms[0].Address != "198.18.16.2" || ms[249].Address != "198.18.16.251" || ms[250].Address != "198.18.17.2" {
		t.Errorf("members: %d (%d distinct), first %s", len(ms), len(seen), ms[0].Address)
	}
}

func TestTallyCountsActiveAndFindsErrorsAndTheNextPage(t *testing.T) {
	var p statusPage
	page := `{"loadbalancers": [{"id": "a", "provisioning_status": "ACTIVE"}, {"id": "b", "provisioning_status": "PENDING_CREATE"},
		{"id": "c", "provisioning_status": "ACTIVE"}],
		"loadbalancers_links": [{"href": "http://x/v2/lbaas/loadbalancers?limit=3&marker=a&page_reverse=True", "rel": "previous"},
		{"href": "http://x/v2/lbaas/loadbalancers?limit=3&marker=c", "rel": "next"}]}`
	if err := json.Unmarshal([]byte(page), &p); err != nil {
		t.Fatal(err)
	}
	active, failed, next := tally(p)
	if active != 2 || failed != "" || next != "http://x/v2/lbaas/loadbalancers?limit=3&marker=c" {
		t.Errorf("tally = %d, %q, %q", active, failed, next)
	}
	p.LBs[1].ProvisioningStatus = "ERROR"
	p.Links = p.Links[:1]
	if active, failed, next = tally(p); active != 2 || failed != "b" || next != "" {
		t.Errorf("tally = %d, %q, %q", active, failed, next)
	}
}

func TestPercentileMS(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if p50, p99 := percentileMS(d, 50), percentileMS(d, 99); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %v, p99 %v", p50, p99)
	}
	if d[0] != 100*time.Millisecond {
		t.Error("percentileMS sorted its argument")
	}
}
