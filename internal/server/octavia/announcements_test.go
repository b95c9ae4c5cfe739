package octavia

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"reflect"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
)

// TestAnnouncementsRoute: flowlb's extension answers, for a load
// balancer the caller may see, who announces each of its addresses, in
// sorted order; another project's load balancer is refused as showing it
// is, one that does not exist is 404; and
// without an announcer the path is answered as Octavia answers it.
func TestAnnouncementsRoute(t *testing.T) {
	var asked []string
	a := newAPIConfig(t, flow.Immediate{}, Config{Announced: func(id string) Announced {
		asked = append(asked, id)
		return Announced{Addresses: map[netip.Addr][]string{
			netip.MustParseAddr("2001:2::5"):    {"n2", "n1"},
			netip.MustParseAddr("198.19.128.2"): nil,
		}, InRanges: map[netip.Addr]bool{netip.MustParseAddr("2001:2::5"): true}, Announcing: 2, Unseen: 1}
	}})
	_, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID}})
	id := body["loadbalancer"].(map[string]any)["id"].(string)
	a.waitActive(id)

	code, got := a.do("GET", "/v2/lbaas/loadbalancers/"+id+"/announcements", nil)
	want := map[string]any{}
	_ = json.Unmarshal([]byte(`{"announcements": {"addresses": [
		{"address": "198.19.128.2", "nodes": [], "in_announced_ranges": false},
		{"address": "2001:2::5", "nodes": ["n1", "n2"], "in_announced_ranges": true}], "announcing_nodes": 2, "unseen_nodes": 1}}`), &want)
	if code != http.StatusOK || !reflect.DeepEqual(got, want) {
		t.Errorf("GET announcements: %d %v, want 200 %v", code, got, want)
	}
	if len(asked) != 1 || asked[0] != id {
		t.Errorf("the announcer was asked for %q, want [%s]", asked, id)
	}
	if code, _ := a.do("GET", "/v2/lbaas/loadbalancers/00000000-0000-0000-0000-000000000000/announcements", nil); code != http.StatusNotFound {
		t.Errorf("a load balancer that does not exist: %d, want 404", code)
	}

	// Held to policy: another project's caller is told nothing.
	srv := rbacAPIConfig(t, identity.Advanced, Config{Announced: func(id string) Announced {
		asked = append(asked, id)
		return Announced{}
	}})
	member := who{"a", "load-balancer_member"}
	code, body = call(t, srv, member, "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, body)
	}
	theirs := body["loadbalancer"].(map[string]any)["id"].(string)
	other := who{"b", "load-balancer_member"}
	show, _ := call(t, srv, other, "GET", "/v2/lbaas/loadbalancers/"+theirs, nil)
	if code, _ := call(t, srv, other, "GET", "/v2/lbaas/loadbalancers/"+theirs+"/announcements", nil); code != show || code < 400 {
		t.Errorf("another project's load balancer: %d, want what showing it answers (%d), a refusal", code, show)
	}
	if code, _ := call(t, srv, who{"a", "load-balancer_observer"}, "GET", "/v2/lbaas/loadbalancers/"+theirs+"/announcements", nil); code != http.StatusOK {
		t.Errorf("the project's observer: %d, want 200", code)
	}
	if len(asked) != 2 {
		t.Errorf("the announcer was asked %q: once more for the project's own observer, never for another project", asked)
	}

	plain := newAPI(t)
	_, body = plain.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID}})
	id = body["loadbalancer"].(map[string]any)["id"].(string)
	if code, _ := plain.do("GET", "/v2/lbaas/loadbalancers/"+id+"/announcements", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("without an announcer: %d, want Octavia's 405 for a path it does not serve", code)
	}
}
