package kubelb

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/kube/failover"
)

// dialTimeout bounds connecting to one API replica, so that an unreachable
// one passes the request to the next within seconds.
const dialTimeout = 3 * time.Second

// idleConnsPerHost keeps a connection open for each of the controller's
// concurrent requests: with net/http's default of 2, six of eight workers
// opened a new TLS connection for every request, which took a fifth of
// the controller's CPU time and a seventh of the server's.
const idleConnsPerHost = 64

// transport is the HTTP transport of both clients: net/http's defaults
// with more idle connections kept, and tlsConfig if set.
func transport(tlsConfig *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConnsPerHost = idleConnsPerHost
	if tlsConfig != nil {
		t.TLSClientConfig = tlsConfig
	}
	return t
}

// NewClient returns a load-balancer API client: for endpoints, the
// replicas of an Octavia API that needs no token (flowlb with --auth
// noauth), behind a failover.Transport whose metrics go to reg as
// flowlb_kube_controller_api_endpoint_*; else for the named cloud of
// clouds.yaml (OS_CLIENT_CONFIG_FILE, ./clouds.yaml, ~/.config/openstack,
// /etc/openstack), with its Keystone credentials and the one endpoint of
// its catalog.
//
// roots, if set, are the CAs an https endpoint's certificate must come
// from (default: the system's); clouds.yaml names its own (cacert).
func NewClient(ctx context.Context, endpoints []string, roots *x509.CertPool, cloud string, reg prometheus.Registerer) (*gophercloud.ServiceClient, error) {
	if len(endpoints) > 0 {
		return noAuthClient(endpoints, roots, reg)
	}
	ao, eo, tlsConfig, err := clouds.Parse(clouds.WithCloudName(cloud))
	if err != nil {
		return nil, fmt.Errorf("clouds.yaml: %w", err)
	}
	pc, err := config.NewProviderClient(ctx, ao, config.WithHTTPClient(http.Client{Transport: transport(tlsConfig)}))
	if err != nil {
		return nil, fmt.Errorf("authenticate to cloud %q: %w", cloud, err)
	}
	return openstack.NewLoadBalancerV2(pc, eo)
}

func noAuthClient(endpoints []string, roots *x509.CertPool, reg prometheus.Registerer) (*gophercloud.ServiceClient, error) {
	var tlsConfig *tls.Config
	if roots != nil {
		tlsConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	base := transport(tlsConfig)
	if reg != nil {
		reg = prometheus.WrapRegistererWithPrefix("flowlb_kube_controller_", reg)
	}
	transport, err := failover.New(endpoints, base, reg)
	if err != nil {
		return nil, err // says which endpoint is wrong and why
	}
	endpoint := transport.URL()
	pc := &gophercloud.ProviderClient{HTTPClient: http.Client{Transport: transport}}
	return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: endpoint + "/", ResourceBase: endpoint + "/v2.0/"}, nil
}

// NewNetworkClient returns the Neutron client beside lb, which NewClient
// returned for the same endpoints and cloud: flowlb serves its Neutron
// subset at the root of its Octavia API, so a token-less client is lb
// itself; a cloud's is the network endpoint of its catalog, with lb's
// credentials.
func NewNetworkClient(lb *gophercloud.ServiceClient, endpoints []string, cloud string) (*gophercloud.ServiceClient, error) {
	if len(endpoints) > 0 {
		return lb, nil
	}
	_, eo, _, err := clouds.Parse(clouds.WithCloudName(cloud))
	if err != nil {
		return nil, fmt.Errorf("clouds.yaml: %w", err)
	}
	return openstack.NewNetworkV2(lb.ProviderClient, eo)
}
