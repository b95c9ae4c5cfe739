// Package lbtest runs a real flowlb API server in memory for the tests of
// the Kubernetes side: the Octavia API they drive is the real one, with
// changes that complete at once.
package lbtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/neutron"
	"github.com/flowlb/flowlb/internal/octavia"
	"github.com/flowlb/flowlb/internal/provider/flow"
	"github.com/flowlb/flowlb/internal/store/memstore"
)

// API is a running server with one network holding a cluster-IP subnet
// (198.19.64.0/18) and an external one (198.19.128.0/17).
type API struct {
	URL                           string
	Client                        *gophercloud.ServiceClient
	ClusterSubnet, ExternalSubnet string
}

// New starts the server for the duration of t.
func New(t testing.TB) *API {
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
	srv := httptest.NewServer(identity.NoAuth("kube", octavia.New(svc, neutron.NewHandler(st, log), log, octavia.Config{})))
	t.Cleanup(srv.Close)
	body, _ := json.Marshal(map[string]any{"subnet": map[string]any{"network_id": net.ID, "cidr": "198.19.128.0/17", "ip_version": 4, "name": "ext"}})
	resp, err := http.Post(srv.URL+"/v2.0/subnets", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Subnet struct{ ID string } `json:"subnet"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("external subnet: HTTP %d", resp.StatusCode)
	}
	return &API{URL: srv.URL, ClusterSubnet: clusterSub.ID, ExternalSubnet: out.Subnet.ID,
		Client: NoAuthClient(srv.URL)}
}

// NoAuthClient is a gophercloud load-balancer client for an endpoint that
// needs no token.
func NoAuthClient(endpoint string) *gophercloud.ServiceClient {
	return &gophercloud.ServiceClient{ProviderClient: &gophercloud.ProviderClient{}, Endpoint: endpoint + "/", ResourceBase: endpoint + "/v2.0/"}
}
