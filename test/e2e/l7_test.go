package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// httpFrom is a client in host's namespace that follows no redirect and
// opens a new connection for every request, as new clients would.
func httpFrom(host lab.Host) *http.Client {
	return &http.Client{
		Timeout:       5 * time.Second,
		Transport:     &http.Transport{DialContext: host.Dial, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type httpAnswer struct {
	status   int
	pod      string
	peer     string
	location string
	xff      string
	// proto is the HTTP version an HTTPS port was reached with.
	proto string
}

func getVia(t *testing.T, c *http.Client, vip, host, path string) httpAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+vip+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET http://%s%s (Host %s): %v", vip, path, host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := httpAnswer{status: resp.StatusCode, pod: resp.Header.Get("X-Flowlb-Pod"), location: resp.Header.Get("Location"),
		xff: resp.Header.Get("X-Flowlb-Forwarded-For"), proto: resp.Header.Get("X-Flowlb-Proto")}
	if a.pod != "" {
		r, err := echo.Parse(strings.TrimSpace(string(body)))
		if err != nil {
			t.Fatalf("answer %q: %v", body, err)
		}
		a.peer = r.Peer
	}
	return a
}

// newL7Cluster is a lab of two nodes of three pods whose server serves
// HTTP listeners and whose agents run the L7 proxy.
func newL7Cluster(t *testing.T) *cluster {
	return newClusterOpts(t, clusterOptions{nodes: 2, pods: 3, serverArgs: []string{"--l7"}, agentArgs: []string{"--l7-ports", "20000-20099"}})
}

// httpMembers are pods as members on their HTTP port.
func httpMembers(pods []lab.Host) []any {
	var out []any
	for _, p := range pods {
		out = append(out, map[string]any{"address": p.Addr.String(), "protocol_port": 80, "name": p.Name})
	}
	return out
}

// createHTTPLB creates a load balancer with an HTTP listener on port 80
// (listener's fields added) whose default pool, named web, has members,
// round robin, and waits for it to be ACTIVE: the load balancer, its
// listener's id and its VIP's address and port.
func (c *cluster) createHTTPLB(listener map[string]any, members []any) (lb map[string]any, listenerID, vip string) {
	c.t.Helper()
	l := map[string]any{"name": "http", "protocol": "HTTP", "protocol_port": 80,
		"default_pool": map[string]any{"name": "web", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "members": members}}
	for k, v := range listener {
		l[k] = v
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "l7", "vip_subnet_id": c.subnet("flowlb-vip-subnet"), "listeners": []any{l}}})
	if code != 201 {
		c.t.Fatalf("create: %d %v", code, body)
	}
	lb = c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	return lb, lb["listeners"].([]any)[0].(map[string]any)["id"].(string), net.JoinHostPort(lb["vip_address"].(string), "80")
}

// TestHTTPListener: an HTTP listener is served by the proxy on the
// client's own node: its L7 policies route by host to a second pool,
// reject by path and redirect, the default pool takes the rest round
// robin, members see X-Forwarded-For with the client's own address on a
// connection the proxy made, a cookie pins a client to a member through
// either node's proxy, and a PROXYV2 pool's member reads the client's
// address from the header. ACTIVE after each
// change means every node's proxy serves it.
func TestHTTPListener(t *testing.T) {
	c := newL7Cluster(t)
	web := []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(2, 1)}
	api := []lab.Host{c.lab.Pod(1, 2), c.lab.Pod(2, 2)}
	lb, listenerID, vip := c.createHTTPLB(map[string]any{"insert_headers": map[string]any{"X-Forwarded-For": "true"}}, httpMembers(web))
	lbID := lb["id"].(string)

	// Before any policy: the default pool, from either node.
	for _, from := range []lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3)} {
		seen := map[string]int{}
		for range 8 {
			a := getVia(t, httpFrom(from), vip, "www.example", "/")
			if a.status != 200 {
				t.Fatalf("from %s: %+v", from.Name, a)
			}
			seen[a.pod]++
			if a.xff != from.Addr.String() {
				t.Errorf("from %s: the member saw X-Forwarded-For %q, want the client's %s", from.Name, a.xff, from.Addr)
			}
			// The proxy connects to the member: the connection is not
			// the client's.
			if peer, _, _ := net.SplitHostPort(a.peer); peer == from.Addr.String() {
				t.Errorf("from %s: the member's connection came from the client itself", from.Name)
			}
		}
		if seen[web[0].Name] != 4 || seen[web[1].Name] != 4 {
			t.Errorf("from %s: round robin over the web pool gave %v", from.Name, seen)
		}
	}

	// A second pool and three policies, each change ACTIVE before the next.
	code, body := c.call("POST", "/v2/lbaas/pools", map[string]any{"pool": map[string]any{"name": "api", "loadbalancer_id": lbID,
		"protocol": "HTTP", "lb_algorithm": "LEAST_CONNECTIONS"}})
	if code != 201 {
		t.Fatalf("pool: %d %v", code, body)
	}
	apiPool := body["pool"].(map[string]any)["id"].(string)
	c.waitActive(lbID)
	for _, m := range httpMembers(api) {
		if code, body := c.call("POST", "/v2/lbaas/pools/"+apiPool+"/members", map[string]any{"member": m}); code != 201 {
			t.Fatalf("member: %d %v", code, body)
		}
		c.waitActive(lbID)
	}
	for _, p := range []map[string]any{
		{"name": "to-api", "action": "REDIRECT_TO_POOL", "redirect_pool_id": apiPool, "position": 1,
			"rules": []any{map[string]any{"type": "HOST_NAME", "compare_type": "EQUAL_TO", "value": "api.example"}}},
		{"name": "private", "action": "REJECT", "position": 1,
			"rules": []any{map[string]any{"type": "PATH", "compare_type": "STARTS_WITH", "value": "/private"}}},
		{"name": "moved", "action": "REDIRECT_PREFIX", "redirect_prefix": "https://www.example", "redirect_http_code": 301, "position": 3,
			"rules": []any{map[string]any{"type": "HOST_NAME", "compare_type": "REGEX", "value": `^old\.`}}},
	} {
		p["listener_id"] = listenerID
		if code, body := c.call("POST", "/v2/lbaas/l7policies", map[string]any{"l7policy": p}); code != 201 {
			t.Fatalf("policy %s: %d %v", p["name"], code, body)
		}
		c.waitActive(lbID)
	}

	for _, from := range []lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3)} {
		hc := httpFrom(from)
		seen := map[string]bool{}
		for range 6 {
			a := getVia(t, hc, vip, "api.example", "/v1/items")
			if a.status != 200 || (a.pod != api[0].Name && a.pod != api[1].Name) {
				t.Fatalf("from %s, Host api.example: %+v, want a pod of the api pool", from.Name, a)
			}
			seen[a.pod] = true
		}
		if len(seen) != 2 {
			t.Errorf("from %s: the idle api pool (least connections) answered only from %v", from.Name, seen)
		}
		if a := getVia(t, hc, vip, "api.example", "/private/keys"); a.status != http.StatusForbidden {
			t.Errorf("from %s: the reject (position 1) gave %+v", from.Name, a)
		}
		if a := getVia(t, hc, vip, "old.example", "/a?b=c"); a.status != http.StatusMovedPermanently || a.location != "https://www.example/a?b=c" {
			t.Errorf("from %s: the redirect gave %+v", from.Name, a)
		}
		if a := getVia(t, hc, vip, "www.example", "/"); a.status != 200 || (a.pod != web[0].Name && a.pod != web[1].Name) {
			t.Errorf("from %s: the default pool gave %+v", from.Name, a)
		}
	}

	// Cookie persistence holds across nodes: the cookie a client got
	// through its node's proxy takes it to the same member through the
	// other node's.
	webPool := lb["pools"].([]any)[0].(map[string]any)["id"].(string)
	if code, body := c.call("PUT", "/v2/lbaas/pools/"+webPool, map[string]any{"pool": map[string]any{
		"session_persistence": map[string]any{"type": "HTTP_COOKIE"}}}); code != 200 {
		t.Fatalf("persistence: %d %v", code, body)
	}
	c.waitActive(lbID)
	first, err := httpFrom(c.lab.Pod(1, 3)).Get("http://" + vip + "/")
	if err != nil {
		t.Fatal(err)
	}
	first.Body.Close()
	var srv *http.Cookie
	for _, ck := range first.Cookies() {
		if ck.Name == "SRV" {
			srv = ck
		}
	}
	pinned := first.Header.Get("X-Flowlb-Pod")
	if srv == nil || pinned == "" {
		t.Fatalf("no SRV cookie from the web pool: %v", first.Header)
	}
	for range 6 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+vip+"/", nil)
		req.AddCookie(&http.Cookie{Name: srv.Name, Value: srv.Value})
		resp, err := httpFrom(c.lab.Pod(2, 3)).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Flowlb-Pod"); got != pinned {
			t.Fatalf("with %s=%s from the other node: answered by %s, want %s", srv.Name, srv.Value, got, pinned)
		}
	}

	// A PROXYV2 pool: its member reads the header the client's node's
	// proxy writes, and sees the client's own address and the VIP.
	code, body = c.call("POST", "/v2/lbaas/pools", map[string]any{"pool": map[string]any{"name": "proxied", "loadbalancer_id": lbID,
		"protocol": "PROXYV2", "lb_algorithm": "ROUND_ROBIN", "members": []any{}}})
	if code != 201 {
		t.Fatalf("PROXYV2 pool: %d %v", code, body)
	}
	proxiedPool := body["pool"].(map[string]any)["id"].(string)
	c.waitActive(lbID)
	pp := c.lab.Pod(2, 2)
	if code, body := c.call("POST", "/v2/lbaas/pools/"+proxiedPool+"/members", map[string]any{"member": map[string]any{
		"address": pp.Addr.String(), "protocol_port": 81}}); code != 201 {
		t.Fatalf("PROXYV2 member: %d %v", code, body)
	}
	c.waitActive(lbID)
	if code, body := c.call("POST", "/v2/lbaas/l7policies", map[string]any{"l7policy": map[string]any{"listener_id": listenerID,
		"action": "REDIRECT_TO_POOL", "redirect_pool_id": proxiedPool, "position": 1,
		"rules": []any{map[string]any{"type": "PATH", "compare_type": "STARTS_WITH", "value": "/proxied"}}}}); code != 201 {
		t.Fatalf("PROXYV2 policy: %d %v", code, body)
	}
	c.waitActive(lbID)
	for _, from := range []lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3)} {
		a := getVia(t, httpFrom(from), vip, "www.example", "/proxied/x")
		if host, _, _ := net.SplitHostPort(a.peer); a.status != 200 || a.pod != pp.Name || host != from.Addr.String() {
			t.Errorf("from %s through the PROXYV2 pool: %+v, want %s seeing the client's own address", from.Name, a, pp.Name)
		}
	}

	// A TCP client that is not HTTP gets an HTTP error from the proxy,
	// not a member.
	if r, err := ask(c.lab.Pod(1, 3), vip); err == nil {
		t.Errorf("a line-protocol client got a member's answer through an HTTP listener: %+v", r)
	}

	if code, _ := c.call("DELETE", "/v2/lbaas/loadbalancers/"+lbID+"?cascade=true", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	testutil.Eventually(t, 10*time.Second, "LB deleted", func() (bool, string) {
		code, _ := c.call("GET", "/v2/lbaas/loadbalancers/"+lbID, nil)
		return code == 404, fmt.Sprintf("GET answers %d", code)
	})
	req, _ := http.NewRequest(http.MethodGet, "http://"+vip+"/", nil)
	if resp, err := httpFrom(c.lab.Pod(2, 3)).Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("the VIP still answers HTTP after the delete: %d", resp.StatusCode)
	}
}

// TestHTTPListenerChangesUnderLoad: L7 policy changes reach every node's
// proxy while clients on both nodes keep sending requests, and no
// request fails: the proxy swaps a whole configuration at once, and
// the data planes' steering does not change with the policies.
func TestHTTPListenerChangesUnderLoad(t *testing.T) {
	c := newL7Cluster(t)
	lb, listenerID, vip := c.createHTTPLB(nil, httpMembers([]lab.Host{c.lab.Pod(1, 1), c.lab.Pod(2, 1)}))
	lbID := lb["id"].(string)

	finish, more := getsDuring([]lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3)}, "http://"+vip+"/page")
	var policy string
	for i := range 20 {
		policy = c.togglePolicy(listenerID, policy, i)
		c.waitActive(lbID)
		more(5)
	}
	ok, failed := finish()
	t.Logf("20 policy changes, each ACTIVE before the next: %d requests answered, %d failed", ok, failed)
	if failed != 0 || ok < 100 {
		t.Errorf("%d requests failed, %d answered, across 20 policy changes", failed, ok)
	}
}

// TestHTTPListenerWithoutProxy: an agent run without the L7 proxy refuses
// an HTTP listener's connections rather than balancing them as TCP past
// the listener's policies.
func TestHTTPListenerWithoutProxy(t *testing.T) {
	c := newClusterOpts(t, clusterOptions{nodes: 1, pods: 2, serverArgs: []string{"--l7"}})
	_, _, vip := c.createHTTPLB(nil, httpMembers([]lab.Host{c.lab.Pod(1, 1)}))
	req, _ := http.NewRequest(http.MethodGet, "http://"+vip+"/", nil)
	resp, err := httpFrom(c.lab.Pod(1, 2)).Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("an agent without the proxy let an HTTP listener's request through: %d", resp.StatusCode)
	}
	b, _ := os.ReadFile(c.lab.LogPath(c.lab.Node(1).Name, "agent"))
	if !strings.Contains(string(b), "runs no L7 proxy") {
		t.Error("the agent did not say why it refuses")
	}
}

// TestHTTPListenerTLSMembers: a pool with tls_enabled reaches the pods'
// HTTPS port through either node's proxy, in HTTP/1.1 without ALPN and
// in h2 once the pool's alpn_protocols offer it; the same pool without
// TLS gets the pods' answer to plain HTTP on a TLS port; a CA reference
// without a certificate manager is refused (501).
func TestHTTPListenerTLSMembers(t *testing.T) {
	c := newL7Cluster(t)
	web := []lab.Host{c.lab.Pod(1, 1), c.lab.Pod(2, 1)}
	var members []any
	for _, p := range web {
		members = append(members, map[string]any{"address": p.Addr.String(), "protocol_port": 443, "name": p.Name})
	}
	lb, _, vip := c.createHTTPLB(map[string]any{"default_pool": map[string]any{"name": "web", "protocol": "HTTP",
		"lb_algorithm": "ROUND_ROBIN", "tls_enabled": true, "members": members}}, nil)
	lbID := lb["id"].(string)
	pool := lb["pools"].([]any)[0].(map[string]any)["id"].(string)
	check := func(what string, status int, proto string) {
		t.Helper()
		for _, from := range []lab.Host{c.lab.Pod(1, 3), c.lab.Pod(2, 3)} {
			seen := map[string]int{}
			for range 4 {
				a := getVia(t, httpFrom(from), vip, "www.example", "/")
				if a.status != status || a.proto != proto {
					t.Fatalf("%s, from %s: %+v, want status %d over %q", what, from.Name, a, status, proto)
				}
				seen[a.pod]++
			}
			if status == 200 && (seen[web[0].Name] != 2 || seen[web[1].Name] != 2) {
				t.Errorf("%s, from %s: round robin gave %v", what, from.Name, seen)
			}
		}
	}
	check("tls_enabled", 200, "HTTP/1.1")

	update := func(fields map[string]any) {
		t.Helper()
		if code, body := c.call("PUT", "/v2/lbaas/pools/"+pool, map[string]any{"pool": fields}); code != 200 {
			t.Fatalf("update %v: %d %v", fields, code, body)
		}
		c.waitActive(lbID)
	}
	update(map[string]any{"alpn_protocols": []string{"h2", "http/1.1"}})
	check("ALPN h2", 200, "HTTP/2.0")
	update(map[string]any{"tls_enabled": false})
	check("without TLS", http.StatusBadRequest, "")

	code, body := c.call("POST", "/v2/lbaas/pools", map[string]any{"pool": map[string]any{"loadbalancer_id": lbID, "protocol": "HTTP",
		"lb_algorithm": "ROUND_ROBIN", "tls_enabled": true, "ca_tls_container_ref": "https://barbican.example/v1/secrets/ca"}})
	if msg, _ := body["faultstring"].(string); code != http.StatusNotImplemented || !strings.Contains(msg, "no certificate manager") {
		t.Errorf("a CA reference without a certificate manager: %d %v", code, body)
	}
}

// getsDuring sends GETs of url from each of clients, one after the
// other, until finish is called, which says how many were answered 200
// and how many failed; more waits until n more have been answered (at
// most 10 s), so that a test's changes each meet requests however slow
// the machine.
func getsDuring(clients []lab.Host, url string) (finish func() (ok, failed int), more func(n int)) {
	stop := make(chan struct{})
	var answered atomic.Int64
	type tally struct{ ok, failed int }
	results := make(chan tally, len(clients))
	for _, from := range clients {
		go func() {
			var tl tally
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: from.Dial}}
			for {
				select {
				case <-stop:
					results <- tl
					return
				default:
				}
				resp, err := hc.Get(url)
				if err != nil {
					tl.failed++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					tl.failed++
					continue
				}
				tl.ok++
				answered.Add(1)
			}
		}()
	}
	more = func(n int) {
		want := answered.Load() + int64(n)
		for deadline := time.Now().Add(10 * time.Second); answered.Load() < want && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return func() (ok, failed int) {
		close(stop)
		for range clients {
			r := <-results
			ok, failed = ok+r.ok, failed+r.failed
		}
		return ok, failed
	}, more
}

// togglePolicy makes change i of a listener's policies: with none
// (policy ""), an L7 policy redirecting /old to http://moved.example/i,
// whose id it returns; with one, its deletion ("").
func (c *cluster) togglePolicy(listenerID, policy string, i int) string {
	c.t.Helper()
	if policy != "" {
		if code, body := c.call("DELETE", "/v2/lbaas/l7policies/"+policy, nil); code != 204 {
			c.t.Fatalf("policy delete %d: %d %v", i, code, body)
		}
		return ""
	}
	code, body := c.call("POST", "/v2/lbaas/l7policies", map[string]any{"l7policy": map[string]any{
		"listener_id": listenerID, "action": "REDIRECT_TO_URL", "redirect_url": fmt.Sprintf("http://moved.example/%d", i),
		"rules": []any{map[string]any{"type": "PATH", "compare_type": "STARTS_WITH", "value": "/old"}}}})
	if code != 201 {
		c.t.Fatalf("policy %d: %d %v", i, code, body)
	}
	return body["l7policy"].(map[string]any)["id"].(string)
}
