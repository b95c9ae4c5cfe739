package kubelb

import (
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowlb/flowlb/internal/server/apitest"
)

// TestNewClientFromCloudsYAML: with --os-cloud the controller logs in to
// the cloud's Keystone with clouds.yaml, finds the load-balancer endpoint
// in the token's catalog and sends the token with every call. Keystone is
// a fake here (it issues one token); the tempest harness runs a real one.
func TestNewClientFromCloudsYAML(t *testing.T) {
	api := apitest.New(t)
	const token = "gAAAAA-kube-token"
	target, _ := url.Parse(api.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var withToken, without atomic.Int64
	octavia := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Auth-Token") != token {
			without.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		withToken.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	defer octavia.Close()

	var logins atomic.Int64
	keystone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v3/auth/tokens" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Auth struct {
				Identity struct {
					Password struct {
						User struct {
							Name     string `json:"name"`
							Password string `json:"password"`
						} `json:"user"`
					} `json:"password"`
				} `json:"identity"`
				Scope struct {
					Project struct {
						Name string `json:"name"`
					} `json:"project"`
				} `json:"scope"`
			} `json:"auth"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		u := req.Auth.Identity.Password.User
		if u.Name != "kube" || u.Password != "secret" || req.Auth.Scope.Project.Name != "kube" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}`))
			return
		}
		logins.Add(1)
		w.Header().Set("X-Subject-Token", token)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"token": map[string]any{
			"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
			"project":    map[string]any{"id": "p-kube", "name": "kube", "domain": map[string]any{"id": "default", "name": "Default"}},
			"user":       map[string]any{"id": "u-kube", "name": "kube", "domain": map[string]any{"id": "default", "name": "Default"}},
			"roles":      []any{map[string]any{"id": "r1", "name": "load-balancer_member"}},
			"catalog": []any{map[string]any{"type": "load-balancer", "name": "octavia", "id": "s1", "endpoints": []any{
				map[string]any{"id": "e1", "interface": "public", "region": "RegionOne", "region_id": "RegionOne", "url": octavia.URL},
			}}},
		}})
	}))
	defer keystone.Close()

	dir := t.TempDir()
	clouds := `clouds:
  lab:
    auth:
      auth_url: ` + keystone.URL + `/v3
      username: kube
      password: secret
      project_name: kube
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: public
    identity_api_version: 3
  wrong:
    auth:
      auth_url: ` + keystone.URL + `/v3
      username: kube
      password: guessed
      project_name: kube
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
`
	if err := os.WriteFile(filepath.Join(dir, "clouds.yaml"), []byte(clouds), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OS_CLIENT_CONFIG_FILE", filepath.Join(dir, "clouds.yaml"))
	for _, k := range []string{"OS_CLOUD", "OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME", "OS_TOKEN", "OS_REGION_NAME"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}

	if _, err := NewClient(t.Context(), nil, nil, "wrong", nil); err == nil || !strings.Contains(err.Error(), `authenticate to cloud "wrong"`) {
		t.Errorf("bad password: %v, want an authentication error", err)
	}
	if _, err := NewClient(t.Context(), nil, nil, "absent", nil); err == nil {
		t.Error("a cloud missing from clouds.yaml: no error")
	}

	client, err := NewClient(t.Context(), nil, nil, "lab", nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &Octavia{Client: client}
	want := &LB{Name: "kube_service_lab_default_web", Tags: []string{"flowlb:kube-cluster=lab"}, VIP: VIP{SubnetID: api.ClusterSubnet, Address: "198.19.64.10"},
		Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: DefaultTimeouts, Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
			Members: []Member{member("198.18.17.2", 8080, "web-1", "n1")}}}}}
	if _, n, err := o.Apply(t.Context(), want); err != nil || n != 1 {
		t.Fatalf("apply through the catalog's endpoint: %d calls, %v", n, err)
	}
	if cur, err := (&Octavia{Client: api.Client}).Find(t.Context(), want.Name); err != nil || cur == nil {
		t.Fatalf("the load balancer is not in the API: %v %v", cur, err)
	}
	if logins.Load() != 1 || withToken.Load() == 0 || without.Load() != 0 {
		t.Errorf("%d logins, %d calls with the token, %d without; want 1 login and every call with it", logins.Load(), withToken.Load(), without.Load())
	}
}

// TestNewClientFailsOver: with several --octavia-endpoint replicas the
// client passes over one that refuses connections and stays on the one
// that answers; the metrics say which.
func TestNewClientFailsOver(t *testing.T) {
	api := apitest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	if _, err := NewClient(t.Context(), []string{closed + "/lb", api.URL}, nil, "", nil); err == nil || !strings.Contains(err.Error(), "differ in path") {
		t.Errorf("endpoints with different paths: %v, want refused", err)
	}
	reg := prometheus.NewRegistry()
	client, err := NewClient(t.Context(), []string{closed, api.URL}, nil, "", reg)
	if err != nil {
		t.Fatal(err)
	}
	o := &Octavia{Client: client}
	want := &LB{Name: "kube_service_lab_default_web", Tags: []string{"flowlb:kube-cluster=lab"}, VIP: VIP{SubnetID: api.ClusterSubnet, Address: "198.19.64.10"},
		Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: DefaultTimeouts, Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
			Members: []Member{member("198.18.17.2", 8080, "web-1", "n1")}}}}}
	if _, n, err := o.Apply(t.Context(), want); err != nil || n != 1 {
		t.Fatalf("apply with the first replica down: %d calls, %v", n, err)
	}
	if cur, err := (&Octavia{Client: api.Client}).Find(t.Context(), want.Name); err != nil || cur == nil {
		t.Fatalf("the load balancer is not in the API: %v %v", cur, err)
	}
	expected := `# HELP flowlb_kube_controller_api_endpoint_info 1 for the API endpoint (replica) in use.
# TYPE flowlb_kube_controller_api_endpoint_info gauge
flowlb_kube_controller_api_endpoint_info{endpoint="` + api.URL + `"} 1
# HELP flowlb_kube_controller_api_endpoint_switches_total Moves to another API endpoint after the one in use failed.
# TYPE flowlb_kube_controller_api_endpoint_switches_total counter
flowlb_kube_controller_api_endpoint_switches_total 1
`
	if err := promtestutil.GatherAndCompare(reg, strings.NewReader(expected)); err != nil {
		t.Error(err)
	}
}

// TestNewClientHTTPS: an https endpoint is trusted only with the CA given.
func TestNewClientHTTPS(t *testing.T) {
	api := apitest.New(t)
	target, _ := url.Parse(api.URL)
	front := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(target))
	defer front.Close()
	roots := x509.NewCertPool()
	roots.AddCert(front.Certificate())
	want := &LB{Name: "kube_service_lab_default_tls", Tags: []string{"flowlb:kube-cluster=lab"}, VIP: VIP{SubnetID: api.ClusterSubnet, Address: "198.19.64.11"},
		Listeners: []Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: DefaultTimeouts, Pool: Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN",
			Members: []Member{member("198.18.17.2", 8080, "web-1", "n1")}}}}}

	untrusting, err := NewClient(t.Context(), []string{front.URL}, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := (&Octavia{Client: untrusting}).Apply(t.Context(), want); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
	trusting, err := NewClient(t.Context(), []string{front.URL}, roots, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, n, err := (&Octavia{Client: trusting}).Apply(t.Context(), want); err != nil || n != 1 {
		t.Fatalf("with the CA: %d calls, %v", n, err)
	}
}

// TestNewClientKeepsAConnectionPerConcurrentRequest: the controller's
// workers call the API at once; each keeps its TLS connection instead of
// opening one per request (net/http keeps 2 idle per host by default).
func TestNewClientKeepsAConnectionPerConcurrentRequest(t *testing.T) {
	var opened atomic.Int64
	release := make(chan struct{})
	var inFlight atomic.Int64
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold the first wave until all 8 are in flight, so they need 8
		// connections at once.
		if inFlight.Add(1) <= 8 {
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"loadbalancers": []}`))
	}))
	front.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	front.StartTLS()
	defer front.Close()
	roots := x509.NewCertPool()
	roots.AddCert(front.Certificate())
	client, err := NewClient(t.Context(), []string{front.URL}, roots, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 5
	for round := range rounds {
		errs := make(chan error, workers)
		for range workers {
			go func() {
				_, err := client.Get(t.Context(), client.ServiceURL("lbaas", "loadbalancers"), nil, nil)
				errs <- err
			}()
		}
		if round == 0 {
			deadline := time.Now().Add(5 * time.Second)
			for inFlight.Load() < workers && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			close(release)
		}
		for range workers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := opened.Load(); n != workers {
		t.Errorf("%d connections opened for %d rounds of %d concurrent requests, want %d", n, rounds, workers, workers)
	}
}
