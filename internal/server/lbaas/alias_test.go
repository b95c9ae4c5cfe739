package lbaas

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// withAliases is an env whose service maps the given names to the fake
// provider.
func withAliases(t *testing.T, aliases map[string]string) *env {
	e := newEnv(t, true, memstore.New())
	svc, err := New(e.st, e.vips, []Provider{e.prov}, Config{DefaultProvider: "fake", ProviderAliases: aliases}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

func TestProviderAliases(t *testing.T) {
	// Without the alias, Octavia's default provider is refused as today.
	e := withAliases(t, nil)
	_, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"provider": "amphora"`))
	wantErr(t, err, ErrInvalid, "Provider 'amphora' is not enabled.")

	// With it, the load balancer is realized by the provider it names and
	// keeps the name it was created with.
	e = withAliases(t, map[string]string{"amphora": "fake", "ovn": "fake"})
	tr, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"provider": "amphora"`))
	if err != nil {
		t.Fatal(err)
	}
	e.waitActive(tr.LB.ID)
	got, err := e.svc.Tree(e.ctx, "loadbalancer", tr.LB.ID)
	if err != nil || got.LB.Provider != "amphora" {
		t.Fatalf("provider %q (%v), want the alias the client sent", got.LB.Provider, err)
	}
	if _, err := e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"provider": "octavia"`)); err == nil {
		t.Fatal("a name that is no alias was accepted")
	}
	// Aliases are not providers of their own.
	var names []string
	for _, p := range e.svc.Providers() {
		names = append(names, p.Name())
	}
	if !slices.Equal(names, []string{"fake"}) {
		t.Fatalf("providers %v", names)
	}
	// A flavor of the real provider goes with the alias, and the load
	// balancer still shows the alias.
	prof, err := e.svc.Catalog().CreateFlavorProfile(e.ctx, req[FlavorProfileRequest](t, `{"name": "p", "provider_name": "fake", "flavor_data": "{}"}`))
	if err != nil {
		t.Fatal(err)
	}
	fl, err := e.svc.Catalog().CreateFlavor(e.ctx, req[FlavorCreate](t, `{"name": "f", "enabled": true, "flavor_profile_id": "`+prof.ID+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	tr, err = e.svc.CreateLoadBalancer(e.ctx, lbReq(t, `"provider": "ovn", "flavor_id": "`+fl.ID+`"`))
	if err != nil || tr.LB.Provider != "ovn" {
		t.Fatalf("alias with the real provider's flavor: %v %+v", err, tr)
	}
}

func TestProviderAliasesChecked(t *testing.T) {
	e := newEnv(t, true, memstore.New())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, bad := range []map[string]string{{"amphora": "nope"}, {"fake": "fake"}} {
		if _, err := New(e.st, e.vips, []Provider{e.prov}, Config{DefaultProvider: "fake", ProviderAliases: bad}, log); err == nil {
			t.Errorf("aliases %v accepted", bad)
		}
	}
}
