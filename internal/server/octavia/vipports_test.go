package octavia

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// aheadVIPs makes ports ahead of the create, as a real Neutron's
// allocator with PortsOVN does; released records what went again.
type aheadVIPs struct {
	fakeVIPs
	failAdditional bool
	released       []string
}

func (f *aheadVIPs) MakesPortsAhead() bool { return true }

func (f *aheadVIPs) Allocate(tx store.Tx, r lbaas.VIPRequest) (lbaas.VIP, error) {
	if f.failAdditional && r.VIPNetworkID != "" {
		return lbaas.VIP{}, lbaas.Invalid("Subnet %s not found.", r.SubnetID)
	}
	return f.fakeVIPs.Allocate(tx, r)
}

func (f *aheadVIPs) Release(_ store.Tx, id string) error {
	f.released = append(f.released, id)
	return nil
}

// TestVIPPortsAhead: POST /v2/flowlb/vip_ports makes the VIP ports of a
// load balancer not created yet when the allocator makes them ahead, and
// answers 501 when Octavia's network driver is to make them; bad bodies
// are 400; a failed additional VIP releases the VIP's port.
func TestVIPPortsAhead(t *testing.T) {
	api := func(vips lbaas.VIPAllocator) *httptest.Server {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		svc, err := lbaas.New(memstore.New(), vips, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(identity.NoAuth("p-default", New(svc, nil, log, Config{})))
		t.Cleanup(srv.Close)
		return srv
	}
	post := func(srv *httptest.Server, body string) (int, string) {
		resp, err := http.Post(srv.URL+"/v2/flowlb/vip_ports", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	req := `{"loadbalancer_id": "lb1", "project_id": "p1", "vip_subnet_id": "s1", "additional_vips": [{"subnet_id": "s2", "ip_address": "198.19.0.50"}]}`

	if code, body := post(api(&fakeVIPs{}), req); code != http.StatusNotImplemented || !strings.Contains(body, "VIP port Octavia makes") {
		t.Errorf("an allocator that makes no ports ahead: %d %s, want 501", code, body)
	}
	ahead := &aheadVIPs{}
	srv := api(ahead)
	code, body := post(srv, req)
	if code != http.StatusCreated || !strings.Contains(body, `"vip_port_id":"00000000-0000-0000-0000-000000000001"`) ||
		!strings.Contains(body, `"vip_subnet_id":"s1"`) || !strings.Contains(body, `"ip_address":"198.19.0.50"`) || !strings.Contains(body, `"subnet_id":"s2"`) {
		t.Errorf("ports made ahead: %d %s", code, body)
	}
	for _, bad := range []string{`{"loadbalancer_id": "lb1"}`, `{"vip_subnet_id": "s1"}`, `{"loadbalancer_id": "lb1", "vip_subnet_id": "s1", "flavor": 1}`,
		`{"loadbalancer_id": "lb1", "vip_subnet_id": "s1"} {}`, `not json`} {
		if code, body := post(srv, bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, code, body)
		}
	}
	failing := &aheadVIPs{failAdditional: true}
	if code, body := post(api(failing), req); code != http.StatusBadRequest || len(failing.released) != 1 {
		t.Errorf("a refused additional VIP: %d %s, released %v; want 400 and the VIP's port released", code, body, failing.released)
	}
}

// TestVIPPortsAheadAdminOnly: making ports is the provider driver's, an
// admin's.
func TestVIPPortsAheadAdminOnly(t *testing.T) {
	srv := rbacAPIConfig(t, identity.Advanced, Config{})
	if code, _ := call(t, srv, who{"a", "load-balancer_member"}, "POST", "/v2/flowlb/vip_ports", map[string]any{"loadbalancer_id": "x", "vip_subnet_id": "s"}); code != http.StatusForbidden {
		t.Errorf("a member: %d, want 403", code)
	}
}
