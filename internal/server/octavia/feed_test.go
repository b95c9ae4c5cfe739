package octavia

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// feedLBs is a feed answer's load balancers by id, each as its objects'
// "kind id" -> "provisioning/operating" (or "gone").
func feedLBs(t *testing.T, body map[string]any) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	lbs, ok := body["loadbalancers"].([]any)
	if !ok {
		t.Fatalf("no loadbalancers in %v", body)
	}
	for _, x := range lbs {
		lb := x.(map[string]any)
		objs := map[string]string{}
		if lb["gone"] == true {
			objs["gone"] = "gone"
		}
		for _, y := range lb["objects"].([]any) {
			o := y.(map[string]any)
			objs[fmt.Sprint(o["kind"], " ", o["id"])] = fmt.Sprint(o["provisioning_status"], "/", o["operating_status"])
		}
		out[lb["id"].(string)] = objs
	}
	return out
}

// TestStatusFeed: the feed lists every load balancer from the start,
// then only those a change touched after the position it answered, with
// a deleted one as gone; a wait returns as soon as a change is logged.
func TestStatusFeed(t *testing.T) {
	a := newAPI(t)
	mk := func() (lb, member string) {
		code, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID,
			"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{"name": "p", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
				"healthmonitor": map[string]any{"type": "TCP", "delay": 5, "timeout": 3, "max_retries": 2},
				"members":       []any{map[string]any{"address": "198.18.0.10", "protocol_port": 8080}}}}}}})
		if code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, body)
		}
		lb = body["loadbalancer"].(map[string]any)["id"].(string)
		a.waitActive(lb)
		_, body = a.do("GET", "/v2/lbaas/loadbalancers/"+lb+"/status", nil)
		pool := body["statuses"].(map[string]any)["loadbalancer"].(map[string]any)["listeners"].([]any)[0].(map[string]any)["pools"].([]any)[0].(map[string]any)
		member = pool["members"].([]any)[0].(map[string]any)["id"].(string)
		return lb, member
	}
	lb1, m1 := mk()
	lb2, _ := mk()

	code, full := a.do("GET", "/v2/flowlb/changes", nil)
	if code != http.StatusOK || full["full"] != true {
		t.Fatalf("first call: %d %v, want 200 with every load balancer", code, full)
	}
	got := feedLBs(t, full)
	if len(got) != 2 || len(got[lb1]) != 5 || got[lb1]["member "+m1] != "ACTIVE/OFFLINE" || got[lb1]["loadbalancer "+lb1] != "ACTIVE/ONLINE" {
		t.Fatalf("full feed: %v, want both load balancers with their 5 objects, the member OFFLINE until its first check", got)
	}
	epoch, rev := full["epoch"].(string), int64(full["revision"].(float64))
	at := func(after int64) string { return fmt.Sprintf("/v2/flowlb/changes?epoch=%s&after=%d", epoch, after) }

	// Nothing changed: an empty answer at the same position, after the wait.
	start := time.Now()
	code, body := a.do("GET", at(rev)+"&wait=0.3", nil)
	if code != 200 || body["full"] != false || len(feedLBs(t, body)) != 0 || int64(body["revision"].(float64)) != rev {
		t.Fatalf("no change: %d %v", code, body)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("a wait with nothing logged returned after %v, want about 0.3 s", waited)
	}

	// A health verdict on lb1's member, logged while a reader waits.
	svc := a.svc
	go func() {
		time.Sleep(200 * time.Millisecond)
		if _, _, err := svc.SetMemberHealth(identity.WithCaller(context.Background(), identity.Caller{IsAdmin: true}), m1, "ERROR"); err != nil {
			t.Error(err)
		}
	}()
	start = time.Now()
	code, body = a.do("GET", at(rev)+"&wait=10", nil)
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the wait returned after %v, not at the change", waited)
	}
	got = feedLBs(t, body)
	if code != 200 || len(got) != 1 || got[lb1]["member "+m1] != "ACTIVE/ERROR" || got[lb1]["loadbalancer "+lb1] != "ACTIVE/ERROR" {
		t.Fatalf("after the verdict: %d %v, want lb1 alone, its member and itself in ERROR", code, got)
	}
	rev = int64(body["revision"].(float64))

	if code, _ := a.do("DELETE", "/v2/lbaas/loadbalancers/"+lb2+"?cascade=true", nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	testutil.Eventually(t, 3*time.Second, "lb2 gone", func() (bool, string) {
		code, _ := a.do("GET", "/v2/lbaas/loadbalancers/"+lb2, nil)
		return code == http.StatusNotFound, fmt.Sprint(code)
	})
	code, body = a.do("GET", at(rev), nil)
	got = feedLBs(t, body)
	if code != 200 || got[lb2]["gone"] != "gone" || got[lb1] != nil {
		t.Fatalf("after the delete: %d %v, want lb2 gone and lb1 not listed", code, got)
	}

	code, body = a.do("GET", "/v2/flowlb/statuses?id="+lb1+"&id="+lb2, nil)
	if got := feedLBs(t, body); code != 200 || len(got) != 2 || got[lb2]["gone"] != "gone" || got[lb1]["member "+m1] != "ACTIVE/ERROR" {
		t.Errorf("statuses of lb1 and lb2: %d %v, want lb1's objects and lb2 gone", code, got)
	}
	if code, _ := a.do("GET", "/v2/flowlb/statuses", nil); code != http.StatusBadRequest {
		t.Errorf("statuses of no load balancer: %d, want 400", code)
	}

	// A position of another database, or beyond the head: the whole list.
	for _, q := range []string{"/v2/flowlb/changes?epoch=other&after=1", fmt.Sprintf("/v2/flowlb/changes?epoch=%s&after=%d", epoch, rev+1000)} {
		code, body = a.do("GET", q, nil)
		if got := feedLBs(t, body); code != 200 || body["full"] != true || len(got) != 1 || got[lb1] == nil {
			t.Errorf("GET %s: %d %v, want the full list (lb1 alone)", q, code, got)
		}
	}
	for _, q := range []string{"?after=-1", "?after=x", "?wait=31", "?wait=-1", "?limit=0", "?limit=1001"} {
		if code, body := a.do("GET", "/v2/flowlb/changes"+q, nil); code != http.StatusBadRequest || body["faultstring"] == nil {
			t.Errorf("GET changes%s: %d %v, want Octavia's 400", q, code, body)
		}
	}
}

// TestStatusFeedAdminOnly: the feed and the statistics show every
// project, so only admins read them.
func TestStatusFeedAdminOnly(t *testing.T) {
	srv := rbacAPIConfig(t, identity.Advanced, Config{})
	for _, path := range []string{"/v2/flowlb/changes", "/v2/flowlb/statistics"} {
		for _, as := range []who{{"a", "load-balancer_member"}, {"a", "load-balancer_global_observer"}} {
			if code, _ := call(t, srv, as, "GET", path, nil); code != http.StatusForbidden {
				t.Errorf("%v GET %s: %d, want 403", as, path, code)
			}
		}
		if code, _ := call(t, srv, who{"a", "admin"}, "GET", path, nil); code != http.StatusOK {
			t.Errorf("admin GET %s: %d, want 200", path, code)
		}
	}
}

// TestStatisticsFeed: every listener's statistics summed over the nodes.
func TestStatisticsFeed(t *testing.T) {
	a := newAPI(t)
	_, body := a.do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnetID,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80}}}})
	lb := body["loadbalancer"].(map[string]any)["id"].(string)
	a.waitActive(lb)
	_, body = a.do("GET", "/v2/lbaas/listeners?loadbalancer_id="+lb, nil)
	li := body["listeners"].([]any)[0].(map[string]any)["id"].(string)
	ctx := context.Background()
	for node, n := range map[string]int64{"n1": 1, "n2": 2} {
		if err := a.st.AddStats(ctx, node, []store.ListenerCounts{{ListenerID: li, LoadBalancerID: lb, Counts: store.Counts{BytesIn: 10 * n, BytesOut: 100 * n, TotalConnections: n, ActiveConnections: n, RequestErrors: n - 1}}}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	code, body := a.do("GET", "/v2/flowlb/statistics", nil)
	want := map[string]any{"id": li, "loadbalancer_id": lb, "bytes_in": 30.0, "bytes_out": 300.0, "total_connections": 3.0, "active_connections": 3.0, "request_errors": 1.0}
	ls, _ := body["listeners"].([]any)
	if code != 200 || len(ls) != 1 || fmt.Sprint(ls[0]) != fmt.Sprint(want) {
		t.Fatalf("statistics: %d %v, want [%v]", code, body, want)
	}
}
