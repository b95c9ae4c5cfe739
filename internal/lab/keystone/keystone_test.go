package keystone

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestKeystone starts a copy of a prepared Keystone on loopback,
// registers a service and a user, and reads them back from the user's
// token: the catalog holds the endpoint, the token the project and role.
// The copy keeps its log in its own directory.
func TestKeystone(t *testing.T) {
	testutil.RequireRoot(t) // keystone-manage sets its keys' owner
	addr, err := FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	prepared := Prepare(t, addr, "http://"+addr)
	k := prepared.Copy(t)
	if k.dir == prepared.dir {
		t.Fatal("the copy is in the prepared directory")
	}
	k.Start(t)
	t.Cleanup(func() {
		if _, err := os.Stat(k.LogPath()); err != nil {
			t.Errorf("the copy's log: %v", err)
		}
		if _, err := os.Stat(prepared.LogPath()); err == nil {
			t.Error("the copy logged in the prepared directory")
		}
	})
	a, err := k.Admin(t.Context(), http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := a.Project("demo")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.ProjectID("demo"); err != nil || got != pid {
		t.Errorf("ProjectID(demo) = %q, %v; want %q", got, err, pid)
	}
	if got, err := a.ProjectID("nothere"); err == nil {
		t.Errorf("ProjectID(nothere) = %q, want an error", got)
	}
	uid, err := a.User("alice", "alicepw", pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Grant(pid, uid, "member", "load-balancer_member"); err != nil {
		t.Fatal(err)
	}
	if err := a.Endpoint("load-balancer", "octavia", "http://198.18.0.1:9876"); err != nil {
		t.Fatal(err)
	}
	tok, err := Token(t.Context(), http.DefaultClient, k.URL, "alice", "alicepw", "demo")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", k.URL+"/v3/auth/tokens", nil)
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("X-Subject-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token struct {
			Project struct{ ID string } `json:"project"`
			Roles   []struct{ Name string }
			Catalog []struct {
				Type      string
				Endpoints []struct{ Interface, URL string }
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Token.Project.ID != pid {
		t.Errorf("token's project %q, want %q", out.Token.Project.ID, pid)
	}
	roles := map[string]bool{}
	for _, r := range out.Token.Roles {
		roles[r.Name] = true
	}
	if !roles["member"] || !roles["load-balancer_member"] {
		t.Errorf("token's roles %v, want member and load-balancer_member", roles)
	}
	var lb string
	for _, s := range out.Token.Catalog {
		for _, e := range s.Endpoints {
			if s.Type == "load-balancer" && e.Interface == "public" {
				lb = e.URL
			}
		}
	}
	if lb != "http://198.18.0.1:9876" {
		t.Errorf("catalog's public load-balancer endpoint %q, want http://198.18.0.1:9876 (catalog %+v)", lb, out.Token.Catalog)
	}
}
