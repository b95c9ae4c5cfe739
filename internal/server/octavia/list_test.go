package octavia

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
)

func TestUnknownFilterOnEmptyList(t *testing.T) {
	a := newAPI(t)
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/v2/lbaas/loadbalancers?bogus=1", 400},
		{"/v2/lbaas/loadbalancers?vip_address=198.19.0.1", 200},
		{"/v2/lbaas/listeners?loadbalancer_id=x", 200},
		{"/v2/lbaas/pools?sort=bogus", 400},
		{"/v2/lbaas/flavors?enabled=true", 200},
		{"/v2/lbaas/healthmonitors?nope=1", 400},
	} {
		if code, body := a.do("GET", tc.path, nil); code != tc.code {
			t.Errorf("GET %s: %d %v, want %d", tc.path, code, body, tc.code)
		}
	}
}

func TestListQueries(t *testing.T) {
	a := newAPI(t)
	var ids []string
	for i, tags := range [][]string{{"red"}, {"red", "blue"}, {"blue"}, {}, {"green"}} {
		code, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
			"name": fmt.Sprintf("lb-%d", i%3), "vip_subnet_id": subnetID, "tags": tags, "admin_state_up": i != 4}})
		if code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["loadbalancer"].(map[string]any)["id"].(string)
		ids = append(ids, id)
		a.waitActive(id)
	}
	names := func(body map[string]any) string {
		var out []string
		for _, x := range body["loadbalancers"].([]any) {
			out = append(out, x.(map[string]any)["name"].(string))
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		query string
		want  string // names in order, or "400"
	}{
		{"", "lb-0,lb-1,lb-2,lb-0,lb-1"},
		{"name=lb-1", "lb-1,lb-1"},
		{"name=lb-1&name=lb-2", "lb-1,lb-2,lb-1"},
		{"name=lb-1&admin_state_up=false", "lb-1"},
		{"admin_state_up=True", "lb-0,lb-1,lb-2,lb-0"},
		{"tags=red", "lb-0,lb-1"},
		{"tags=red,blue", "lb-1"},
		{"tags-any=red,green", "lb-0,lb-1,lb-1"},
		{"not-tags=red", "lb-2,lb-0,lb-1"},
		{"not-tags-any=red&not-tags-any=blue", "lb-0,lb-1"},
		{"sort=name:desc,created_at:asc", "lb-2,lb-1,lb-1,lb-0,lb-0"},
		{"sort_key=name&sort_dir=asc", "lb-0,lb-0,lb-1,lb-1,lb-2"},
		{"id=" + ids[2], "lb-2"},
		{"id=" + ids[2] + "&name=lb-2", "lb-2"},
		{"id=" + ids[2] + "&name=lb-1", ""},
		{"bogus=1", "400"},
		{"sort=bogus", "400"},
		{"sort=name:sideways", "400"},
		{"marker=00000000-0000-0000-0000-00000000dead", "400"},
		{"limit=x", "400"},
	} {
		code, body := a.do("GET", "/v2/lbaas/loadbalancers?"+tc.query, nil)
		if tc.want == "400" {
			if code != 400 || body["faultcode"] != "Client" {
				t.Errorf("?%s: %d %v, want a 400 fault", tc.query, code, body)
			}
			continue
		}
		if code != 200 || names(body) != tc.want {
			t.Errorf("?%s: %d %q, want %q", tc.query, code, names(body), tc.want)
		}
	}

	// A renamed load balancer is found by its new name only.
	if code, body := a.do("PUT", "/v2/lbaas/loadbalancers/"+ids[2], map[string]any{"loadbalancer": map[string]any{"name": "lb-9"}}); code != 200 {
		t.Fatalf("rename: %d %v", code, body)
	}
	a.waitActive(ids[2])
	for query, want := range map[string]string{"name=lb-2": "", "name=lb-9": "lb-9", "name=lb-9&id=" + ids[2]: "lb-9"} {
		if _, body := a.do("GET", "/v2/lbaas/loadbalancers?"+query, nil); names(body) != want {
			t.Errorf("after the rename, ?%s: %q, want %q", query, names(body), want)
		}
	}
	if code, body := a.do("PUT", "/v2/lbaas/loadbalancers/"+ids[2], map[string]any{"loadbalancer": map[string]any{"name": "lb-2"}}); code != 200 {
		t.Fatalf("rename back: %d %v", code, body)
	}
	a.waitActive(ids[2])

	// Paging forward through next links visits every LB once, in order; a
	// full last page still links to an empty one, as Octavia does.
	var seen []string
	next := "/v2/lbaas/loadbalancers?limit=2"
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		_, body := a.do("GET", next, nil)
		for _, x := range body["loadbalancers"].([]any) {
			seen = append(seen, x.(map[string]any)["id"].(string))
		}
		next = ""
		for _, l := range body["loadbalancers_links"].([]any) {
			if l.(map[string]any)["rel"] == "next" {
				u, _ := url.Parse(l.(map[string]any)["href"].(string))
				next = u.RequestURI()
			}
		}
	}
	if strings.Join(seen, ",") != strings.Join(ids, ",") {
		t.Errorf("paged ids %v, want %v", seen, ids)
	}
	// page_reverse with a marker gives the page before it, with a previous link.
	_, body := a.do("GET", "/v2/lbaas/loadbalancers?limit=2&page_reverse=True&marker="+ids[4], nil)
	got := []string{}
	for _, x := range body["loadbalancers"].([]any) {
		got = append(got, x.(map[string]any)["id"].(string))
	}
	if strings.Join(got, ",") != ids[2]+","+ids[3] {
		t.Errorf("reverse page %v, want %v", got, ids[2:4])
	}
	rels := []string{}
	for _, l := range body["loadbalancers_links"].([]any) {
		rels = append(rels, l.(map[string]any)["rel"].(string))
	}
	sort.Strings(rels)
	if strings.Join(rels, ",") != "next,previous" {
		t.Errorf("links %v", rels)
	}
	// fields= selects keys on lists and on show.
	_, body = a.do("GET", "/v2/lbaas/loadbalancers?fields=id&fields=name", nil)
	if m := body["loadbalancers"].([]any)[0].(map[string]any); len(m) != 2 || m["id"] == nil || m["name"] == nil {
		t.Errorf("fields on list: %v", m)
	}
	_, body = a.do("GET", "/v2/lbaas/loadbalancers/"+ids[0]+"?fields=provisioning_status", nil)
	if m := body["loadbalancer"].(map[string]any); len(m) != 1 || m["provisioning_status"] != "ACTIVE" {
		t.Errorf("fields on show: %v", m)
	}
}

// TestNarrowedLists: lists filtered to one load balancer (by id, name or
// loadbalancer_id) answer exactly its objects.
func TestNarrowedLists(t *testing.T) {
	a := newAPI(t)
	ids := map[string]string{}
	for _, name := range []string{"lb-a", "lb-b"} {
		code, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
			"name": name, "vip_subnet_id": subnetID, "listeners": []any{map[string]any{"name": name + "-l", "protocol": "TCP", "protocol_port": 80,
				"default_pool": map[string]any{"name": name + "-p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}}}})
		if code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		ids[name] = body["loadbalancer"].(map[string]any)["id"].(string)
		a.waitActive(ids[name])
	}
	for _, tc := range []struct{ path, key, wantName string }{
		{"/v2/lbaas/loadbalancers?name=lb-b", "loadbalancers", "lb-b"},
		{"/v2/lbaas/loadbalancers?id=" + ids["lb-a"], "loadbalancers", "lb-a"},
		{"/v2/lbaas/listeners?loadbalancer_id=" + ids["lb-b"], "listeners", "lb-b-l"},
		{"/v2/lbaas/pools?loadbalancer_id=" + ids["lb-a"], "pools", "lb-a-p"},
	} {
		code, body := a.do("GET", tc.path, nil)
		items, _ := body[tc.key].([]any)
		if code != 200 || len(items) != 1 || items[0].(map[string]any)["name"] != tc.wantName {
			t.Errorf("GET %s: %d %v, want only %s", tc.path, code, body, tc.wantName)
		}
	}
	if _, body := a.do("GET", "/v2/lbaas/loadbalancers?name=nope", nil); len(body["loadbalancers"].([]any)) != 0 {
		t.Errorf("unknown name: %v", body)
	}
}
