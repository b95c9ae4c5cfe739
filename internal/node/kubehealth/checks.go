// Package kubehealth serves, from a node's agent, the health endpoints
// kube-proxy serves on a node: each Service's health check on its
// healthCheckNodePort, by which external load balancers steer away from
// nodes without local endpoints, and the node's own /healthz and /livez.
// Checks is the pure part; Server and NodeHandler do the HTTP.
package kubehealth

import (
	"net/netip"
	"strings"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Check is what one health-check node port answers for.
type Check struct {
	// Namespace and Name of the Kubernetes Service (empty when the load
	// balancer names none).
	Namespace, Name string
	// LocalEndpoints counts the Service's distinct backend addresses on
	// this node.
	LocalEndpoints int
}

// Checks maps each health-check node port among services to its check on
// node: the Service whose services carry the port, and its backends on
// node that are not terminating, counted once per address across the
// Service's ports, as kube-proxy counts ready endpoints, not endpoint
// ports (traffic still goes to a terminating one when no ready one is
// left; the health check sends new clients elsewhere). Should two Services
// claim one port (the API server allocates them apart), the first by
// name wins.
func Checks(services map[flows.Key]flows.Service, node string) map[uint16]Check {
	owner := map[uint16]string{}
	for _, s := range services {
		if s.HealthCheckNodePort == 0 {
			continue
		}
		if o, ok := owner[s.HealthCheckNodePort]; !ok || s.HealthCheckService < o {
			owner[s.HealthCheckNodePort] = s.HealthCheckService
		}
	}
	if len(owner) == 0 {
		return nil
	}
	local := map[uint16]map[netip.Addr]struct{}{}
	for _, s := range services {
		p := s.HealthCheckNodePort
		if p == 0 || s.HealthCheckService != owner[p] {
			continue
		}
		if local[p] == nil {
			local[p] = map[netip.Addr]struct{}{}
		}
		for _, b := range s.Backends {
			if node != "" && b.Node == node && !b.Terminating {
				local[p][b.Address] = struct{}{}
			}
		}
	}
	out := make(map[uint16]Check, len(owner))
	for p, svc := range owner {
		ns, name, _ := strings.Cut(svc, "/")
		out[p] = Check{Namespace: ns, Name: name, LocalEndpoints: len(local[p])}
	}
	return out
}
