package lbaas

import (
	"io"
	"log/slog"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// TestCheckCiphers: a tls_ciphers with characters no cipher string has,
// or naming a prohibited cipher, is refused with Octavia's texts on every
// create and update of a listener or pool, nested ones too, and nothing
// changes; others are stored as given; null and "" are not checked.
func TestCheckCiphers(t *testing.T) {
	e := newEnv(t, true, memstore.New())
	svc, err := New(e.st, e.vips, []Provider{e.prov}, Config{DefaultProvider: "fake", TLSCipherProhibitList: []string{"AES128-SHA", "DES-CBC3-SHA"}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	const (
		prohibited = "The following ciphers have been prohibited by an administrator: AES128-SHA, DES-CBC3-SHA"
		characters = "Invalid characters in cipher string. Only alphanumeric, -, +, !, :, @, =, _, and . are allowed."
	)
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"listeners": [{"protocol": "HTTP", "protocol_port": 80,
		"tls_ciphers": "ECDHE-RSA-AES128-GCM-SHA256:AES128-SHA:DES-CBC3-SHA"}]`))
	wantErr(t, err, ErrInvalid, prohibited)
	_, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"listeners": [{"protocol": "HTTP", "protocol_port": 80,
		"default_pool": {"name": "web"}}],
		"pools": [{"name": "web", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN", "tls_enabled": true, "tls_ciphers": "AES256-SHA AES128-SHA"}]`))
	wantErr(t, err, ErrInvalid, characters)

	tree, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"listeners": [{"protocol": "HTTP", "protocol_port": 80,
		"tls_ciphers": "ECDHE-RSA-AES128-GCM-SHA256:!aNULL"}]`))
	if err != nil {
		t.Fatal(err)
	}
	lbID, l := tree.LB.ID, tree.Listeners[0]
	if l.TLSCiphers == nil || *l.TLSCiphers != "ECDHE-RSA-AES128-GCM-SHA256:!aNULL" {
		t.Errorf("tls_ciphers stored as %v", l.TLSCiphers)
	}
	e.prov.finish(nil)
	bad, spaced := "AES256-SHA:DES-CBC3-SHA:AES128-SHA", "AES256-SHA, AES128-SHA"
	_, _, err = e.svc.CreateListener(e.ctx, ListenerCreate{LoadBalancerID: lbID, Protocol: "HTTP", ProtocolPort: 81,
		ListenerUpdate: ListenerUpdate{TLSCiphers: Some(&bad)}})
	wantErr(t, err, ErrInvalid, "prohibited by an administrator: DES-CBC3-SHA, AES128-SHA")
	_, _, err = e.svc.UpdateListener(e.ctx, l.ID, ListenerUpdate{TLSCiphers: Some(&spaced)})
	wantErr(t, err, ErrInvalid, characters)
	_, _, err = e.svc.CreatePool(e.ctx, PoolCreate{LoadBalancerID: lbID, Protocol: "HTTP",
		PoolUpdate: PoolUpdate{LBAlgorithm: Some("ROUND_ROBIN"), TLSEnabled: Some(true), TLSCiphers: Some(&bad)}})
	wantErr(t, err, ErrInvalid, "prohibited by an administrator: DES-CBC3-SHA, AES128-SHA")
	if got, _ := e.svc.Tree(e.ctx, store.KindLoadBalancer, lbID); len(got.Listeners) != 1 || len(got.Pools) != 0 ||
		*got.Listeners[0].TLSCiphers != "ECDHE-RSA-AES128-GCM-SHA256:!aNULL" || got.LB.ProvisioningStatus != Active {
		t.Errorf("after the refusals: %d listeners, %d pools, load balancer %s", len(got.Listeners), len(got.Pools), got.LB.ProvisioningStatus)
	}

	empty := ""
	_, p, err := e.svc.CreatePool(e.ctx, PoolCreate{LoadBalancerID: lbID, Protocol: "HTTP",
		PoolUpdate: PoolUpdate{LBAlgorithm: Some("ROUND_ROBIN"), TLSEnabled: Some(true), TLSCiphers: Some(&empty)}})
	if err != nil {
		t.Fatalf("tls_ciphers \"\": %v", err)
	}
	e.prov.finish(nil)
	_, _, err = e.svc.UpdatePool(e.ctx, p.ID, PoolUpdate{TLSCiphers: Some(&bad)})
	wantErr(t, err, ErrInvalid, prohibited[:len(prohibited)-len("AES128-SHA, DES-CBC3-SHA")]+"DES-CBC3-SHA, AES128-SHA")
	if _, _, err := e.svc.UpdatePool(e.ctx, p.ID, PoolUpdate{TLSCiphers: Some[*string](nil)}); err != nil {
		t.Errorf("tls_ciphers null: %v", err)
	}
}
