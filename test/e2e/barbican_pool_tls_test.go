package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/acls"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/containers"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/secrets"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/openstack"
)

// caWithCRL is a new CA's certificate and an empty revocation list it
// signed, PEM.
func caWithCRL(t *testing.T, name string) (caPEM, crlPEM string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	list, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now(),
		NextUpdate: time.Now().Add(time.Hour)}, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), string(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: list}))
}

// TestRealBarbicanPoolTLS: flowlb's server with --tls-certificates
// barbican against the bed's Keystone and Barbican. A tenant stores a
// certificate container (the certificate its pool presents to the
// members), a CA and a CRL, and creates through flowlb's API a pool with
// tls_enabled naming the three: flowlb reads them with the tenant's
// token, grants its service user read access (Barbican's ACLs) and
// takes the pool. What the tenant cannot read (a secret of another
// project, one that does not exist) is Octavia's 400 `Could not
// retrieve certificate`, a CA that is no certificate and a CRL of
// another CA Octavia's texts, and none of them changes anything.
func TestRealBarbicanPoolTLS(t *testing.T) {
	c, cloud, _, _ := newRealNeutronCluster(t, "--auth", "keystone", "--l7", "--tls-certificates", "barbican")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cloud.CreateRoles(openstack.OctaviaRoles...)
	const project, user, password = "pooltls", "pooltls-user", "pooltlspw"
	pid := cloud.ProjectUser(project, user, password, "member", "creator", "load-balancer_member")
	var nw, sub map[string]any
	if err := cloud.Call("POST", "/networks", map[string]any{"network": map[string]any{"name": "pooltls", "project_id": pid}}, &struct {
		Network *map[string]any `json:"network"`
	}{&nw}); err != nil {
		t.Fatal(err)
	}
	if err := cloud.Call("POST", "/subnets", map[string]any{"subnet": map[string]any{"network_id": nw["id"], "project_id": pid,
		"ip_version": 4, "cidr": "198.18.227.0/24", "enable_dhcp": false}}, &struct {
		Subnet *map[string]any `json:"subnet"`
	}{&sub}); err != nil {
		t.Fatal(err)
	}
	tok, err := keystone.Token(ctx, cloud.HTTP, cloud.KeystoneURL, user, password, project)
	if err != nil {
		t.Fatal(err)
	}
	km, err := gopenstack.NewKeyManagerV1(login(t, cloud, user, password, project), gophercloud.EndpointOpts{Region: keystone.Region})
	if err != nil {
		t.Fatal(err)
	}
	store := func(km *gophercloud.ServiceClient, name string, typ secrets.SecretType, payload string) string {
		t.Helper()
		s, err := secrets.Create(ctx, km, secrets.CreateOpts{Name: name, SecretType: typ, Payload: payload, PayloadContentType: "text/plain"}).Extract()
		if err != nil {
			t.Fatalf("store secret %s: %v", name, err)
		}
		return s.SecretRef
	}
	certPEM, keyPEM := selfSigned(t, "flowlb-proxy.test")
	certRef, keyRef := store(km, "client-cert", secrets.CertificateSecret, certPEM), store(km, "client-key", secrets.PrivateSecret, keyPEM)
	cont, err := containers.Create(ctx, km, containers.CreateOpts{Type: containers.CertificateContainer, Name: "client",
		SecretRefs: []containers.SecretRef{{Name: "certificate", SecretRef: certRef}, {Name: "private_key", SecretRef: keyRef}}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	caPEM, crlPEM := caWithCRL(t, "members CA")
	_, otherCRL := caWithCRL(t, "another CA")
	caRef, crlRef := store(km, "members-ca", secrets.CertificateSecret, caPEM), store(km, "members-crl", secrets.OpaqueSecret, crlPEM)
	junkRef := store(km, "junk", secrets.OpaqueSecret, "not a certificate")
	otherCRLRef := store(km, "other-crl", secrets.OpaqueSecret, otherCRL)
	adminKM, err := gopenstack.NewKeyManagerV1(cloud.Provider, gophercloud.EndpointOpts{Region: keystone.Region})
	if err != nil {
		t.Fatal(err)
	}
	adminsCA := store(adminKM, "admins-ca", secrets.CertificateSecret, caPEM)
	missing := cloud.BarbicanURL + "/v1/secrets/00000000-0000-4000-8000-000000000000"

	c.authToken = tok
	code, body := c.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{"name": "pooltls", "vip_subnet_id": sub["id"]}})
	if code != 201 {
		t.Fatalf("load balancer: %d %v", code, body)
	}
	lbID := body["loadbalancer"].(map[string]any)["id"].(string)
	c.waitActive(lbID)
	pool := func(fields map[string]any) (int, map[string]any) {
		t.Helper()
		p := map[string]any{"loadbalancer_id": lbID, "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "tls_enabled": true}
		for k, v := range fields {
			p[k] = v
		}
		return c.call("POST", "/v2/lbaas/pools", map[string]any{"pool": p})
	}
	for _, tc := range []struct {
		name   string
		fields map[string]any
		want   string
	}{
		{"a secret that does not exist", map[string]any{"ca_tls_container_ref": missing}, "Could not retrieve certificate: ['" + missing + "']"},
		{"another project's secret", map[string]any{"ca_tls_container_ref": adminsCA}, "Could not retrieve certificate: ['" + adminsCA + "']"},
		{"a CA that is no certificate", map[string]any{"ca_tls_container_ref": junkRef}, "The client authentication CA certificate is invalid."},
		{"a CRL of another CA", map[string]any{"ca_tls_container_ref": caRef, "crl_container_ref": otherCRLRef},
			"The CRL specified is not valid for client certificate authority reference supplied."},
		{"a CRL without a CA", map[string]any{"crl_container_ref": crlRef}, "A CA certificate reference is required to specify a revocation list."},
	} {
		code, body := pool(tc.fields)
		if msg, _ := body["faultstring"].(string); code != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %v, want 400 %q", tc.name, code, body, tc.want)
		}
	}
	c.waitActive(lbID)
	if code, body := c.call("GET", "/v2/lbaas/pools?loadbalancer_id="+lbID, nil); code != 200 || len(body["pools"].([]any)) != 0 {
		t.Fatalf("pools after the refusals: %d %v", code, body)
	}

	code, body = pool(map[string]any{"tls_container_ref": cont.ContainerRef, "ca_tls_container_ref": caRef, "crl_container_ref": crlRef,
		"alpn_protocols": []string{"h2", "http/1.1"}})
	if code != 201 {
		t.Fatalf("a pool with the three: %d %v", code, body)
	}
	c.waitActive(lbID)
	got := body["pool"].(map[string]any)
	if got["tls_enabled"] != true || got["tls_container_ref"] != cont.ContainerRef || got["ca_tls_container_ref"] != caRef || got["crl_container_ref"] != crlRef {
		t.Errorf("the pool: %v", got)
	}

	// flowlb's service user may read what the pool names (granted before
	// reading, as Octavia's API does).
	serviceUser := userID(t, cloud, openstack.ServiceUser)
	readers := func(ref string, container bool) []string {
		t.Helper()
		id := ref[strings.LastIndexByte(ref, '/')+1:]
		var acl *acls.ACL
		if container {
			acl, err = acls.GetContainerACL(ctx, km, id).Extract()
		} else {
			acl, err = acls.GetSecretACL(ctx, km, id).Extract()
		}
		if err != nil {
			t.Fatalf("ACL of %s: %v", ref, err)
		}
		return (*acl)["read"].Users
	}
	for _, r := range []struct {
		ref       string
		container bool
	}{{cont.ContainerRef, true}, {certRef, false}, {keyRef, false}, {caRef, false}, {crlRef, false}} {
		if got := readers(r.ref, r.container); !slices.Contains(got, serviceUser) {
			t.Errorf("%s: readers %v, want flowlb's service user %s", r.ref, got, serviceUser)
		}
	}
}
