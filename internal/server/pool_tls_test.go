package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// caAndCRL are the PEM of a new CA and of an empty revocation list it
// signed.
func caAndCRL(t *testing.T) (ca, crl []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "members CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	list, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour)}, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: list})
}

// TestPoolTLS: with --tls-certificates barbican, a tls_enabled pool's
// client certificate, CA and CRL are read from Barbican with the
// caller's token and reach the nodes' table, the certificate renewed
// within the refresh interval; an unreadable reference and a CA that is
// no certificate are Octavia's 400s and change nothing.
func TestPoolTLS(t *testing.T) {
	ca, crl := caAndCRL(t)
	kms := &fakeBarbicanPFX{pfx: selfSignedPFX(t), others: map[string][]byte{"ca": ca, "crl": crl, "junk": []byte("not a certificate")}}
	ksrv := httptest.NewServer(kms)
	defer ksrv.Close()
	s, do, subnet := barbicanServer(t)
	ref := func(id string) string { return ksrv.URL + "/v1/secrets/" + id }
	code, out := do("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"vip_subnet_id": subnet,
		"listeners": []any{map[string]any{"protocol": "HTTP", "protocol_port": 80,
			"default_pool": map[string]any{"name": "web", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "tls_enabled": true,
				"tls_container_ref": ref("pfx"), "ca_tls_container_ref": ref("ca"), "crl_container_ref": ref("crl"),
				"alpn_protocols": []string{"h2", "http/1.1"}, "tls_versions": []string{"TLSv1.2", "TLSv1.3"},
				"members": []any{map[string]any{"address": "198.18.17.2", "protocol_port": 443}}}}}}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	lbID := out["loadbalancer"].(map[string]any)["id"].(string)
	testutil.Eventually(t, 10*time.Second, "ACTIVE", func() (bool, string) {
		_, got := do("GET", "/v2/lbaas/loadbalancers/"+lbID, nil)
		st, _ := got["loadbalancer"].(map[string]any)["provisioning_status"].(string)
		return st == "ACTIVE", st
	})
	var served *flows.L7Pool
	for _, svc := range s.Hub.Table().Services {
		if svc.LoadBalancerID == lbID && svc.L7 != nil && len(svc.L7.Pools) == 1 {
			served = &svc.L7.Pools[0]
		}
	}
	if served == nil || served.TLS == nil {
		t.Fatalf("the nodes' table has no pool with TLS: %+v", s.Hub.Table().Services)
	}
	if tl := served.TLS; string(tl.CA) != string(ca) || string(tl.CRL) != string(crl) || tl.Certificate == nil ||
		!strings.Contains(string(tl.Certificate.Key), "PRIVATE KEY") || strings.Join(tl.ALPN, ",") != "h2,http/1.1" ||
		strings.Join(tl.Versions, ",") != "TLSv1.2,TLSv1.3" || len(served.Backends) != 1 {
		t.Errorf("the pool served: %+v with TLS %+v", served, tl)
	}
	kms.mu.Lock()
	acls := strings.Join(kms.acls, "\n")
	kms.pfx = selfSignedPFX(t)
	kms.mu.Unlock()
	first := string(served.TLS.Certificate.Key)
	testutil.Eventually(t, 10*time.Second, "the renewed client certificate in the nodes' table", func() (bool, string) {
		for _, svc := range s.Hub.Table().Services {
			if svc.LoadBalancerID == lbID && svc.L7 != nil && len(svc.L7.Pools) == 1 {
				if tl := svc.L7.Pools[0].TLS; tl != nil && tl.Certificate != nil && string(tl.Certificate.Key) != first {
					return true, ""
				}
			}
		}
		return false, "the first key still"
	})
	if n := strings.Count(acls, `"users":["u-octavia"]`); n < 3 {
		t.Errorf("read access granted %d times, want 3 (certificate, CA, CRL): %s", n, acls)
	}

	for _, tc := range []struct {
		name, field, id, want string
	}{
		{"an unreadable client certificate", "tls_container_ref", "nope", "Could not retrieve certificate: ['" + ref("nope") + "']"},
		{"an unreadable CA", "ca_tls_container_ref", "nope", "Could not retrieve certificate: ['" + ref("nope") + "']"},
		{"a CA that is no certificate", "ca_tls_container_ref", "junk", "The client authentication CA certificate is invalid. It must be a valid x509 PEM format certificate."},
	} {
		code, out := do("POST", "/v2/lbaas/pools", map[string]any{"pool": map[string]any{"loadbalancer_id": lbID, "protocol": "HTTP",
			"lb_algorithm": "ROUND_ROBIN", "tls_enabled": true, tc.field: ref(tc.id)}})
		if msg, _ := out["faultstring"].(string); code != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %v, want 400 %q", tc.name, code, out, tc.want)
		}
	}
	if _, got := do("GET", "/v2/lbaas/pools?loadbalancer_id="+lbID, nil); len(got["pools"].([]any)) != 1 {
		t.Errorf("after the refusals: %v", got)
	}
}
