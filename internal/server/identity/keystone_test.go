package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeKeystone answers the two calls a service makes: password
// authentication (POST /v3/auth/tokens) and token validation (GET).
type fakeKeystone struct {
	mu          sync.Mutex
	serviceTok  string
	serviceN    int
	validations int
	tokens      map[string]fakeToken
}

type fakeToken struct {
	project string
	roles   []string
	expires time.Time
}

func (f *fakeKeystone) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != "/v3/auth/tokens" {
		http.NotFound(w, r)
		return
	}
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
		if u := body.Auth.Identity.Password.User; u.Name != "octavia" || u.Password != "pw" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		f.serviceN++
		f.serviceTok = fmt.Sprintf("svc-%d", f.serviceN)
		w.Header().Set("X-Subject-Token", f.serviceTok)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"token":{"expires_at":%q,"user":{"id":"u-octavia"},"project":{"id":"p-service"},"roles":[{"name":"admin"}]}}`,
			time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	case http.MethodGet:
		if r.Header.Get("X-Auth-Token") != f.serviceTok || f.serviceTok == "" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		f.validations++
		tok, ok := f.tokens[r.Header.Get("X-Subject-Token")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		var roles []string
		for _, r := range tok.roles {
			roles = append(roles, fmt.Sprintf(`{"name":%q}`, r))
		}
		scope := fmt.Sprintf(`"project":{"id":%q}`, tok.project)
		if tok.project == "" {
			scope = `"system":{"all":true}`
		}
		fmt.Fprintf(w, `{"token":{"expires_at":%q,"user":{"id":"u-1"},%s,"roles":[%s]}}`,
			tok.expires.UTC().Format(time.RFC3339Nano), scope, strings.Join(roles, ","))
	}
}

func (f *fakeKeystone) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.validations
}

func newKeystoneAPI(t *testing.T, f *fakeKeystone) (*Keystone, *httptest.Server, *[]Caller) {
	t.Helper()
	ks := httptest.NewServer(f)
	t.Cleanup(ks.Close)
	k, err := NewKeystone(KeystoneConfig{URL: ks.URL + "/v3", User: "octavia", Password: "pw", Project: "service", CacheTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var seen []Caller
	var mu sync.Mutex
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := FromContext(r.Context())
		mu.Lock()
		seen = append(seen, c)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	public := func(r *http.Request) bool { return r.URL.Path == "/" }
	api := httptest.NewServer(KeystoneAuth(k, Policy{Personas: Advanced}, public, slog.New(slog.NewTextHandler(io.Discard, nil)), next))
	t.Cleanup(api.Close)
	return k, api, &seen
}

func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestKeystoneAuth(t *testing.T) {
	f := &fakeKeystone{tokens: map[string]fakeToken{
		"member-a": {project: "a", roles: []string{"load-balancer_member"}, expires: time.Now().Add(time.Hour)},
		"admin":    {project: "adm", roles: []string{"admin"}, expires: time.Now().Add(time.Hour)},
		"global":   {project: "g", roles: []string{"load-balancer_global_observer"}, expires: time.Now().Add(time.Hour)},
		"expired":  {project: "a", roles: []string{"load-balancer_member"}, expires: time.Now().Add(-time.Minute)},
		"system":   {project: "", roles: []string{"reader"}, expires: time.Now().Add(time.Hour)},
	}}
	_, api, seen := newKeystoneAPI(t, f)
	tests := []struct {
		name, path, token string
		code              int
		project           string
		admin, readAll    bool
	}{
		{"no token", "/v2/lbaas/loadbalancers", "", 401, "", false, false},
		{"unknown token", "/v2/lbaas/loadbalancers", "forged", 401, "", false, false},
		{"expired token", "/v2/lbaas/loadbalancers", "expired", 401, "", false, false},
		{"member", "/v2/lbaas/loadbalancers", "member-a", 204, "a", false, false},
		{"admin", "/v2/lbaas/loadbalancers", "admin", 204, "adm", true, true},
		{"global observer", "/v2/lbaas/loadbalancers", "global", 204, "g", false, true},
		{"public path without a token", "/", "", 204, "", false, false},
		{"system-scoped token", "/v2/lbaas/loadbalancers", "system", 204, "", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(*seen)
			resp := get(t, api.URL+tc.path, tc.token)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("HTTP %d, want %d (%s)", resp.StatusCode, tc.code, body)
			}
			if tc.code == 401 {
				if len(*seen) != before {
					t.Error("an unauthenticated request reached the handler")
				}
				if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, `Keystone uri="http://127.0.0.1:`) || strings.HasSuffix(got, `/v3"`) {
					t.Errorf("WWW-Authenticate %q", got)
				}
				want := `{"error":{"code":401,"title":"Unauthorized","message":"The request you have made requires authentication."}}`
				if string(body) != want {
					t.Errorf("body %s, want %s", body, want)
				}
				return
			}
			c := (*seen)[len(*seen)-1]
			if c.SystemScope != (tc.token == "system") {
				t.Errorf("caller %+v: system scope %v", c, c.SystemScope)
			}
			if c.ProjectID != tc.project || c.IsAdmin != tc.admin || c.ReadAll != tc.readAll {
				t.Errorf("caller %+v, want project %q admin %v readAll %v", c, tc.project, tc.admin, tc.readAll)
			}
			if string(c.Token) != tc.token {
				t.Errorf("caller's token %q, want the request's %q", string(c.Token), tc.token)
			}
		})
	}
}

// TestTokenRedacted: a caller printed or logged does not give its token
// away.
func TestTokenRedacted(t *testing.T) {
	c := Caller{ProjectID: "a", Token: "gAAAAAsecret"}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "caller", c, "token", c.Token)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "caller", c, "token", c.Token)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(c.Token), logged.String()} {
		if strings.Contains(s, "secret") {
			t.Errorf("token shown: %s", s)
		}
	}
	if !strings.Contains(fmt.Sprintf("%+v", c), "[token]") {
		t.Errorf("%+v: the token's place not marked", c)
	}
}

func TestKeystoneCache(t *testing.T) {
	f := &fakeKeystone{tokens: map[string]fakeToken{
		"long":  {project: "a", roles: []string{"load-balancer_member"}, expires: time.Now().Add(time.Hour)},
		"short": {project: "a", roles: []string{"load-balancer_member"}, expires: time.Now().Add(30 * time.Second)},
	}}
	k, _, _ := newKeystoneAPI(t, f)
	now := time.Now()
	k.now = func() time.Time { return now }
	ctx := t.Context()
	for range 3 {
		if _, err := k.Validate(ctx, "long"); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d validations for three uses of one token, want 1", n)
	}
	now = now.Add(61 * time.Second) // past the one-minute cache time
	if _, err := k.Validate(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("%d validations after the cache time, want 2", n)
	}
	// A token expiring before the cache time is not trusted past expiry.
	now = time.Now()
	if _, err := k.Validate(ctx, "short"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(31 * time.Second)
	if _, err := k.Validate(ctx, "short"); err != ErrInvalidToken {
		t.Errorf("expired cached token: %v, want ErrInvalidToken", err)
	}
	// A revoked service token is replaced, not fatal.
	f.mu.Lock()
	f.serviceTok = "revoked-elsewhere"
	f.mu.Unlock()
	now = now.Add(time.Hour)
	f.mu.Lock()
	f.tokens["fresh"] = fakeToken{project: "b", roles: []string{"load-balancer_observer"}, expires: time.Now().Add(2 * time.Hour)}
	f.mu.Unlock()
	if c, err := k.Validate(ctx, "fresh"); err != nil || c.ProjectID != "b" {
		t.Errorf("after the service token was revoked: %+v, %v", c, err)
	}
}

func TestKeystoneUnavailable(t *testing.T) {
	f := &fakeKeystone{tokens: map[string]fakeToken{}}
	k, api, seen := newKeystoneAPI(t, f)
	k.cfg.URL = "http://127.0.0.1:1"
	k.base = "http://127.0.0.1:1/v3"
	resp := get(t, api.URL+"/v2/lbaas/loadbalancers", "any")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || len(*seen) != 0 {
		t.Errorf("Keystone down: HTTP %d, handler reached %d times; want 503 and never", resp.StatusCode, len(*seen))
	}
}

func TestKeystoneLogin(t *testing.T) {
	f := &fakeKeystone{tokens: map[string]fakeToken{}}
	k, _, _ := newKeystoneAPI(t, f)
	tok, until, err := k.Login(t.Context(), "octavia", "", "pw", "service", "")
	if err != nil || tok != "svc-1" || time.Until(until) < 50*time.Minute {
		t.Fatalf("login: %q %v %v", tok, until, err)
	}
	if _, _, err := k.Login(t.Context(), "octavia", "", "wrong", "service", ""); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong password: %v, want ErrRefused", err)
	}
}
