package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/flowlb/flowlb/internal/server"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// fakeBarbicanPFX serves one PKCS12 secret (id pfx), and the payloads of
// others by id, to alice's token and the service's, and records the
// ACLs set.
type fakeBarbicanPFX struct {
	pfx    []byte
	others map[string][]byte
	mu     sync.Mutex
	acls   []string
}

func (f *fakeBarbicanPFX) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tok := r.Header.Get("X-Auth-Token"); tok != "user-token" && tok != "svc" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	id, part, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/secrets/"), "/")
	f.mu.Lock()
	other, known := f.others[id]
	f.mu.Unlock()
	known = known || id == "pfx"
	switch {
	case r.Method == http.MethodGet && id == "pfx" && part == "payload":
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Write(f.pfx)
	case r.Method == http.MethodGet && known && part == "payload":
		w.Write(other)
	case r.Method == http.MethodPatch && known && part == "acl":
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.acls = append(f.acls, string(b))
		f.mu.Unlock()
		w.Write([]byte(`{"acl_ref": "x"}`))
	default:
		http.NotFound(w, r)
	}
}

// apiCall is a call of the API as alice: its status and decoded body.
type apiCall func(method, path string, body any) (int, map[string]any)

// barbicanServer starts a server that reads certificates from Barbican
// (--tls-certificates barbican), with Keystone faked; it returns it, a
// way to call its API and its VIP subnet.
func barbicanServer(t *testing.T) (*server.Server, apiCall, string) {
	t.Helper()
	ks := fakeKeystone(t)
	dir := t.TempDir()
	s, err := server.Start(context.Background(), server.Options{
		Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", DataDir: dir, AgentTokenFile: filepath.Join(dir, "agent-token"),
		VIPCIDR: "198.19.0.0/24", AckTimeout: time.Second, ReplicaID: "tls", RBAC: "advanced", L7: true, TLSCertificates: "barbican",
		TLSRefresh: 200 * time.Millisecond,
		Auth:       "keystone", Keystone: identity.KeystoneConfig{URL: ks.URL, User: "octavia", Password: "pw", Project: "service"},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Crash)
	do := func(method, path string, body any) (int, map[string]any) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, "http://"+s.APIAddr.String()+path, bytes.NewReader(b))
		req.Header.Set("X-Auth-Token", "user-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	var subnet string
	if code, out := do("GET", "/v2.0/subnets?name=flowlb-vip-subnet", nil); code == 200 {
		subnet = out["subnets"].([]any)[0].(map[string]any)["id"].(string)
	}
	return s, do, subnet
}

// selfSignedPFX is a PKCS12 bundle of a new self-signed certificate for
// www.example.
func selfSignedPFX(t *testing.T) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "www.example"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	cert, _ := x509.ParseCertificate(der)
	pfx, err := pkcs12.Modern.Encode(key, cert, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return pfx
}

// TestTerminatedHTTPS: with --tls-certificates barbican, a
// TERMINATED_HTTPS listener's certificate is read from Barbican with the
// caller's token (the service user granted read access) and reaches the
// nodes' table with its key; a certificate renewed in Barbican reaches
// it within the refresh interval; a reference that cannot be read is
// Octavia's 400 and changes nothing.
func TestTerminatedHTTPS(t *testing.T) {
	kms := &fakeBarbicanPFX{pfx: selfSignedPFX(t)}
	ksrv := httptest.NewServer(kms)
	defer ksrv.Close()
	s, do, subnet := barbicanServer(t)
	ref := ksrv.URL + "/v1/secrets/pfx"
	code, out := do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnet,
		"listeners": []any{map[string]any{"protocol": "TERMINATED_HTTPS", "protocol_port": 443, "default_tls_container_ref": ref,
			"insert_headers": map[string]any{"X-SSL-Client-Has-Cert": "true"},
			"default_pool": map[string]any{"name": "web", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN",
				"members": []any{map[string]any{"address": "198.18.17.2", "protocol_port": 80}}}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	lbID := out["loadbalancer"].(map[string]any)["id"].(string)
	testutil.Eventually(t, 10*time.Second, "ACTIVE", func() (bool, string) {
		_, got := do("GET", "/v2/lbaas/loadbalancers/"+lbID, nil)
		st, _ := got["loadbalancer"].(map[string]any)["provisioning_status"].(string)
		return st == "ACTIVE", st
	})
	servedKey := func() string {
		for _, svc := range s.Hub.Table().Services {
			if svc.LoadBalancerID == lbID && svc.Key.Port == 443 && svc.L7 != nil && svc.L7.TLS != nil &&
				len(svc.L7.TLS.Certificates) == 1 && !svc.AllowNone {
				return string(svc.L7.TLS.Certificates[0].Key)
			}
		}
		return ""
	}
	first := servedKey()
	if !strings.Contains(first, "PRIVATE KEY") {
		t.Fatalf("the nodes' table has no TLS service with the certificate: %+v", s.Hub.Table().Services)
	}
	kms.mu.Lock()
	kms.pfx = selfSignedPFX(t)
	kms.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, "the renewed certificate in the nodes' table", func() (bool, string) {
		k := servedKey()
		return k != "" && k != first, "the first key still"
	})
	if len(kms.acls) == 0 || !strings.Contains(kms.acls[0], `"users":["u-octavia"]`) {
		t.Errorf("ACLs set %v, want read access for the service user u-octavia", kms.acls)
	}

	bad := ksrv.URL + "/v1/secrets/nope"
	code, out = do("POST", "/v2/lbaas/listeners", map[string]any{"listener": map[string]any{"loadbalancer_id": lbID,
		"protocol": "TERMINATED_HTTPS", "protocol_port": 8443, "default_tls_container_ref": bad}})
	if code != 400 || out["faultstring"] != "Could not retrieve certificate: ['"+bad+"']" {
		t.Errorf("an unreadable reference: %d %v", code, out)
	}
	if _, got := do("GET", "/v2/lbaas/listeners?loadbalancer_id="+lbID, nil); len(got["listeners"].([]any)) != 1 {
		t.Errorf("after the refusal: %v", got)
	}
}
