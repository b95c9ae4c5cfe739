package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/server/dashboard"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func dashboardState(t *testing.T, s *server.Server, token string) (int, dashboard.State) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+s.APIAddr.String()+"/dashboard/api/state", nil)
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st dashboard.State
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, st
}

// The dashboard of one replica shows an agent connected to another, the
// load balancer created through it with its tree, and the change's path
// to the agent's node.
func TestDashboardAcrossReplicas(t *testing.T) {
	c := newCluster(t)
	a := c.start("a", time.Minute)
	b := c.start("b", time.Minute)
	k := newKernel()
	c.startAgent("node-1", k, b.AgentAddr.String())
	waitAgentSeen(t, b, a)

	lb := createLB(t, a, "web", "198.18.1.1", "198.18.1.2")
	waitStatus(t, a, lb.LoadBalancer.ID, "ACTIVE", 5*time.Second)

	var st dashboard.State
	testutil.Eventually(t, 5*time.Second, "the change programmed on node-1, seen from a", func() (bool, string) {
		var code int
		code, st = dashboardState(t, a, "")
		if code != http.StatusOK {
			return false, fmt.Sprint("HTTP ", code)
		}
		for _, ch := range st.Changes {
			if ch.LoadBalancerID == lb.LoadBalancer.ID && len(ch.Nodes) == 1 && ch.Nodes[0].Node == "node-1" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("changes %+v", st.Changes)
	})
	if st.Replica != "a" || st.Revision < st.Changes[0].Revision {
		t.Errorf("replica %q at revision %d, before its last change %d", st.Replica, st.Revision, st.Changes[0].Revision)
	}
	if len(st.Agents) != 1 || st.Agents[0].Node != "node-1" || st.Agents[0].Revision < st.Changes[0].Revision {
		t.Fatalf("agents %+v, want node-1 at %d or later", st.Agents, st.Changes[0].Revision)
	}
	if len(st.LoadBalancers) != 1 {
		t.Fatalf("load balancers %+v", st.LoadBalancers)
	}
	got := st.LoadBalancers[0]
	if got.ID != lb.LoadBalancer.ID || got.ProvisioningStatus != "ACTIVE" || got.VIPAddress != lb.LoadBalancer.VIPAddress ||
		len(got.Listeners) != 1 || len(got.Listeners[0].Pools) != 1 || len(got.Listeners[0].Pools[0].Members) != 2 {
		t.Fatalf("tree %+v", got)
	}
	for _, ch := range st.Changes {
		if ch.LoadBalancerID != lb.LoadBalancer.ID {
			continue
		}
		if ch.WrittenAt.IsZero() || ch.AppliedAt.IsZero() || ch.Nodes[0].At.Before(ch.AppliedAt.Add(-time.Second)) {
			t.Errorf("change path %+v", ch)
		}
	}
}

// fakeKeystone validates one user token ("user-token", project p1) and
// issues it to alice; the service logs in as octavia (user u-octavia,
// token svc).
func fakeKeystone(t *testing.T) *httptest.Server {
	ks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		switch r.Method {
		case http.MethodPost:
			var body struct {
				Auth struct {
					Identity struct {
						Password struct {
							User struct{ Name, Password string }
						}
					}
				}
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			u := body.Auth.Identity.Password.User
			tok := map[string]string{"octavia/pw": "svc", "alice/pw": "user-token"}[u.Name+"/"+u.Password]
			if tok == "" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("X-Subject-Token", tok)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"token":{"expires_at":%q,"user":{"id":"u"},"project":{"id":"p1"},"roles":[{"name":"member"}]}}`, exp)
		case http.MethodGet:
			if r.Header.Get("X-Auth-Token") == "svc" && r.Header.Get("X-Subject-Token") == "svc" {
				fmt.Fprintf(w, `{"token":{"expires_at":%q,"user":{"id":"u-octavia"},"project":{"id":"service"},"roles":[{"name":"admin"}]}}`, exp)
				return
			}
			if r.Header.Get("X-Auth-Token") != "svc" || r.Header.Get("X-Subject-Token") != "user-token" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			fmt.Fprintf(w, `{"token":{"expires_at":%q,"user":{"id":"u-alice"},"project":{"id":"p1"},"roles":[{"name":"member"},{"name":"load-balancer_member"}]}}`, exp)
		}
	}))
	t.Cleanup(ks.Close)
	return ks
}

// Under Keystone the state needs a token; the page itself and its login
// form do not, and the form's token opens the state.
func TestDashboardKeystone(t *testing.T) {
	c := newCluster(t)
	ks := fakeKeystone(t)
	s, err := server.Start(context.Background(), server.Options{
		Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Database: c.dsn, DataDir: c.dir,
		AgentTokenFile: filepath.Join(c.dir, "agent-token"), VIPCIDR: "198.19.0.0/24", AckTimeout: time.Second, ReplicaID: "k", RBAC: "advanced",
		Auth: "keystone", Keystone: identity.KeystoneConfig{URL: ks.URL, User: "octavia", Password: "pw", Project: "service"},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Crash)
	base := "http://" + s.APIAddr.String()
	for _, tok := range []string{"", "forged"} {
		if code, _ := dashboardState(t, s, tok); code != http.StatusUnauthorized {
			t.Fatalf("state with token %q: %d, want 401", tok, code)
		}
	}
	resp, err := http.Get(base + "/dashboard/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("page without a token: %d", resp.StatusCode)
	}
	resp, err = http.Post(base+"/dashboard/api/login", "application/json",
		strings.NewReader(`{"username":"alice","password":"pw","project":"p1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var login struct {
		Token string `json:"token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&login)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || login.Token != "user-token" {
		t.Fatalf("login: %d %q", resp.StatusCode, login.Token)
	}
	code, st := dashboardState(t, s, login.Token)
	if code != http.StatusOK || st.Replica != "k" || st.LoadBalancers == nil {
		t.Fatalf("state with the login's token: %d %+v", code, st)
	}
	// A project member does not see the deployment's agents.
	if st.Agents != nil {
		t.Errorf("a member sees agents %+v", st.Agents)
	}
}
