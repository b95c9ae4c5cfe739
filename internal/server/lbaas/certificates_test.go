package lbaas

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// fakeCertificates records what it is asked to read and refuses one
// reference, with Octavia's text.
type fakeCertificates struct {
	asked  []TLSRefs
	refuse string
}

func (f *fakeCertificates) CheckTLS(_ context.Context, refs TLSRefs) error {
	f.asked = append(f.asked, refs)
	if slices.Contains(append([]string{refs.ClientCA, refs.ClientCRL}, refs.Certificates...), f.refuse) {
		return Invalid("Could not retrieve certificate: ['%s']", f.refuse)
	}
	return nil
}

// TestCheckTLS: the certificates a listener's create, update or a fully
// populated create names are read before the change; a refusal changes
// nothing, and a listener without references reads none.
func TestCheckTLS(t *testing.T) {
	e := newEnv(t, true, memstore.New())
	certs := &fakeCertificates{refuse: "https://kms/v1/secrets/bad"}
	svc, err := New(e.st, e.vips, []Provider{e.prov}, Config{DefaultProvider: "fake", Certificates: certs}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"listeners": [{"protocol": "TERMINATED_HTTPS", "protocol_port": 443,
		"default_tls_container_ref": "https://kms/v1/secrets/a", "sni_container_refs": ["https://kms/v1/secrets/b", "https://kms/v1/secrets/a"],
		"client_ca_tls_container_ref": "https://kms/v1/secrets/ca"}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := TLSRefs{Certificates: []string{"https://kms/v1/secrets/a", "https://kms/v1/secrets/b"}, ClientCA: "https://kms/v1/secrets/ca"}
	if len(certs.asked) != 1 || !slices.Equal(certs.asked[0].Certificates, want.Certificates) || certs.asked[0].ClientCA != want.ClientCA {
		t.Fatalf("asked %+v, want %+v", certs.asked, want)
	}
	lbID := tree.LB.ID
	e.prov.finish(nil)

	bad := "https://kms/v1/secrets/bad"
	_, _, err = e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: lbID, Protocol: "TERMINATED_HTTPS", ProtocolPort: 8443,
		ListenerUpdate: ListenerUpdate{DefaultTLSContainerRef: Some(&bad)}})
	wantErr(t, err, ErrInvalid, "Could not retrieve certificate: ['"+bad+"']")
	if got, _ := e.svc.Tree(e.ctx, store.KindLoadBalancer, lbID); len(got.Listeners) != 1 || got.LB.ProvisioningStatus != Active {
		t.Errorf("after a refused certificate: %d listeners, load balancer %s", len(got.Listeners), got.LB.ProvisioningStatus)
	}
	l := tree.Listeners[0].ID
	if _, _, err := e.svc.UpdateListener(e.ctx, l, ListenerUpdate{SNIContainerRefs: Some([]string{bad})}); err == nil {
		t.Error("an update naming an unreadable certificate was taken")
	}
	n := len(certs.asked)
	if _, _, err := e.svc.UpdateListener(e.ctx, l, ListenerUpdate{Name: Some("renamed")}); err != nil {
		t.Fatal(err)
	}
	if len(certs.asked) != n {
		t.Error("an update naming no certificate read some")
	}
}

// TestCheckPoolTLS: the certificates a pool's create, update or a nested
// create names (its client certificate, its members' CA and CRL) are
// read before the change, a CRL named alone with the pool's CA; a
// refusal changes nothing; a CRL needs a CA, with Octavia's texts.
func TestCheckPoolTLS(t *testing.T) {
	e := newEnv(t, true, memstore.New())
	certs := &fakeCertificates{refuse: "https://kms/v1/secrets/bad"}
	svc, err := New(e.st, e.vips, []Provider{e.prov}, Config{DefaultProvider: "fake", Certificates: certs}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"listeners": [{"protocol": "HTTP", "protocol_port": 80,
		"default_pool": {"name": "web", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "tls_enabled": true,
			"tls_container_ref": "https://kms/v1/secrets/client", "ca_tls_container_ref": "https://kms/v1/secrets/ca"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := TLSRefs{Certificates: []string{"https://kms/v1/secrets/client"}, ClientCA: "https://kms/v1/secrets/ca"}
	if len(certs.asked) != 1 || !reflect.DeepEqual(certs.asked[0], want) {
		t.Fatalf("asked %+v, want %+v", certs.asked, want)
	}
	lbID, pool := tree.LB.ID, tree.Pools[0].ID
	e.prov.finish(nil)

	bad := "https://kms/v1/secrets/bad"
	_, _, err = e.svc.CreatePool(e.ctx, PoolCreate{LoadBalancerID: lbID, Protocol: "HTTP",
		PoolUpdate: PoolUpdate{LBAlgorithm: Some("ROUND_ROBIN"), TLSEnabled: Some(true), TLSContainerRef: Some(&bad)}})
	wantErr(t, err, ErrInvalid, "Could not retrieve certificate: ['"+bad+"']")
	if got, _ := e.svc.Tree(e.ctx, store.KindLoadBalancer, lbID); len(got.Pools) != 1 || got.LB.ProvisioningStatus != Active {
		t.Errorf("after a refused certificate: %d pools, load balancer %s", len(got.Pools), got.LB.ProvisioningStatus)
	}

	n := len(certs.asked)
	crl := "https://kms/v1/secrets/crl"
	if _, _, err := e.svc.UpdatePool(e.ctx, pool, PoolUpdate{CRLContainerRef: Some(&crl)}); err != nil {
		t.Fatal(err)
	}
	if want := (TLSRefs{ClientCA: "https://kms/v1/secrets/ca", ClientCRL: crl}); len(certs.asked) != n+1 || !reflect.DeepEqual(certs.asked[n], want) {
		t.Errorf("a CRL alone: asked %+v, want %+v", certs.asked[n:], want)
	}
	e.prov.finish(nil)
	n = len(certs.asked)
	if _, _, err := e.svc.UpdatePool(e.ctx, pool, PoolUpdate{Name: Some("renamed"), TLSEnabled: Some(false)}); err != nil {
		t.Fatal(err)
	}
	if len(certs.asked) != n {
		t.Error("an update naming no certificate read some")
	}
	e.prov.finish(nil)

	var none *string
	_, _, err = e.svc.UpdatePool(e.ctx, pool, PoolUpdate{CATLSContainerRef: Some(none)})
	wantErr(t, err, ErrInvalid, "A CA reference cannot be removed when a certificate revocation list is present.")
	_, _, err = e.svc.CreatePool(e.ctx, PoolCreate{LoadBalancerID: lbID, Protocol: "HTTP",
		PoolUpdate: PoolUpdate{LBAlgorithm: Some("ROUND_ROBIN"), CRLContainerRef: Some(&crl)}})
	wantErr(t, err, ErrInvalid, "A CA certificate reference is required to specify a revocation list.")
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"pools": [{"name": "p", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN",
		"tls_enabled": true, "ca_tls_container_ref": "`+bad+`"}]`))
	wantErr(t, err, ErrInvalid, "Could not retrieve certificate: ['"+bad+"']")
}
