package identity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// KeystoneConfig is the Keystone v3 endpoint and the service's own
// credentials, which it needs to validate users' tokens.
type KeystoneConfig struct {
	URL           string // e.g. http://127.0.0.1:5000 (with or without /v3)
	User          string
	Password      string
	UserDomain    string // name; default "Default"
	Project       string // the service project's name
	ProjectDomain string // name; default "Default"
	// CacheTime bounds how long a validated token is trusted without
	// asking Keystone again (default 5 minutes, keystonemiddleware's
	// token_cache_time); never past the token's own expiry.
	CacheTime time.Duration
	// CacheSize bounds the number of cached tokens (default 10,000).
	CacheSize int
	Client    *http.Client
}

// Keystone validates tokens against a Keystone v3 server.
type Keystone struct {
	cfg  KeystoneConfig
	base string // .../v3
	now  func() time.Time

	mu           sync.Mutex
	serviceToken string
	serviceUntil time.Time
	cache        map[[32]byte]cached
}

type cached struct {
	caller Caller
	until  time.Time
}

// ErrInvalidToken is a token Keystone does not accept (unknown, expired,
// revoked).
var ErrInvalidToken = errors.New("invalid token")

// NewKeystone returns a validator; it does not contact Keystone yet.
func NewKeystone(cfg KeystoneConfig) (*Keystone, error) {
	if cfg.URL == "" || cfg.User == "" || cfg.Password == "" || cfg.Project == "" {
		return nil, errors.New("keystone: URL, user, password and project are required")
	}
	if cfg.UserDomain == "" {
		cfg.UserDomain = "Default"
	}
	if cfg.ProjectDomain == "" {
		cfg.ProjectDomain = "Default"
	}
	if cfg.CacheTime == 0 {
		cfg.CacheTime = 5 * time.Minute
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10000
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	base := strings.TrimSuffix(strings.TrimSuffix(cfg.URL, "/"), "/v3")
	return &Keystone{cfg: cfg, base: base + "/v3", now: time.Now, cache: map[[32]byte]cached{}}, nil
}

// WWWAuthenticate is the challenge keystonemiddleware sends with a 401.
func (k *Keystone) WWWAuthenticate() string {
	return fmt.Sprintf("Keystone uri=%q", strings.TrimSuffix(k.base, "/v3"))
}

type tokenBody struct {
	Token struct {
		ExpiresAt time.Time `json:"expires_at"`
		User      struct {
			ID string `json:"id"`
		} `json:"user"`
		Project *struct {
			ID string `json:"id"`
		} `json:"project"`
		System map[string]any `json:"system"`
		Roles  []struct {
			Name string `json:"name"`
		} `json:"roles"`
	} `json:"token"`
}

// Validate returns the caller a token stands for, from the cache or from
// Keystone (GET /v3/auth/tokens with the service's own token).
func (k *Keystone) Validate(ctx context.Context, token string) (Caller, error) {
	key := sha256.Sum256([]byte(token))
	now := k.now()
	k.mu.Lock()
	if e, ok := k.cache[key]; ok && now.Before(e.until) {
		k.mu.Unlock()
		return e.caller, nil
	}
	k.mu.Unlock()

	var tb tokenBody
	err := k.asService(ctx, func(service string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.base+"/auth/tokens", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-Auth-Token", service)
		req.Header.Set("X-Subject-Token", token)
		resp, err := k.cfg.Client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return resp.StatusCode, json.NewDecoder(resp.Body).Decode(&tb)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	})
	if err != nil {
		return Caller{}, err
	}
	if !tb.Token.ExpiresAt.IsZero() && !now.Before(tb.Token.ExpiresAt) {
		return Caller{}, ErrInvalidToken
	}
	c := Caller{UserID: tb.Token.User.ID, SystemScope: tb.Token.System["all"] == true}
	if tb.Token.Project != nil {
		c.ProjectID = tb.Token.Project.ID
	}
	for _, r := range tb.Token.Roles {
		c.Roles = append(c.Roles, r.Name)
	}
	until := now.Add(k.cfg.CacheTime)
	if !tb.Token.ExpiresAt.IsZero() && tb.Token.ExpiresAt.Before(until) {
		until = tb.Token.ExpiresAt
	}
	k.mu.Lock()
	if len(k.cache) >= k.cfg.CacheSize {
		k.evict(now)
	}
	k.cache[key] = cached{caller: c, until: until}
	k.mu.Unlock()
	return c, nil
}

// evict drops expired entries, and half of the rest if that is not
// enough. Called with k.mu held.
func (k *Keystone) evict(now time.Time) {
	for key, e := range k.cache {
		if !now.Before(e.until) {
			delete(k.cache, key)
		}
	}
	n := len(k.cache) / 2
	for key := range k.cache {
		if len(k.cache) <= n || len(k.cache) < k.cfg.CacheSize {
			break
		}
		delete(k.cache, key)
	}
}

// asService runs call with the service token, fetching one first if
// needed and once more if Keystone refuses it (401): a revoked or expired
// service token must not lock every user out.
func (k *Keystone) asService(ctx context.Context, call func(service string) (int, error)) error {
	for attempt := 0; ; attempt++ {
		tok, err := k.service(ctx, attempt > 0)
		if err != nil {
			return err
		}
		code, err := call(tok)
		if err != nil {
			return fmt.Errorf("keystone: %w", err)
		}
		switch {
		case code == http.StatusOK:
			return nil
		case code == http.StatusNotFound:
			return ErrInvalidToken
		case code == http.StatusUnauthorized && attempt == 0:
			continue
		default:
			return fmt.Errorf("keystone: token validation answered HTTP %d", code)
		}
	}
}

// service returns the service's token, authenticating when there is none,
// it expires within a minute, or refresh is set.
func (k *Keystone) service(ctx context.Context, refresh bool) (string, error) {
	k.mu.Lock()
	if !refresh && k.serviceToken != "" && k.now().Add(time.Minute).Before(k.serviceUntil) {
		defer k.mu.Unlock()
		return k.serviceToken, nil
	}
	k.mu.Unlock()
	tok, until, err := k.passwordToken(ctx, k.cfg.User, k.cfg.UserDomain, k.cfg.Password, k.cfg.Project, k.cfg.ProjectDomain)
	if err != nil {
		return "", fmt.Errorf("keystone: service authentication as %s: %w", k.cfg.User, err)
	}
	k.mu.Lock()
	k.serviceToken, k.serviceUntil = tok, until
	k.mu.Unlock()
	return tok, nil
}

// ServiceToken is a token of the server's service user, fetched when
// there is none or it expires within a minute.
func (k *Keystone) ServiceToken(ctx context.Context) (string, error) { return k.service(ctx, false) }

// ServiceUserID is the Keystone id of the server's service user (what
// Barbican's ACLs name).
func (k *Keystone) ServiceUserID(ctx context.Context) (string, error) {
	tok, err := k.service(ctx, false)
	if err != nil {
		return "", err
	}
	c, err := k.Validate(ctx, tok)
	if err != nil {
		return "", err
	}
	return c.UserID, nil
}

// ErrRefused is a password authentication Keystone refused.
var ErrRefused = errors.New("keystone refused the credentials")

// Login authenticates a user with a password, scoped to a project (the
// dashboard's login form), and returns the token and its expiry.
func (k *Keystone) Login(ctx context.Context, user, userDomain, password, project, projectDomain string) (string, time.Time, error) {
	if userDomain == "" {
		userDomain = "Default"
	}
	if projectDomain == "" {
		projectDomain = "Default"
	}
	return k.passwordToken(ctx, user, userDomain, password, project, projectDomain)
}

// passwordToken asks Keystone for a project-scoped token with a password.
func (k *Keystone) passwordToken(ctx context.Context, user, userDomain, password, project, projectDomain string) (string, time.Time, error) {
	body := map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{"user": map[string]any{
			"name": user, "domain": map[string]any{"name": userDomain}, "password": password}}},
		"scope": map[string]any{"project": map[string]any{"name": project, "domain": map[string]any{"name": projectDomain}}},
	}}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.base+"/auth/tokens", bytes.NewReader(b))
	if err != nil {
		return "", time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.cfg.Client.Do(req)
	if err != nil {
		return "", time.Time{}, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated:
	case http.StatusUnauthorized, http.StatusNotFound, http.StatusBadRequest:
		return "", time.Time{}, fmt.Errorf("%w (HTTP %d)", ErrRefused, resp.StatusCode)
	default:
		return "", time.Time{}, fmt.Errorf("password authentication answered HTTP %d", resp.StatusCode)
	}
	var tb tokenBody
	if err := json.NewDecoder(resp.Body).Decode(&tb); err != nil {
		return "", time.Time{}, fmt.Errorf("token: %w", err)
	}
	tok := resp.Header.Get("X-Subject-Token")
	if tok == "" {
		return "", time.Time{}, errors.New("authentication returned no token")
	}
	return tok, tb.Token.ExpiresAt, nil
}

// KeystoneAuth authenticates every request by its X-Auth-Token, except
// the paths in public (version discovery, health checks, metrics).
// Unauthenticated requests get keystonemiddleware's 401 and never reach
// next; the caller's rights come from policy.
func KeystoneAuth(k *Keystone, policy Policy, public func(*http.Request) bool, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if public != nil && public(r) {
			next.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), Caller{Policy: &policy})))
			return
		}
		token := r.Header.Get("X-Auth-Token")
		if token == "" {
			unauthorized(w, k)
			return
		}
		c, err := k.Validate(r.Context(), token)
		switch {
		case errors.Is(err, ErrInvalidToken):
			unauthorized(w, k)
			return
		case err != nil:
			log.Error("token validation", "err", err)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":503,"title":"Service Unavailable","message":"The Keystone service is temporarily unavailable."}}`))
			return
		}
		c = policy.Resolve(c)
		c.Token = Token(token)
		next.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), c)))
	})
}

func unauthorized(w http.ResponseWriter, k *Keystone) {
	w.Header().Set("WWW-Authenticate", k.WWWAuthenticate())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"error":{"code":401,"title":"Unauthorized","message":"The request you have made requires authentication."}}`))
}
