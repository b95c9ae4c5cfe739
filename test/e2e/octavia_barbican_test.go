package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/users"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/acls"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/containers"
	"github.com/gophercloud/gophercloud/v2/openstack/keymanager/v1/secrets"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/listeners"
	"github.com/gophercloud/gophercloud/v2/openstack/loadbalancer/v2/loadbalancers"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestRealOctaviaBarbican: the bed's Barbican (Debian's barbican-api,
// simple_crypto, under the bed's Keystone) as Octavia's certificate
// store. A user of a project of its own, with Barbican's creator role,
// finds Barbican in Keystone's catalog (key-manager), stores a
// self-signed certificate and its key as secrets and a certificate
// container of both, and reads them back; Octavia's service user cannot
// read the container until the user grants it read access (Barbican's
// ACLs), and then reads the certificate. Through the real Octavia (both
// providers enabled, Barbican in its [certificates]) the user then asks
// for a TERMINATED_HTTPS listener with that container on a load
// balancer of provider flowlb and of provider ovn: Octavia reads the
// certificate (a container it cannot read is refused with a certificate
// error, 400) and hands the listener to the provider, which refuses it:
// 501 naming the provider, the load balancer ACTIVE again and no
// listener in Octavia or flowlb.
func TestRealOctaviaBarbican(t *testing.T) {
	c, cloud, _, _ := newRealNeutronCluster(t)
	src, err := filepath.Abs("../../deploy/octavia-provider")
	if err != nil {
		t.Fatal(err)
	}
	oct := cloud.StartOctavia(openstack.OctaviaOptions{ProviderSource: src, FlowlbURL: c.api, FlowlbCA: c.tls.CACert, OVNProvider: true})
	ctx := context.Background()

	// A tenant of its own, with a network of its own for the VIPs (the
	// caller's token must see the VIP subnet).
	const project, user, password = "tls", "tls-user", "tlspw"
	pid := cloud.ProjectUser(project, user, password, "member", "creator", "load-balancer_member")
	var nw struct {
		Network struct {
			ID string `json:"id"`
		} `json:"network"`
	}
	if err := cloud.Call("POST", "/networks", map[string]any{"network": map[string]any{"name": "tls", "project_id": pid}}, &nw); err != nil {
		t.Fatal(err)
	}
	var subnet struct {
		Subnet struct {
			ID string `json:"id"`
		} `json:"subnet"`
	}
	if err := cloud.Call("POST", "/subnets", map[string]any{"subnet": map[string]any{"network_id": nw.Network.ID,
		"project_id": pid, "ip_version": 4, "cidr": "198.18.226.0/24", "enable_dhcp": false}}, &subnet); err != nil {
		t.Fatal(err)
	}
	pc := login(t, cloud, user, password, project)
	km, err := gopenstack.NewKeyManagerV1(pc, gophercloud.EndpointOpts{Region: keystone.Region})
	if err != nil {
		t.Fatalf("Barbican in Keystone's catalog: %v", err)
	}
	if km.Endpoint != cloud.BarbicanURL+"/" {
		t.Fatalf("key-manager endpoint in the catalog %q, want %q", km.Endpoint, cloud.BarbicanURL+"/")
	}

	// The certificate and its container, stored and read back.
	certPEM, keyPEM := selfSigned(t, "tls.flowlb.test")
	store := func(name string, typ secrets.SecretType, payload string) string {
		t.Helper()
		s, err := secrets.Create(ctx, km, secrets.CreateOpts{Name: name, SecretType: typ, Payload: payload,
			PayloadContentType: "text/plain"}).Extract()
		if err != nil {
			t.Fatalf("store secret %s: %v", name, err)
		}
		return s.SecretRef
	}
	certRef := store("tls-cert", secrets.CertificateSecret, certPEM)
	keyRef := store("tls-key", secrets.PrivateSecret, keyPEM)
	cont, err := containers.Create(ctx, km, containers.CreateOpts{Type: containers.CertificateContainer, Name: "tls",
		SecretRefs: []containers.SecretRef{{Name: "certificate", SecretRef: certRef}, {Name: "private_key", SecretRef: keyRef}}}).Extract()
	if err != nil {
		t.Fatalf("store certificate container: %v", err)
	}
	for _, ref := range []string{certRef, keyRef, cont.ContainerRef} {
		if !strings.HasPrefix(ref, cloud.BarbicanURL+"/v1/") {
			t.Fatalf("reference %s is not Barbican's at %s", ref, cloud.BarbicanURL)
		}
	}
	id := func(ref string) string { return ref[strings.LastIndexByte(ref, '/')+1:] }
	for ref, want := range map[string]string{certRef: certPEM, keyRef: keyPEM} {
		s, err := secrets.Get(ctx, km, id(ref)).Extract()
		if err != nil || s.Status != "ACTIVE" || s.CreatorID == "" {
			t.Fatalf("secret %s: %+v %v", ref, s, err)
		}
		got, err := secrets.GetPayload(ctx, km, id(ref), secrets.GetPayloadOpts{PayloadContentType: "text/plain"}).Extract()
		// (Barbican keeps a text/plain payload without its final
		// newline.)
		if err != nil || string(got) != strings.TrimSuffix(want, "\n") {
			t.Fatalf("secret %s read back: %q %v, want what was stored", ref, got, err)
		}
	}
	got, err := containers.Get(ctx, km, id(cont.ContainerRef)).Extract()
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, r := range got.SecretRefs {
		refs[r.Name] = r.SecretRef
	}
	if got.Type != "certificate" || got.Status != "ACTIVE" || len(refs) != 2 || refs["certificate"] != certRef || refs["private_key"] != keyRef {
		t.Fatalf("container read back: %+v", got)
	}

	// Octavia's service user reads the container only once the owner
	// lets it.
	octaviaID := userID(t, cloud, openstack.OctaviaUser)
	okm, err := gopenstack.NewKeyManagerV1(login(t, cloud, openstack.OctaviaUser, openstack.OctaviaPassword, openstack.ServiceProject),
		gophercloud.EndpointOpts{Region: keystone.Region})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := containers.Get(ctx, okm, id(cont.ContainerRef)).Extract(); !gophercloud.ResponseCodeIs(err, 403) {
		t.Fatalf("Octavia's user reads the container before any ACL: %v, want 403", err)
	}
	read := acls.SetOpts{{Type: "read", Users: &[]string{octaviaID}}}
	if _, err := acls.SetContainerACL(ctx, km, id(cont.ContainerRef), read).Extract(); err != nil {
		t.Fatalf("ACL of the container: %v", err)
	}
	for _, ref := range []string{certRef, keyRef} {
		if _, err := acls.SetSecretACL(ctx, km, id(ref), read).Extract(); err != nil {
			t.Fatalf("ACL of %s: %v", ref, err)
		}
	}
	acl, err := acls.GetContainerACL(ctx, km, id(cont.ContainerRef)).Extract()
	if err != nil || !slices.Equal((*acl)["read"].Users, []string{octaviaID}) {
		t.Fatalf("the container's ACL: %+v %v, want read for %s", acl, err, octaviaID)
	}
	if got, err := containers.Get(ctx, okm, id(cont.ContainerRef)).Extract(); err != nil || len(got.SecretRefs) != 2 {
		t.Fatalf("Octavia's user reads the container: %+v %v", got, err)
	}
	if b, err := secrets.GetPayload(ctx, okm, id(certRef), secrets.GetPayloadOpts{PayloadContentType: "text/plain"}).Extract(); err != nil || string(b) != strings.TrimSuffix(certPEM, "\n") {
		t.Fatalf("Octavia's user reads the certificate: %q %v", b, err)
	}

	// TERMINATED_HTTPS through Octavia: read from Barbican, refused by
	// the provider.
	lbc, err := gopenstack.NewLoadBalancerV2(pc, gophercloud.EndpointOpts{Region: keystone.Region})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ provider, reason string }{
		{"flowlb", "TERMINATED_HTTPS protocol listeners are not supported"},
		{"ovn", "OVN provider does not support TERMINATED_HTTPS protocol"},
	} {
		lb, err := loadbalancers.Create(ctx, lbc, loadbalancers.CreateOpts{Name: "tls-" + tc.provider, VipSubnetID: subnet.Subnet.ID,
			Provider: tc.provider}).Extract()
		if err != nil {
			t.Fatalf("load balancer of provider %s: %v", tc.provider, err)
		}
		waitOctaviaActive(t, lbc, lb.ID, 1)
		https := func(ref string) error {
			_, err := listeners.Create(ctx, lbc, listeners.CreateOpts{LoadbalancerID: lb.ID, Protocol: listeners.ProtocolTerminatedHTTPS,
				ProtocolPort: 443, DefaultTlsContainerRef: ref}).Extract()
			return err
		}
		// A container Barbican does not have: Octavia's certificate
		// check refuses it before the provider sees it.
		missing := cloud.BarbicanURL + "/v1/containers/00000000-0000-4000-8000-000000000000"
		var unexpected gophercloud.ErrUnexpectedResponseCode
		if err := https(missing); !errors.As(err, &unexpected) || unexpected.Actual != 400 ||
			!strings.Contains(string(unexpected.Body), "Could not retrieve certificate") {
			t.Fatalf("%s: a TERMINATED_HTTPS listener with a missing container: %v, want 400 naming the certificate", tc.provider, err)
		}
		waitOctaviaActive(t, lbc, lb.ID, 1)
		err = https(cont.ContainerRef)
		want := fmt.Sprintf("Provider '%s' does not support a requested option", tc.provider)
		if !errors.As(err, &unexpected) || unexpected.Actual != 501 || !strings.Contains(string(unexpected.Body), want) ||
			!strings.Contains(string(unexpected.Body), tc.reason) || strings.Count(string(unexpected.Body), "does not support a requested option") != 1 {
			t.Fatalf("%s: a TERMINATED_HTTPS listener with the container: %v, want 501 %q with %q", tc.provider, err, want, tc.reason)
		}
		t.Logf("%s: %s", tc.provider, unexpected.Body)
		if tree := waitOctaviaActive(t, lbc, lb.ID, 1); len(tree) != 1 {
			t.Fatalf("%s: after the refusal Octavia's tree is %v, want the load balancer alone", tc.provider, tree)
		}
		page, err := listeners.List(lbc, listeners.ListOpts{LoadbalancerID: lb.ID}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ls, err := listeners.ExtractListeners(page); err != nil || len(ls) != 0 {
			t.Fatalf("%s: listeners in Octavia after the refusal: %+v %v", tc.provider, ls, err)
		}
		if tc.provider == "flowlb" {
			code, body := c.call("GET", "/v2/lbaas/listeners?loadbalancer_id="+lb.ID, nil)
			if ls, _ := body["listeners"].([]any); code != 200 || len(ls) != 0 {
				t.Fatalf("flowlb's listeners after the refusal: %d %v", code, body)
			}
		}
		if err := loadbalancers.Delete(ctx, lbc, lb.ID, loadbalancers.DeleteOpts{Cascade: true}).ExtractErr(); err != nil {
			t.Fatalf("%s: delete: %v", tc.provider, err)
		}
		testutil.Eventually(t, 2*time.Minute, tc.provider+" load balancer gone from Octavia", func() (bool, string) {
			_, err := loadbalancers.Get(ctx, lbc, lb.ID).Extract()
			return gophercloud.ResponseCodeIs(err, 404), fmt.Sprint(err)
		})
	}
	t.Logf("Octavia at %s read the certificate container from Barbican at %s", oct.URL, cloud.BarbicanURL)
}

// login logs in to the bed's Keystone as user of project.
func login(t *testing.T, cloud *openstack.Cloud, user, password, project string) *gophercloud.ProviderClient {
	t.Helper()
	pc, err := gopenstack.NewClient(cloud.KeystoneURL + "/v3")
	if err != nil {
		t.Fatal(err)
	}
	pc.HTTPClient = *cloud.HTTP
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := gopenstack.Authenticate(ctx, pc, gophercloud.AuthOptions{IdentityEndpoint: cloud.KeystoneURL + "/v3",
		Username: user, Password: password, DomainName: "Default", TenantName: project, AllowReauth: true}); err != nil {
		t.Fatalf("log in as %s: %v", user, err)
	}
	return pc
}

// userID is the id of the bed's Keystone user named name, as its admin
// finds it.
func userID(t *testing.T, cloud *openstack.Cloud, name string) string {
	t.Helper()
	admin, err := gopenstack.NewIdentityV3(cloud.Provider, gophercloud.EndpointOpts{Region: keystone.Region})
	if err != nil {
		t.Fatal(err)
	}
	page, err := users.List(admin, users.ListOpts{Name: name}).AllPages(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found, err := users.ExtractUsers(page)
	if err != nil || len(found) != 1 {
		t.Fatalf("user %s in Keystone: %v %v", name, found, err)
	}
	return found[0].ID
}

// selfSigned is a self-signed certificate for name and its RSA key, PEM.
func selfSigned(t *testing.T, name string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
}
