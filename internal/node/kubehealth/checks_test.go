package kubehealth

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

func TestChecks(t *testing.T) {
	vip := func(port uint16) flows.Key {
		return flows.Key{VIP: netip.MustParseAddr("198.19.128.10"), Protocol: flows.TCP, Port: port}
	}
	nodePort := func(port uint16) flows.Key { return flows.Key{VIP: flows.NodePortVIP, Protocol: flows.TCP, Port: port} }
	be := func(addr, node string, port uint16) flows.Backend {
		return flows.Backend{Address: netip.MustParseAddr(addr), Port: port, Node: node}
	}
	svc := func(k flows.Key, hc uint16, name string, bs ...flows.Backend) flows.Service {
		return flows.Service{Key: k, LocalOnly: hc != 0, HealthCheckNodePort: hc, HealthCheckService: name, Backends: bs}
	}
	for _, tc := range []struct {
		name     string
		services []flows.Service
		node     string
		want     map[uint16]Check
	}{
		{name: "no services", node: "n1", want: nil},
		{name: "no health-check port", node: "n1",
			services: []flows.Service{svc(vip(80), 0, "", be("198.18.17.2", "n1", 8080))}, want: nil},
		{name: "the node's backends, once per address across ports and node ports", node: "n1",
			services: []flows.Service{
				svc(vip(80), 30500, "ns/web", be("198.18.17.2", "n1", 8080), be("198.18.17.3", "n1", 8080), be("198.18.18.2", "n2", 8080)),
				svc(nodePort(30080), 30500, "ns/web", be("198.18.17.2", "n1", 8080), be("198.18.17.3", "n1", 8080), be("198.18.18.2", "n2", 8080)),
				svc(vip(443), 30500, "ns/web", be("198.18.17.2", "n1", 8443)),
			},
			want: map[uint16]Check{30500: {Namespace: "ns", Name: "web", LocalEndpoints: 2}}},
		{name: "terminating backends count for nothing (kube-proxy counts ready endpoints)", node: "n1",
			services: []flows.Service{svc(vip(80), 30500, "ns/web", func() flows.Backend {
				b := be("198.18.17.2", "n1", 8080)
				b.Terminating = true
				return b
			}(), be("198.18.17.3", "n1", 8080))},
			want: map[uint16]Check{30500: {Namespace: "ns", Name: "web", LocalEndpoints: 1}}},
		{name: "a node without backends: a check of 0", node: "n3",
			services: []flows.Service{svc(vip(80), 30500, "ns/web", be("198.18.17.2", "n1", 8080))},
			want:     map[uint16]Check{30500: {Namespace: "ns", Name: "web"}}},
		{name: "no backends at all: a check of 0", node: "n1",
			services: []flows.Service{svc(vip(80), 30500, "ns/web")},
			want:     map[uint16]Check{30500: {Namespace: "ns", Name: "web"}}},
		{name: "backends without a node are nobody's", node: "",
			services: []flows.Service{svc(vip(80), 30500, "ns/web", be("198.18.17.2", "", 8080))},
			want:     map[uint16]Check{30500: {Namespace: "ns", Name: "web"}}},
		{name: "two Services, two ports", node: "n2",
			services: []flows.Service{
				svc(vip(80), 30500, "ns/web", be("198.18.17.2", "n1", 8080)),
				svc(nodePort(30081), 30501, "other/api", be("198.18.18.2", "n2", 9000), be("198.18.18.3", "n2", 9000)),
			},
			want: map[uint16]Check{30500: {Namespace: "ns", Name: "web"}, 30501: {Namespace: "other", Name: "api", LocalEndpoints: 2}}},
		{name: "two Services claiming one port: the first by name, with its backends only", node: "n1",
			services: []flows.Service{
				svc(vip(80), 30500, "ns/zeta", be("198.18.17.2", "n1", 8080), be("198.18.17.3", "n1", 8080)),
				svc(vip(81), 30500, "ns/alpha", be("198.18.17.4", "n1", 8080)),
			},
			want: map[uint16]Check{30500: {Namespace: "ns", Name: "alpha", LocalEndpoints: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := map[flows.Key]flows.Service{}
			for _, s := range tc.services {
				in[s.Key] = s
			}
			if got := Checks(in, tc.node); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Checks = %+v, want %+v", got, tc.want)
			}
		})
	}
}
