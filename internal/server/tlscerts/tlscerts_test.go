package tlscerts

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
)

type issued struct {
	cert, ca *x509.Certificate
	key      *ecdsa.PrivateKey
	certPEM  []byte
	keyPEM   []byte
	caPEM    []byte
}

// issue makes a CA and a certificate it signed for subject and names.
func issue(t *testing.T, subject pkix.Name, names ...string) issued {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: subject, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, _ := x509.MarshalECPrivateKey(key)
	return issued{cert: cert, ca: ca, key: key, certPEM: pemCert(der), keyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), caPEM: pemCert(caDER)}
}

func TestFromParts(t *testing.T) {
	a, b := issue(t, pkix.Name{CommonName: "www.example"}), issue(t, pkix.Name{}, "api.example")
	c, err := FromParts(a.certPEM, a.keyPEM, a.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Chain) != string(a.certPEM)+string(a.caPEM) {
		t.Errorf("chain: the leaf, then the intermediates; got\n%s", c.Chain)
	}
	if _, err := FromParts(b.certPEM, b.keyPEM, nil); err != nil {
		t.Errorf("a certificate with a DNS name only: %v", err)
	}
	noName := issue(t, pkix.Name{Organization: []string{"Org"}})
	for _, tc := range []struct {
		name              string
		cert, key, interm []byte
		want              error
	}{
		{"another key", a.certPEM, b.keyPEM, nil, ErrMismatchedKey},
		{"no certificate", []byte("not PEM"), a.keyPEM, nil, ErrUnreadableCert},
		{"a key where the certificate goes", a.keyPEM, a.keyPEM, nil, ErrUnreadableCert},
		{"no CN or DNS name", noName.certPEM, noName.keyPEM, nil, ErrNoSubject},
	} {
		if _, err := FromParts(tc.cert, tc.key, tc.interm); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if ErrNoSubject.Error() != "No CN or DNSName(s) found in certificate. The certificate is invalid." {
		t.Error("Octavia's text changed")
	}
}

func TestFromPKCS12(t *testing.T) {
	a := issue(t, pkix.Name{CommonName: "www.example"})
	// LegacyRC2 is what octavia-ingress-controller stores in Barbican.
	for _, enc := range []*pkcs12.Encoder{pkcs12.Passwordless, pkcs12.Modern, pkcs12.LegacyRC2, pkcs12.LegacyDES} {
		pfx, err := enc.Encode(a.key, a.cert, []*x509.Certificate{a.ca}, "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := FromPKCS12(pfx)
		if err != nil {
			t.Fatal(err)
		}
		if string(c.Chain) != string(a.certPEM)+string(a.caPEM) || !strings.Contains(string(c.Key), "PRIVATE KEY") {
			t.Errorf("from PKCS12: %s", c.Chain)
		}
	}
	locked, _ := pkcs12.Modern.Encode(a.key, a.cert, nil, "secret")
	if _, err := FromPKCS12(locked); err == nil || !strings.HasPrefix(err.Error(), string(ErrPKCS12)) {
		t.Errorf("a bundle with a pass phrase: %v", err)
	}
}

func TestCAAndCRL(t *testing.T) {
	a := issue(t, pkix.Name{CommonName: "client CA"})
	if _, err := CA(a.caPEM); err != nil {
		t.Error(err)
	}
	if _, err := CA([]byte("nope")); err == nil {
		t.Error("a CA without a certificate")
	}
	if _, err := CRL(a.caPEM); err == nil {
		t.Error("a CRL without a revocation list")
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in                 string
		endpoint, kind, id string
	}{
		{"https://barbican.example:9311/v1/secrets/1234", "https://barbican.example:9311/v1/", "secrets", "1234"},
		{"http://198.18.0.250:9311/key-manager/v1/containers/ab-cd", "http://198.18.0.250:9311/key-manager/v1/", "containers", "ab-cd"},
	} {
		r, err := parseRef(tc.in)
		if err != nil || r.endpoint != tc.endpoint || r.kind != tc.kind || r.id != tc.id {
			t.Errorf("parseRef(%q) = %+v, %v", tc.in, r, err)
		}
	}
	for _, bad := range []string{"", "1234", "https://barbican/v1/orders/1", "https://barbican/v1/secrets/", "/v1/secrets/1"} {
		if _, err := parseRef(bad); err == nil {
			t.Errorf("parseRef(%q) accepted", bad)
		}
	}
}

// fakeBarbican serves secrets and containers to one token, and records
// the ACLs it is asked to set.
type fakeBarbican struct {
	token string
	// service is a second token it takes (the server's service user's).
	service    string
	secrets    map[string][]byte
	containers map[string]map[string]string // name → secret id
	mu         sync.Mutex
	acls       []string
	srv        *httptest.Server
}

func (f *fakeBarbican) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tok := r.Header.Get("X-Auth-Token"); tok != f.token && (f.service == "" || tok != f.service) {
		http.Error(w, `{"code": 403}`, http.StatusForbidden)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && len(parts) == 4 && parts[1] == "secrets" && parts[3] == "payload":
		data, ok := f.secrets[parts[2]]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	case r.Method == http.MethodGet && len(parts) == 3 && parts[1] == "containers":
		c, ok := f.containers[parts[2]]
		if !ok {
			http.NotFound(w, r)
			return
		}
		var refs []map[string]string
		for name, id := range c {
			refs = append(refs, map[string]string{"name": name, "secret_ref": f.srv.URL + "/v1/secrets/" + id})
		}
		json.NewEncoder(w).Encode(map[string]any{"container_ref": f.srv.URL + r.URL.Path, "type": "certificate", "secret_refs": refs})
	case r.Method == http.MethodPatch && len(parts) == 4 && parts[3] == "acl":
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.acls = append(f.acls, parts[1]+"/"+parts[2]+" "+strings.TrimSpace(string(body)))
		f.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]string{"acl_ref": f.srv.URL + r.URL.Path})
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
	}
}

func TestBarbican(t *testing.T) {
	a := issue(t, pkix.Name{CommonName: "www.example"})
	pfx, _ := pkcs12.Modern.Encode(a.key, a.cert, nil, "")
	f := &fakeBarbican{token: "caller-token",
		secrets:    map[string][]byte{"pfx": pfx, "cert": a.certPEM, "key": a.keyPEM, "ca": a.caPEM},
		containers: map[string]map[string]string{"tls": {"certificate": "cert", "private_key": "key", "intermediates": "ca"}}}
	f.srv = httptest.NewServer(f)
	defer f.srv.Close()
	b := &Barbican{HTTP: f.srv.Client(), ServiceUser: func(context.Context) (string, error) { return "octavia-user-id", nil }}
	ctx := t.Context()

	for _, ref := range []string{f.srv.URL + "/v1/secrets/pfx", f.srv.URL + "/v1/containers/tls"} {
		c, err := b.Certificate(ctx, ref, "caller-token")
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if !strings.HasPrefix(string(c.Chain), string(a.certPEM)) {
			t.Errorf("%s: chain %s", ref, c.Chain)
		}
		if _, err := b.Certificate(ctx, ref, "someone-else"); err == nil {
			t.Errorf("%s: read with another token", ref)
		}
	}
	if _, err := b.Certificate(ctx, f.srv.URL+"/v1/secrets/missing", "caller-token"); err == nil {
		t.Error("a missing secret was read")
	}
	if ca, err := b.Secret(ctx, f.srv.URL+"/v1/secrets/ca", "caller-token"); err != nil || string(ca) != string(a.caPEM) {
		t.Errorf("secret: %q, %v", ca, err)
	}
	if err := b.Grant(ctx, f.srv.URL+"/v1/containers/tls", "caller-token"); err != nil {
		t.Fatal(err)
	}
	if len(f.acls) != 4 || !strings.HasPrefix(f.acls[0], "containers/tls ") || !strings.Contains(f.acls[0], `"users":["octavia-user-id"]`) {
		t.Errorf("ACLs set: %v, want the container's and its three secrets' read ACL for the service user", f.acls)
	}
}

// TestStore: the references a request names are read as its caller,
// refused with Octavia's texts, and kept for the data plane, which reads
// what it lacks as the service user.
func TestStore(t *testing.T) {
	a := issue(t, pkix.Name{CommonName: "www.example"})
	other := issue(t, pkix.Name{CommonName: "other"})
	pfx, _ := pkcs12.Modern.Encode(a.key, a.cert, nil, "")
	mismatched, _ := pkcs12.Passwordless.Encode(other.key, a.cert, nil, "")
	f := &fakeBarbican{token: "caller", service: "service",
		secrets: map[string][]byte{"pfx": pfx, "mismatched": mismatched, "ca": a.caPEM, "notca": []byte("not PEM")}}
	f.srv = httptest.NewServer(f)
	defer f.srv.Close()
	serviceAsked := 0
	s := NewStore(&Barbican{HTTP: f.srv.Client(), ServiceUser: func(context.Context) (string, error) { return "svc", nil }}, func(context.Context) (string, error) { serviceAsked++; return "service", nil })
	ctx := identity.WithCaller(t.Context(), identity.Caller{ProjectID: "p", Token: "caller"})
	ref := func(id string) string { return f.srv.URL + "/v1/secrets/" + id }

	if err := s.CheckTLS(ctx, lbaas.TLSRefs{Certificates: []string{ref("pfx")}, ClientCA: ref("ca")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		refs lbaas.TLSRefs
		want string
	}{
		{lbaas.TLSRefs{Certificates: []string{ref("pfx"), ref("gone"), ref("gone2")}}, "Could not retrieve certificate: ['" + ref("gone") + "', '" + ref("gone2") + "']"},
		{lbaas.TLSRefs{Certificates: []string{ref("mismatched")}}, "Key and x509 certificate do not match"},
		{lbaas.TLSRefs{Certificates: []string{ref("pfx")}, ClientCA: ref("notca")}, "The client authentication CA certificate is invalid."},
		{lbaas.TLSRefs{Certificates: []string{ref("pfx")}, ClientCA: ref("ca"), ClientCRL: ref("gone")}, "Could not retrieve certificate: ['" + ref("gone") + "']"},
	} {
		err := s.CheckTLS(ctx, tc.refs)
		var le *lbaas.Error
		if !errors.As(err, &le) || !strings.Contains(le.Detail, tc.want) {
			t.Errorf("CheckTLS(%+v) = %v, want %q", tc.refs, err, tc.want)
		}
	}
	if err := s.CheckTLS(identity.WithCaller(t.Context(), identity.Caller{ProjectID: "p", Token: "stranger"}), lbaas.TLSRefs{Certificates: []string{ref("pfx")}}); err == nil {
		t.Error("a caller whose token Barbican refuses read a certificate")
	}

	// The data plane gets what the API read without a service token.
	if c, err := s.Certificate(t.Context(), ref("pfx")); err != nil || len(c.Key) == 0 || serviceAsked != 0 {
		t.Errorf("a certificate read by the API: %v, service token asked %d times", err, serviceAsked)
	}
	if ca, err := s.Secret(t.Context(), ref("ca")); err != nil || string(ca) != string(a.caPEM) || serviceAsked != 0 {
		t.Errorf("a CA read by the API: %v", err)
	}
	// What it lacks it reads as the service user, once.
	fresh := NewStore(s.Barbican, s.ServiceToken)
	for range 2 {
		if _, err := fresh.Certificate(t.Context(), ref("pfx")); err != nil {
			t.Fatal(err)
		}
	}
	if serviceAsked != 1 {
		t.Errorf("service token asked %d times for one certificate read twice, want 1", serviceAsked)
	}
	if _, err := fresh.Certificate(t.Context(), ref("gone")); err == nil {
		t.Error("a missing certificate was served")
	}
}
