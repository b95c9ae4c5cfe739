package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/barbican"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestL7TLSBench compares a TERMINATED_HTTPS listener served by the proxy
// on the client's node (its certificate stored in the lab's Barbican and
// read by the server as Octavia reads it) with the same certificate and
// members behind one HAProxy (Debian's, as the amphora runs it) one hop
// away: TLS handshakes per second (a new connection for every request)
// and requests over kept-alive TLS connections, 1 KiB answers, the
// contenders alternating in one run. The clients offer X25519 only, the
// key exchange both sides have (Debian 12's OpenSSL has no ML-KEM, which
// Go would choose by default), and verify an RSA 2048 certificate. The
// client's node's proxy is to serve them all with its lean engine.
//
//	FLOWLB_REQUIRE_ROOT=1 FLOWLB_L7_BENCH=1 go test -count=1 -timeout 30m -v -run 'TestL7TLSBench$' ./test/e2e/
func TestL7TLSBench(t *testing.T) {
	if os.Getenv(l7BenchEnv) == "" {
		t.Skip(l7BenchEnv + " not set")
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err != nil {
		t.Skip("no /usr/sbin/haproxy (hack/install-deps.sh --test)")
	}
	for _, missing := range []error{keystone.Missing(), barbican.Missing()} {
		if missing != nil {
			t.Skip(missing)
		}
	}
	rounds, secs, clients := envInt(l7BenchRoundsEnv, 3), envInt(l7BenchSecondsEnv, 10), envInt(l7BenchConcEnv, 16)
	ctx := t.Context()
	prepared := keystone.Prepare(t, control+":5000", keystoneURL)
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 3, agentArgs: []string{"--l7-ports", "20000-20099"},
		serverArgs: []string{"--auth", "keystone", "--keystone-url", keystoneURL,
			"--keystone-user", "octavia", "--keystone-password", "octaviapw", "--keystone-project", "service",
			"--l7", "--tls-certificates", "barbican"},
		beforeServer: func(c *cluster) {
			ks := startLabKeystone(t, c, prepared.Copy(t), false)
			startLabBarbican(t, c, ks)
		}})
	hc := &http.Client{Transport: &http.Transport{DialContext: c.lab.Node(1).Dial}, Timeout: 10 * time.Second}
	// The tenant (startLabBarbican's user, who may store secrets) stores
	// the certificate and makes the load balancer.
	admin, err := keystone.Token(ctx, hc, keystoneURL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject)
	if err != nil {
		t.Fatal(err)
	}
	c.authToken = admin
	_, body := c.call("GET", "/v2.0/subnets?name=flowlb-vip-subnet", nil)
	subnets := dig(body, "subnets")
	if len(subnets) != 1 {
		t.Fatalf("subnet flowlb-vip-subnet: %v", body)
	}
	subnet := subnets[0].(map[string]any)["id"].(string)
	tok, err := keystone.Token(ctx, hc, keystoneURL, "ingress", "ingresspw", "k8s")
	if err != nil {
		t.Fatal(err)
	}
	c.authToken = tok
	const host = "bench.example"
	certPEM, keyPEM := selfSigned(t, host)
	store := func(path string, body map[string]any) string {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, barbicanURL+path, bytes.NewReader(b))
		req.Header.Set("X-Auth-Token", tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		ref, _ := out["secret_ref"].(string)
		if ref == "" {
			ref, _ = out["container_ref"].(string)
		}
		if resp.StatusCode != 201 || ref == "" {
			t.Fatalf("POST %s: %s %v", path, resp.Status, out)
		}
		return ref
	}
	certRef := store("/v1/secrets", map[string]any{"name": "bench-cert", "secret_type": "certificate", "payload": certPEM, "payload_content_type": "text/plain"})
	keyRef := store("/v1/secrets", map[string]any{"name": "bench-key", "secret_type": "private", "payload": keyPEM, "payload_content_type": "text/plain"})
	containerRef := store("/v1/containers", map[string]any{"name": "bench", "type": "certificate", "secret_refs": []any{
		map[string]any{"name": "certificate", "secret_ref": certRef}, map[string]any{"name": "private_key", "secret_ref": keyRef}}})

	client, amphora := c.lab.Pod(1, 3), c.lab.Pod(1, 2)
	memberPods := []lab.Host{c.lab.Pod(2, 1), c.lab.Pod(2, 2)}
	var memberAddrs []string
	for _, p := range memberPods {
		memberAddrs = append(memberAddrs, net.JoinHostPort(p.Addr.String(), "80"))
	}
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "tls-bench", "vip_subnet_id": subnet, "listeners": []any{map[string]any{
			"name": "https", "protocol": "TERMINATED_HTTPS", "protocol_port": 443, "default_tls_container_ref": containerRef,
			"insert_headers": map[string]any{"X-Forwarded-For": "true"},
			"default_pool":   map[string]any{"name": "web", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "members": httpMembers(memberPods)}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := c.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	flowlbURL := "https://" + net.JoinHostPort(lb["vip_address"].(string), "443") + "/?pad=1024"

	dir := t.TempDir()
	crt := filepath.Join(dir, "bench.pem")
	if err := os.WriteFile(crt, []byte(certPEM+keyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	haproxyAt := net.JoinHostPort(amphora.Addr.String(), "8443")
	conf := strings.Replace(haproxyConfig(haproxyAt, memberAddrs), "    bind "+haproxyAt+"\n", "    bind "+haproxyAt+" ssl crt "+crt+"\n", 1)
	if !strings.Contains(conf, " ssl crt ") {
		t.Fatalf("HAProxy's bind line not found in:\n%s", conf)
	}
	c.startHAProxy(amphora, conf)
	haproxyURL := "https://" + haproxyAt + "/?pad=1024"

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(certPEM))
	tlsConf := &tls.Config{RootCAs: roots, ServerName: host, CurvePreferences: []tls.CurveID{tls.X25519}}
	probe := &http.Client{Transport: &http.Transport{DialContext: client.Dial, DisableKeepAlives: true, TLSClientConfig: tlsConf}, Timeout: 2 * time.Second}
	for _, u := range []string{flowlbURL, haproxyURL} {
		testutil.Eventually(t, 20*time.Second, u+" answers", func() (bool, string) {
			resp, err := probe.Get(u)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == 200 && resp.TLS != nil && resp.TLS.CurveID == tls.X25519, fmt.Sprint(resp.Status, resp.TLS != nil)
		})
	}

	d := time.Duration(secs) * time.Second
	failed := versusHAProxy(t, rounds, fmt.Sprintf("%d clients, TERMINATED_HTTPS, 1 KiB answers, median of %d rounds of %d s", clients, rounds, secs), flowlbURL, haproxyURL,
		benchMode{"a TLS handshake per request", func(u string) loadResult { return httpsLoad(client.Dial, u, tlsConf, clients, false, d) }},
		benchMode{"kept-alive TLS connections", func(u string) loadResult { return httpsLoad(client.Dial, u, tlsConf, clients, true, d) }})
	if failed > 0 {
		t.Errorf("%d requests failed", failed)
	}
	// The client's node's proxy served every request with its lean
	// engine: HTTP/1.1 after each handshake, nothing handed to net/http.
	m, err := agentMetrics(c.lab.Node(1))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := metricValue(m, `flowlb_agent_l7_requests_total{by="member",class="2xx"}`); !ok || v == 0 {
		t.Errorf("the client's node's proxy counted %v answers of members (%v)", v, ok)
	}
	if v, ok := metricValue(m, "flowlb_agent_l7_handoffs_total"); !ok || v != 0 {
		t.Errorf("flowlb_agent_l7_handoffs_total on the client's node: %v (%v), want 0", v, ok)
	}
}
