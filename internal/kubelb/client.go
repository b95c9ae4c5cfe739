package kubelb

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
)

// NewClient returns a load-balancer API client: for endpoint, an Octavia
// API that needs no token (flowlb with --auth noauth); else for the named
// cloud of clouds.yaml (OS_CLIENT_CONFIG_FILE, ./clouds.yaml,
// ~/.config/openstack, /etc/openstack), with its Keystone credentials and
// catalog.
func NewClient(ctx context.Context, endpoint, cloud string) (*gophercloud.ServiceClient, error) {
	if endpoint != "" {
		endpoint = strings.TrimSuffix(endpoint, "/")
		pc := &gophercloud.ProviderClient{HTTPClient: *http.DefaultClient}
		return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: endpoint + "/", ResourceBase: endpoint + "/v2.0/"}, nil
	}
	ao, eo, tlsConfig, err := clouds.Parse(clouds.WithCloudName(cloud))
	if err != nil {
		return nil, fmt.Errorf("clouds.yaml: %w", err)
	}
	pc, err := config.NewProviderClient(ctx, ao, config.WithTLSConfig(tlsConfig))
	if err != nil {
		return nil, fmt.Errorf("authenticate to cloud %q: %w", cloud, err)
	}
	return openstack.NewLoadBalancerV2(pc, eo)
}
