package barbican

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestBarbican: Barbican under a Keystone, both on loopback in this
// process's namespace: a user with the creator role stores a secret and
// reads its payload back; without a token Barbican refuses.
func TestBarbican(t *testing.T) {
	testutil.RequireRoot(t) // keystone-manage sets its keys' owner
	for _, miss := range []func() error{Missing, keystone.Missing} {
		if err := miss(); err != nil {
			t.Skip(err)
		}
	}
	kaddr, err := keystone.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	ks := keystone.Prepare(t, kaddr, "http://"+kaddr).Copy(t)
	ks.Start(t)
	baddr, err := keystone.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Dir: filepath.Join(t.TempDir(), "barbican"), Listen: baddr, URL: "http://" + baddr,
		KeystoneURL: ks.URL, Project: "service"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ks.Admin(t.Context(), http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		a.ProjectUser(b.Project, b.User, b.Password, "admin", "service"),
		a.ProjectUser("demo", "alice", "alicepw", "member", "creator"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Cleanups run last first: the logs are read once Barbican stopped.
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []string{b.LogPath(), b.APILogPath()} {
				raw, _ := os.ReadFile(p)
				t.Logf("--- %s\n%s", p, raw)
			}
		}
	})
	argv, env := b.Argv()
	testutil.StartCommand(t, argv, env)
	b.Wait(t, http.DefaultClient)

	tok, err := keystone.Token(t.Context(), http.DefaultClient, ks.URL, "alice", "alicepw", "demo")
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, token string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			rd = bytes.NewReader(raw)
		}
		req, _ := http.NewRequest(method, b.URL+path, rd)
		req.Header.Set("Content-Type", "application/json")
		if strings.HasSuffix(path, "/payload") {
			req.Header.Set("Accept", "text/plain")
		}
		if token != "" {
			req.Header.Set("X-Auth-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	secret := map[string]any{"name": "s", "payload": "hello", "payload_content_type": "text/plain"}
	if code, _ := do("POST", "/v1/secrets", "", secret); code != 401 {
		t.Errorf("store without a token: %d, want 401", code)
	}
	code, out := do("POST", "/v1/secrets", tok, secret)
	var created struct {
		Ref string `json:"secret_ref"`
	}
	if code != 201 || json.Unmarshal(out, &created) != nil || !strings.HasPrefix(created.Ref, b.URL+"/v1/secrets/") {
		t.Fatalf("store: %d %s", code, out)
	}
	if code, out := do("GET", strings.TrimPrefix(created.Ref, b.URL)+"/payload", tok, nil); code != 200 || string(out) != "hello" {
		t.Errorf("payload: %d %q, want 200 hello", code, out)
	}
}
