// Package keystone gives a test a throwaway Keystone: Debian's keystone
// package served by uwsgi, on SQLite, with fernet tokens, in a temporary
// directory that goes with the test. The caller chooses where it runs
// (Start: this process's network namespace; Argv: anywhere else, e.g. a
// lab namespace) and then shapes the catalog, projects and users through
// Admin, the Keystone v3 API.
package keystone

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// AdminUser and AdminProject are bootstrapped with the admin role;
// AdminPassword is the user's password.
const (
	AdminUser     = "admin"
	AdminProject  = "admin"
	AdminPassword = "adminpw"
	Region        = "RegionOne"
)

// Keystone is a bootstrapped Keystone that serves on Listen once started.
type Keystone struct {
	// URL is where clients reach it, Listen where uwsgi binds (host:port).
	URL, Listen string
	dir         string
	// origin is the directory its configuration names, if not dir.
	origin string
}

// Missing reports what of Keystone is not installed (nil: all is).
func Missing() error {
	var miss []string
	for _, b := range []string{"keystone-manage", "uwsgi", "keystone-wsgi-public"} {
		if _, err := exec.LookPath(b); err != nil {
			miss = append(miss, b)
		}
	}
	if _, err := os.Stat("/usr/lib/uwsgi/plugins/python3_plugin.so"); err != nil {
		miss = append(miss, "uwsgi's python3 plugin")
	}
	if len(miss) > 0 {
		return fmt.Errorf("missing %s (Debian packages keystone, uwsgi, uwsgi-plugin-python3)", strings.Join(miss, ", "))
	}
	return nil
}

// Prepare writes the configuration of a Keystone that binds listen and is
// reached at URL u, creates its database and keys and bootstraps the
// admin user, project and role with u as the identity endpoint. Nothing
// serves yet: see Start and Argv.
func Prepare(t testing.TB, listen, u string) *Keystone {
	t.Helper()
	return PrepareIn(t, t.TempDir(), listen, u)
}

// PrepareIn is Prepare in dir, an empty directory the caller removes
// (a lab's state directory, say).
func PrepareIn(t testing.TB, dir, listen, u string) *Keystone {
	t.Helper()
	if err := Missing(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"log", "fernet", "cred"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`[DEFAULT]
log_dir = %[1]s/log
[database]
connection = sqlite:///%[1]s/keystone.db
[fernet_tokens]
key_repository = %[1]s/fernet
[credential]
key_repository = %[1]s/cred
[identity]
password_hash_rounds = 4
[token]
expiration = 14400
`, dir)
	if err := os.WriteFile(filepath.Join(dir, "keystone.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	k := &Keystone{URL: strings.TrimRight(u, "/"), Listen: listen, dir: dir}
	v3 := k.URL + "/v3"
	for _, args := range [][]string{
		{"db_sync"},
		{"fernet_setup", "--keystone-user", "root", "--keystone-group", "root"},
		{"credential_setup", "--keystone-user", "root", "--keystone-group", "root"},
		{"bootstrap", "--bootstrap-password", AdminPassword, "--bootstrap-region-id", Region,
			"--bootstrap-admin-url", v3, "--bootstrap-public-url", v3, "--bootstrap-internal-url", v3},
	} {
		cmd := exec.Command("keystone-manage", append([]string{"--config-file", filepath.Join(dir, "keystone.conf")}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("keystone-manage %s: %v\n%s", args[0], err, out)
		}
		if args[0] == "db_sync" {
			// Write-ahead logging: a connection Keystone's pool keeps
			// idle inside a read transaction would otherwise fail the
			// next write with "database is locked".
			py := `import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA journal_mode=WAL")`
			if out, err := exec.Command("python3", "-c", py, filepath.Join(dir, "keystone.db")).CombinedOutput(); err != nil {
				t.Fatalf("keystone database in WAL mode: %v\n%s", err, out)
			}
		}
	}
	return k
}

// Copy returns a Keystone like k (its configuration, database, keys and
// addresses) in a directory of t's own, so that tests that each serve one
// share one Prepare, which takes keystone-manage a minute or two of CPU
// on a loaded machine. k must not be served (its database is copied as
// it stands).
func (k *Keystone) Copy(t testing.TB) *Keystone {
	t.Helper()
	return k.CopyTo(t, t.TempDir())
}

// At is the Keystone prepared (PrepareIn) in dir, to Copy; dir may be a
// copy of the directory it was prepared in, whose paths its
// configuration still names.
func At(dir, listen, u string) *Keystone {
	k := &Keystone{URL: strings.TrimRight(u, "/"), Listen: listen, dir: dir}
	if b, err := os.ReadFile(filepath.Join(dir, "keystone.conf")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "log_dir = "); ok {
				k.origin = strings.TrimSuffix(strings.TrimSpace(v), "/log")
			}
		}
	}
	return k
}

// CopyTo is Copy into dir, an empty or missing directory.
func (k *Keystone) CopyTo(t testing.TB, dir string) *Keystone {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(k.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(k.dir, path)
		if err != nil || rel == "." {
			return err
		}
		to := filepath.Join(dir, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Mkdir(to, info.Mode().Perm())
		}
		if filepath.Dir(rel) == "log" {
			return nil // the copy's own
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == "keystone.conf" {
			// Its paths are the directory's.
			from := k.dir
			if k.origin != "" {
				from = k.origin
			}
			b = bytes.ReplaceAll(b, []byte(from), []byte(dir))
		}
		return os.WriteFile(to, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copy Keystone's directory: %v", err)
	}
	return &Keystone{URL: k.URL, Listen: k.Listen, dir: dir}
}

// Argv is the uwsgi command line and environment that serve k. One
// process, one thread: SQLite has one writer. Each response says
// "Connection: close", so that no client reuses a connection uwsgi may be
// closing.
func (k *Keystone) Argv() (argv, env []string) {
	return []string{"uwsgi", "--http-socket", k.Listen, "--add-header", "Connection: close",
			"--plugin", "python3", "--wsgi-file", "/usr/bin/keystone-wsgi-public",
			"--master", "--die-on-term", "--processes", "1", "--threads", "1",
			"--logto", k.LogPath()},
		[]string{"OS_KEYSTONE_CONFIG_FILES=" + filepath.Join(k.dir, "keystone.conf")}
}

// LogPath is uwsgi's log.
func (k *Keystone) LogPath() string { return filepath.Join(k.dir, "log", "uwsgi.log") }

// KeystoneLogPath is Keystone's own log (its errors' tracebacks).
func (k *Keystone) KeystoneLogPath() string { return filepath.Join(k.dir, "log", "keystone.log") }

// Start serves k from this process's network namespace until the test
// ends, and waits until it answers.
func (k *Keystone) Start(t testing.TB) {
	t.Helper()
	argv, env := k.Argv()
	testutil.StartCommand(t, argv, env)
	k.Wait(t, http.DefaultClient)
}

// Wait waits until k answers through hc.
func (k *Keystone) Wait(t testing.TB, hc *http.Client) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, "Keystone at "+k.URL, func() (bool, string) {
		resp, err := hc.Get(k.URL + "/v3")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
}

// Token gets a project-scoped token for user (domain Default).
func Token(ctx context.Context, hc *http.Client, keystoneURL, user, password, project string) (string, error) {
	body := map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{"user": map[string]any{
			"name": user, "domain": map[string]any{"name": "Default"}, "password": password}}},
		"scope": map[string]any{"project": map[string]any{"name": project, "domain": map[string]any{"name": "Default"}}},
	}}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(keystoneURL, "/")+"/v3/auth/tokens", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 201 {
		msg, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("token for %s: %s: %s", user, resp.Status, msg)
	}
	return resp.Header.Get("X-Subject-Token"), nil
}

// Admin talks to Keystone's v3 API as the bootstrapped admin.
type Admin struct {
	url, token string
	hc         *http.Client
}

// Admin logs in as the bootstrapped admin through hc.
func (k *Keystone) Admin(ctx context.Context, hc *http.Client) (*Admin, error) {
	tok, err := Token(ctx, hc, k.URL, AdminUser, AdminPassword, AdminProject)
	if err != nil {
		return nil, err
	}
	return &Admin{url: k.URL + "/v3", token: tok, hc: hc}, nil
}

// call sends body (nil: none) and decodes the answer into out (nil:
// dropped); any status but 2xx is an error.
func (a *Admin) call(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// create posts {kind: fields} to /kinds and returns the new object's id.
func (a *Admin) create(kind string, fields map[string]any) (string, error) {
	var out map[string]struct {
		ID string `json:"id"`
	}
	if err := a.call("POST", "/"+kind+"s", map[string]any{kind: fields}, &out); err != nil {
		return "", err
	}
	if out[kind].ID == "" {
		return "", errors.New("keystone: no id for the new " + kind)
	}
	return out[kind].ID, nil
}

// Project creates a project in domain Default.
func (a *Admin) Project(name string) (string, error) {
	return a.create("project", map[string]any{"name": name, "domain_id": "default"})
}

// ProjectID returns the id of project name (domain Default).
func (a *Admin) ProjectID(name string) (string, error) {
	var out struct {
		Projects []struct {
			ID string `json:"id"`
		} `json:"projects"`
	}
	if err := a.call("GET", "/projects?domain_id=default&name="+url.QueryEscape(name), nil, &out); err != nil {
		return "", err
	}
	if len(out.Projects) != 1 {
		return "", fmt.Errorf("project %s: %d found", name, len(out.Projects))
	}
	return out.Projects[0].ID, nil
}

// User creates a user in domain Default whose default project is
// projectID ("": none).
func (a *Admin) User(name, password, projectID string) (string, error) {
	f := map[string]any{"name": name, "password": password, "domain_id": "default"}
	if projectID != "" {
		f["default_project_id"] = projectID
	}
	return a.create("user", f)
}

// Role returns the id of role name, created if there is none.
func (a *Admin) Role(name string) (string, error) {
	var out struct {
		Roles []struct {
			ID string `json:"id"`
		} `json:"roles"`
	}
	if err := a.call("GET", "/roles?name="+url.QueryEscape(name), nil, &out); err != nil {
		return "", err
	}
	if len(out.Roles) > 0 {
		return out.Roles[0].ID, nil
	}
	return a.create("role", map[string]any{"name": name})
}

// Grant gives user the roles on project (names, created if missing).
func (a *Admin) Grant(projectID, userID string, roles ...string) error {
	for _, r := range roles {
		id, err := a.Role(r)
		if err != nil {
			return err
		}
		if err := a.call("PUT", "/projects/"+projectID+"/users/"+userID+"/roles/"+id, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// ProjectUser creates project and, with it as default project, user
// with password, holding roles on it: the service user a server
// validates tokens as, or the user a client works as.
func (a *Admin) ProjectUser(project, user, password string, roles ...string) error {
	pid, err := a.Project(project)
	if err != nil {
		return err
	}
	uid, err := a.User(user, password, pid)
	if err != nil {
		return err
	}
	return a.Grant(pid, uid, roles...)
}

// Endpoint registers a service of type typ and its public, internal and
// admin endpoints at u in Region.
func (a *Admin) Endpoint(typ, name, u string) error {
	sid, err := a.create("service", map[string]any{"type": typ, "name": name})
	if err != nil {
		return err
	}
	for _, iface := range []string{"public", "internal", "admin"} {
		if _, err := a.create("endpoint", map[string]any{"service_id": sid, "interface": iface, "url": u, "region_id": Region}); err != nil {
			return err
		}
	}
	return nil
}

// FreeLoopbackAddr returns a loopback host:port that nothing listens on
// at the time of the call.
func FreeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
