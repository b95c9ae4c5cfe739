// Package apitest runs a real flowlb API server in memory for the tests of
// the Kubernetes side: the Octavia API they drive is the real one, with
// changes that complete at once.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/octavia"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

// API is a running server with one network holding a cluster-IP subnet
// (198.19.64.0/18) and an external one (198.19.128.0/17).
type API struct {
	URL                           string
	Client                        *gophercloud.ServiceClient
	ClusterSubnet, ExternalSubnet string
	// NetworkID holds both subnets (and IPv6's).
	NetworkID string
}

// New starts the server for the duration of t.
func New(t testing.TB) *API {
	t.Helper()
	return NewWithConfig(t, octavia.Config{})
}

// NewWithConfig is New with the Octavia API's configuration cfg (a small
// PaginationMaxLimit, say).
func NewWithConfig(t testing.TB, cfg octavia.Config) *API {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New()
	net, clusterSub, err := neutron.EnsureDefault(ctx, st, "kube", "198.19.64.0/18")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lbaas.New(st, neutron.Allocator{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(identity.NoAuth("kube", octavia.New(svc, neutron.NewHandler(st, log), log, cfg)))
	t.Cleanup(srv.Close)
	api := &API{URL: srv.URL, Client: NoAuthClient(srv.URL), ClusterSubnet: clusterSub.ID, NetworkID: net.ID}
	api.ExternalSubnet = api.post(t, "subnets", map[string]any{"network_id": net.ID, "cidr": "198.19.128.0/17", "ip_version": 4, "name": "ext"})
	return api
}

// IPv6 adds an IPv6 cluster-IP subnet (2001:2:0:a000::/112) and an IPv6
// external one (2001:2:0:c000::/64) to the network and returns their IDs.
func (a *API) IPv6(t testing.TB) (cluster, external string) {
	t.Helper()
	cluster = a.post(t, "subnets", map[string]any{"network_id": a.NetworkID, "cidr": "2001:2:0:a000::/112", "ip_version": 6, "name": "cluster6", "gateway_ip": nil})
	external = a.post(t, "subnets", map[string]any{"network_id": a.NetworkID, "cidr": "2001:2:0:c000::/64", "ip_version": 6, "name": "ext6", "gateway_ip": nil})
	return cluster, external
}

// FloatingNetwork creates a router:external network named name with a
// subnet of cidr, whose addresses floating IPs take, and returns its ID.
func (a *API) FloatingNetwork(t testing.TB, name, cidr string) string {
	t.Helper()
	id := a.post(t, "networks", map[string]any{"name": name, "router:external": true})
	a.post(t, "subnets", map[string]any{"network_id": id, "cidr": cidr, "ip_version": 4, "name": name})
	return id
}

// post creates a Neutron object of collection plural and returns its ID.
func (a *API) post(t testing.TB, plural string, obj map[string]any) string {
	t.Helper()
	singular := strings.TrimSuffix(plural, "s")
	body, _ := json.Marshal(map[string]any{singular: obj})
	resp, err := http.Post(a.URL+"/v2.0/"+plural, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusCreated || out[singular].ID == "" {
		t.Fatalf("create %s %v: HTTP %d", singular, obj, resp.StatusCode)
	}
	return out[singular].ID
}

// NoAuthClient is a gophercloud load-balancer client for an endpoint that
// needs no token.
func NoAuthClient(endpoint string) *gophercloud.ServiceClient {
	return &gophercloud.ServiceClient{ProviderClient: &gophercloud.ProviderClient{}, Endpoint: endpoint + "/", ResourceBase: endpoint + "/v2.0/"}
}
