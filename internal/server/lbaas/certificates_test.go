package lbaas

import (
	"context"
	"io"
	"log/slog"
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
	if slices.Contains(refs.Certificates, f.refuse) {
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
