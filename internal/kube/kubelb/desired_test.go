package kubelb

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

var opts = Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext"}

func service(mut ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "198.19.64.10", ClusterIPs: []string{"198.19.64.10"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	for _, m := range mut {
		m(s)
	}
	return s
}

type ep struct {
	addr, node, pod          string
	ready, serving, terminat bool
}

func slice(name string, port int32, portName string, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.addr}, NodeName: ptr.To(e.node),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: e.pod},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminat)}})
	}
	return s
}

// hinted sets the zone hints of a slice's endpoints, in order (nil: none).
func hinted(s *discoveryv1.EndpointSlice, zones ...[]string) *discoveryv1.EndpointSlice {
	for i, zs := range zones {
		if zs == nil {
			continue
		}
		h := &discoveryv1.EndpointHints{}
		for _, z := range zs {
			h.ForZones = append(h.ForZones, discoveryv1.ForZone{Name: z})
		}
		s.Endpoints[i].Hints = h
		s.Endpoints[i].Zone = ptr.To("own-" + zs[0])
	}
	return s
}

func member(addr string, port int, pod, node string) Member {
	return Member{Name: pod, Address: addr, Port: port, Tags: []string{flows.TagNodePrefix + node}}
}

func TestDesired(t *testing.T) {
	ready := func(addr, node, pod string) ep { return ep{addr, node, pod, true, true, false} }
	twoPods := []*discoveryv1.EndpointSlice{
		slice("web-b", 8080, "http", ready("198.18.18.2", "n2", "web-2")),
		slice("web-a", 8080, "http", ready("198.18.17.2", "n1", "web-1"), ready("198.18.18.2", "n2", "web-2")),
	}
	tests := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		opts   *Options
		check  func(t *testing.T, lb *LB)
		err    string
	}{
		{name: "ClusterIP: VIP is the cluster IP, members are ready pods, deduplicated and sorted",
			svc: service(), slices: twoPods,
			check: func(t *testing.T, lb *LB) {
				if lb.Name != "kube_service_lab_default_web" || lb.VIP != (VIP{SubnetID: "sub-cluster", Address: "198.19.64.10"}) || lb.External {
					t.Errorf("lb %+v", lb)
				}
				want := []Member{member("198.18.17.2", 8080, "web-1", "n1"), member("198.18.18.2", 8080, "web-2", "n2")}
				if got := lb.Listeners[0].Pool.Members; !reflect.DeepEqual(got, want) {
					t.Errorf("members %+v, want %+v", got, want)
				}
				if l := lb.Listeners[0]; l.Protocol != "TCP" || l.Port != 80 || l.Pool.Algorithm != "ROUND_ROBIN" || l.Pool.Persistence != nil || l.Pool.Monitor != nil {
					t.Errorf("listener %+v", l)
				}
				if !reflect.DeepEqual(lb.Tags, []string{"flowlb:kube-cluster=lab", "flowlb:kube-service=default/web", "flowlb:kube-uid=uid-1"}) {
					t.Errorf("tags %v", lb.Tags)
				}
			}},
		{name: "named target ports resolve per slice; other ports' endpoints are not members",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}
			}),
			slices: []*discoveryv1.EndpointSlice{slice("a", 8080, "http", ready("198.18.17.2", "n1", "p1")), slice("b", 9090, "metrics", ready("198.18.17.3", "n1", "p2"))},
			check: func(t *testing.T, lb *LB) {
				if len(lb.Listeners) != 2 || lb.Listeners[1].Protocol != "UDP" || lb.Listeners[1].Port != 53 {
					t.Fatalf("listeners %+v", lb.Listeners)
				}
				if ms := lb.Listeners[0].Pool.Members; len(ms) != 1 || ms[0].Port != 8080 {
					t.Errorf("http members %+v", ms)
				}
				if ms := lb.Listeners[1].Pool.Members; len(ms) != 0 {
					t.Errorf("dns members %+v, want none (no slice has a dns port)", ms)
				}
			}},
		{name: "terminating serving endpoints only when none is ready",
			svc: service(),
			slices: []*discoveryv1.EndpointSlice{slice("a", 8080, "http",
				ep{"198.18.17.2", "n1", "old", false, true, true}, ep{"198.18.17.3", "n1", "gone", false, false, true})},
			check: func(t *testing.T, lb *LB) {
				if ms := lb.Listeners[0].Pool.Members; len(ms) != 1 || ms[0].Name != "old" || !slices.Contains(ms[0].Tags, flows.TagTerminating) {
					t.Errorf("members %+v, want the serving terminating one, tagged terminating", ms)
				}
			}},
		{name: "a ready endpoint wins over terminating ones",
			svc: service(),
			slices: []*discoveryv1.EndpointSlice{slice("a", 8080, "http",
				ep{"198.18.17.2", "n1", "old", false, true, true}, ready("198.18.17.4", "n1", "new"))},
			check: func(t *testing.T, lb *LB) {
				if ms := lb.Listeners[0].Pool.Members; len(ms) != 1 || ms[0].Name != "new" || slices.Contains(ms[0].Tags, flows.TagTerminating) {
					t.Errorf("members %+v, want only the ready one, not tagged terminating", ms)
				}
			}},
		{name: "LoadBalancer: external VIP (loadBalancerIP), cluster IP as additional VIP, source ranges, ETP Local",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerIP = "198.19.128.7"
				s.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24", "198.18.1.2/24"}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}), slices: twoPods,
			check: func(t *testing.T, lb *LB) {
				if !lb.External || lb.VIP != (VIP{SubnetID: "sub-ext", Address: "198.19.128.7", External: true}) || !reflect.DeepEqual(lb.AdditionalVIPs, []VIP{{SubnetID: "sub-cluster", Address: "198.19.64.10"}}) {
					t.Errorf("VIPs %+v %+v", lb.VIP, lb.AdditionalVIPs)
				}
				l := lb.Listeners[0]
				if !reflect.DeepEqual(l.AllowedCIDRs, []string{"198.18.1.0/24"}) || !reflect.DeepEqual(l.Tags, []string{flows.TagLocalOnly}) {
					t.Errorf("listener %+v", l)
				}
			}},
		{name: "LoadBalancer with --floating-network: the cluster IP is the only VIP, a floating IP (loadBalancerIP) on it, external policies kept",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerIP = "198.19.128.7"
				s.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24"}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}), slices: twoPods, opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", FloatingNetwork: "public"},
			check: func(t *testing.T, lb *LB) {
				if !lb.External || lb.VIP != (VIP{SubnetID: "sub-cluster", Address: "198.19.64.10"}) || lb.AdditionalVIPs != nil {
					t.Errorf("VIPs %+v %+v", lb.VIP, lb.AdditionalVIPs)
				}
				if lb.FloatingIP == nil || *lb.FloatingIP != (FloatingIP{Network: "public", Address: "198.19.128.7"}) {
					t.Errorf("floating IP %+v", lb.FloatingIP)
				}
				if !slices.Contains(lb.Tags, TagFloatingIP) {
					t.Errorf("tags %v, want %s", lb.Tags, TagFloatingIP)
				}
				l := lb.Listeners[0]
				if !reflect.DeepEqual(l.AllowedCIDRs, []string{"198.18.1.0/24"}) || !reflect.DeepEqual(l.Tags, []string{flows.TagLocalOnly}) {
					t.Errorf("listener %+v", l)
				}
			}},
		{name: "the floating-network annotation opts in without the flag, and picks the network",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnFloatingNetwork: " net-2 "}
			}),
			check: func(t *testing.T, lb *LB) {
				if lb.FloatingIP == nil || *lb.FloatingIP != (FloatingIP{Network: "net-2"}) || lb.VIP.SubnetID != "sub-cluster" {
					t.Errorf("floating IP %+v, VIP %+v", lb.FloatingIP, lb.VIP)
				}
			}},
		{name: "the internal annotation opts out: an external-subnet address",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnInternal: "true", AnnFloatingNetwork: "net-2"}
			}), opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext", FloatingNetwork: "public"},
			check: func(t *testing.T, lb *LB) {
				if lb.FloatingIP != nil || lb.VIP.SubnetID != "sub-ext" || slices.Contains(lb.Tags, TagFloatingIP) {
					t.Errorf("floating IP %+v, VIP %+v, tags %v", lb.FloatingIP, lb.VIP, lb.Tags)
				}
			}},
		{name: "opted out with no external subnet: refused",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnInternal: "true"}
			}), opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", FloatingNetwork: "public"}, err: "needs an external subnet"},
		{name: "a bad internal annotation is refused",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnInternal: "maybe"}
			}), err: "want true or false"},
		{name: "an empty floating-network annotation is refused",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnFloatingNetwork: ""}
			}), err: "is empty"},
		{name: "ClusterIP ignores the floating network",
			svc: service(), opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", FloatingNetwork: "public"},
			check: func(t *testing.T, lb *LB) {
				if lb.FloatingIP != nil || lb.External {
					t.Errorf("floating IP %+v", lb.FloatingIP)
				}
			}},
		{name: "source ranges let the pod networks through (allowed_cidrs also guard the cluster IP)",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24"}
			}), opts: &Options{Cluster: "lab", ClusterIPSubnet: "c", ExternalSubnet: "e", PodCIDRs: []string{"198.18.16.0/20"}},
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].AllowedCIDRs; !reflect.DeepEqual(got, []string{"198.18.1.0/24", "198.18.16.0/20"}) {
					t.Errorf("allowed %v", got)
				}
			}},
		{name: "source ranges from the annotation",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnSourceRanges: "198.18.1.2/32, 198.18.2.0/24"}
			}),
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].AllowedCIDRs; !reflect.DeepEqual(got, []string{"198.18.1.2/32", "198.18.2.0/24"}) {
					t.Errorf("allowed %v", got)
				}
			}},
		{name: "ClientIP affinity is SOURCE_IP persistence with its timeout; lb-method annotation",
			svc: service(func(s *corev1.Service) {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
				s.Annotations = map[string]string{AnnLBMethod: "source_ip_port"}
			}),
			check: func(t *testing.T, lb *LB) {
				p := lb.Listeners[0].Pool
				if p.Algorithm != "SOURCE_IP_PORT" || p.Persistence == nil || *p.Persistence != (Persistence{"SOURCE_IP", 600}) {
					t.Errorf("pool %+v", p)
				}
			}},
		{name: "health monitor annotations, TCP and UDP-CONNECT",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
				s.Annotations = map[string]string{AnnHealthMonitor: "true", AnnHMDelay: "4s", AnnHMMaxRetriesDown: "2"}
			}),
			check: func(t *testing.T, lb *LB) {
				want := Monitor{Type: "TCP", Delay: 4, Timeout: 3, MaxRetries: 1, MaxRetriesDown: 2}
				if m := lb.Listeners[0].Pool.Monitor; m == nil || *m != want {
					t.Errorf("monitor %+v, want %+v", m, want)
				}
				if m := lb.Listeners[1].Pool.Monitor; m == nil || m.Type != "UDP-CONNECT" {
					t.Errorf("UDP monitor %+v", m)
				}
			}},
		{name: "listener timeouts: Octavia's defaults without annotations",
			svc: service(),
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].Timeouts; got != (Timeouts{50000, 5000, 50000, 0}) {
					t.Errorf("timeouts %+v, want Octavia's defaults", got)
				}
			}},
		{name: "timeout annotations set every listener's timeouts",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
				s.Annotations = map[string]string{AnnTimeoutClientData: "180000", AnnTimeoutMemberConnect: "2000",
					AnnTimeoutMemberData: " 90000", AnnTimeoutTCPInspect: "10"}
			}),
			check: func(t *testing.T, lb *LB) {
				want := Timeouts{ClientData: 180000, MemberConnect: 2000, MemberData: 90000, TCPInspect: 10}
				for _, l := range lb.Listeners {
					if l.Timeouts != want {
						t.Errorf("listener %s timeouts %+v, want %+v", l.Name, l.Timeouts, want)
					}
				}
			}},
		{name: "one timeout annotation leaves the others at their defaults",
			svc: service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnTimeoutMemberConnect: "0"} }),
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].Timeouts; got != (Timeouts{50000, 0, 50000, 0}) {
					t.Errorf("timeouts %+v", got)
				}
			}},
		{name: "a timeout that is not an integer", svc: service(func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnTimeoutClientData: "50s"}
		}), err: "want milliseconds"},
		{name: "a negative timeout", svc: service(func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnTimeoutMemberData: "-1"}
		}), err: "want milliseconds"},
		{name: "a timeout above Octavia's 24 hours", svc: service(func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnTimeoutTCPInspect: "86400001"}
		}), err: "want milliseconds"},
		{name: "bad lb-method", svc: service(func(s *corev1.Service) { s.Annotations = map[string]string{AnnLBMethod: "LEAST_CONNECTIONS"} }),
			err: "use ROUND_ROBIN"},
		{name: "bad monitor annotation", svc: service(func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnHealthMonitor: "true", AnnHMTimeout: "soon"}
		}), err: "positive integer"},
		{name: "monitor delay below its timeout", svc: service(func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnHealthMonitor: "true", AnnHMDelay: "1"}
		}), err: "shorter than its timeout"},
		{name: "internalTrafficPolicy Local is an internal-local listener", svc: service(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		}), check: func(t *testing.T, lb *LB) {
			if got := lb.Listeners[0].Tags; !reflect.DeepEqual(got, []string{flows.TagInternalLocal}) {
				t.Errorf("tags %v", got)
			}
		}},
		{name: "trafficDistribution PreferClose: a prefer-close listener, members tagged with their zone hints",
			svc: service(func(s *corev1.Service) {
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
			}),
			slices: []*discoveryv1.EndpointSlice{hinted(slice("a", 8080, "http", ready("198.18.17.2", "n1", "p1"), ready("198.18.18.2", "n2", "p2")),
				[]string{"zone-a"}, []string{"zone-b"})},
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].Tags; !reflect.DeepEqual(got, []string{flows.TagPreferClose}) {
					t.Errorf("tags %v", got)
				}
				want := []Member{member("198.18.17.2", 8080, "p1", "n1"), member("198.18.18.2", 8080, "p2", "n2")}
				want[0].Tags = append(want[0].Tags, flows.TagZonePrefix+"zone-a")
				want[1].Tags = append(want[1].Tags, flows.TagZonePrefix+"zone-b")
				if got := lb.Listeners[0].Pool.Members; !reflect.DeepEqual(got, want) {
					t.Errorf("members %+v, want %+v", got, want)
				}
			}},
		{name: "PreferSameZone and PreferSameNode prefer the zone too; with ETP and ITP Local the tags add up",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
			}),
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].Tags; !reflect.DeepEqual(got, []string{flows.TagLocalOnly, flows.TagInternalLocal, flows.TagPreferClose}) {
					t.Errorf("tags %v", got)
				}
				other := service(func(s *corev1.Service) {
					s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameNode)
				})
				if lb, err := Desired(other, nil, opts); err != nil || !reflect.DeepEqual(lb.Listeners[0].Tags, []string{flows.TagPreferClose}) {
					t.Errorf("PreferSameNode: %v %v", lb, err)
				}
			}},
		{name: "PreferSameNode: members tagged with their node hints after their zone hints",
			svc: service(func(s *corev1.Service) {
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameNode)
			}),
			slices: func() []*discoveryv1.EndpointSlice {
				s := hinted(slice("a", 8080, "http", ready("198.18.17.2", "n1", "p1"), ready("198.18.18.2", "n2", "p2")), []string{"zone-a"})
				s.Endpoints[0].Hints.ForNodes = []discoveryv1.ForNode{{Name: "n1"}, {Name: ""}, {Name: "n1"}}
				s.Endpoints[1].Hints = &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "n2"}}}
				return []*discoveryv1.EndpointSlice{s}
			}(),
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].Tags; !reflect.DeepEqual(got, []string{flows.TagPreferClose}) {
					t.Errorf("tags %v", got)
				}
				want := [][]string{
					{flows.TagNodePrefix + "n1", flows.TagZonePrefix + "zone-a", flows.TagForNodePrefix + "n1"},
					{flows.TagNodePrefix + "n2", flows.TagForNodePrefix + "n2"},
				}
				for i, m := range lb.Listeners[0].Pool.Members {
					if !reflect.DeepEqual(m.Tags, want[i]) {
						t.Errorf("member %s tags %v, want %v", m.Address, m.Tags, want[i])
					}
				}
			}},
		{name: "topology-mode Auto follows the hints, several zones per endpoint included",
			svc:    service(func(s *corev1.Service) { s.Annotations = map[string]string{corev1.AnnotationTopologyMode: "auto"} }),
			slices: []*discoveryv1.EndpointSlice{hinted(slice("a", 8080, "http", ready("198.18.17.2", "n1", "p1")), []string{"zone-c", "zone-a", "zone-c"})},
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].Tags; !reflect.DeepEqual(got, []string{flows.TagPreferClose}) {
					t.Errorf("tags %v", got)
				}
				want := []string{flows.TagNodePrefix + "n1", flows.TagZonePrefix + "zone-a", flows.TagZonePrefix + "zone-c"}
				if got := lb.Listeners[0].Pool.Members[0].Tags; !reflect.DeepEqual(got, want) {
					t.Errorf("member tags %v, want %v", got, want)
				}
			}},
		{name: "an endpoint without hints gets no zone tag, whatever its own zone; no trafficDistribution, no prefer-close",
			svc: service(func(s *corev1.Service) { s.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Disabled"} }),
			slices: func() []*discoveryv1.EndpointSlice {
				s := slice("a", 8080, "http", ready("198.18.17.2", "n1", "p1"))
				s.Endpoints[0].Zone = ptr.To("zone-a")
				return []*discoveryv1.EndpointSlice{s}
			}(),
			check: func(t *testing.T, lb *LB) {
				if got := lb.Listeners[0].Tags; len(got) != 0 {
					t.Errorf("tags %v", got)
				}
				if got := lb.Listeners[0].Pool.Members[0].Tags; !reflect.DeepEqual(got, []string{flows.TagNodePrefix + "n1"}) {
					t.Errorf("member tags %v", got)
				}
			}},
		{name: "IPv6-only service is refused without an IPv6 cluster-IP subnet", svc: service(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00::10", []string{"fd00::10"}
		}), err: "IPv6 needs an IPv6 cluster-IP subnet"},
		{name: "dual-stack keeps the IPv4 cluster IP without an IPv6 cluster-IP subnet", svc: service(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00::10", []string{"fd00::10", "198.19.64.11"}
		}), check: func(t *testing.T, lb *LB) {
			if lb.VIP.Address != "198.19.64.11" {
				t.Errorf("VIP %+v", lb.VIP)
			}
		}},
		{name: "headless is ignored", svc: service(func(s *corev1.Service) { s.Spec.ClusterIP = "None" })},
		{name: "ExternalName is ignored", svc: service(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName })},
		{name: "the headless label, even empty, makes a Service with a cluster IP headless", svc: service(func(s *corev1.Service) {
			s.Labels = map[string]string{LabelHeadless: ""}
		})},
		{name: "service-proxy-name label, even empty, leaves the Service to that proxy", svc: service(func(s *corev1.Service) {
			s.Labels = map[string]string{LabelServiceProxyName: ""}
		})},
		{name: "service-proxy-name label on a LoadBalancer Service", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Labels = map[string]string{LabelServiceProxyName: "cilium"}
		})},
		{name: "another loadBalancerClass: cluster IP and node ports served, no external address",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerClass = ptr.To("example.com/other")
				s.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24"}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Ports[0].NodePort = 30080
			}),
			opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext", FloatingNetwork: "public"},
			check: func(t *testing.T, lb *LB) {
				if lb.External || lb.FloatingIP != nil || len(lb.AdditionalVIPs) != 0 || lb.VIP != (VIP{SubnetID: "sub-cluster", Address: "198.19.64.10"}) {
					t.Errorf("external %v, floating IP %+v, VIP %+v, additional %+v: want the cluster IP only", lb.External, lb.FloatingIP, lb.VIP, lb.AdditionalVIPs)
				}
				if len(lb.Listeners) != 2 {
					t.Fatalf("listeners %+v", lb.Listeners)
				}
				if l := lb.Listeners[0]; len(l.Tags) != 0 || len(l.AllowedCIDRs) != 0 {
					t.Errorf("cluster IP listener tags %v, allowed %v: nothing external applies", l.Tags, l.AllowedCIDRs)
				}
				if l := lb.Listeners[1]; l.Port != 30080 || !reflect.DeepEqual(l.Tags, []string{flows.TagNodePort, flows.TagLocalOnly}) {
					t.Errorf("node port listener %d %v", l.Port, l.Tags)
				}
			}},
		{name: "the default class is ours", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerClass = ptr.To(DefaultClass)
		}), check: func(t *testing.T, lb *LB) {
			if !lb.External || lb.VIP.SubnetID != "sub-ext" {
				t.Errorf("external %v, VIP %+v", lb.External, lb.VIP)
			}
		}},
		{name: "a configured class replaces the default", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerClass = ptr.To(DefaultClass)
		}), opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext", Class: "example.com/ours"},
			check: func(t *testing.T, lb *LB) {
				if lb.External || lb.VIP.SubnetID != "sub-cluster" {
					t.Errorf("external %v, VIP %+v: want the cluster IP only", lb.External, lb.VIP)
				}
			}},
		{name: "the configured class is ours", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerClass = ptr.To("example.com/ours")
		}), opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext", Class: "example.com/ours"},
			check: func(t *testing.T, lb *LB) {
				if !lb.External || lb.VIP.SubnetID != "sub-ext" {
					t.Errorf("external %v, VIP %+v", lb.External, lb.VIP)
				}
			}},
		{name: "ClassOnly: a LoadBalancer Service of no class is the cloud provider's, served as NodePort with its health-check node port",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 31234
				s.Spec.Ports[0].NodePort = 30080
				s.Annotations = map[string]string{AnnFloatingNetwork: "public"}
			}),
			opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext", FloatingNetwork: "public", ClassOnly: true},
			check: func(t *testing.T, lb *LB) {
				if lb.External || lb.FloatingIP != nil || len(lb.AdditionalVIPs) != 0 || lb.VIP != (VIP{SubnetID: "sub-cluster", Address: "198.19.64.10"}) {
					t.Errorf("external %v, floating IP %+v, VIP %+v, additional %+v: want the cluster IP only", lb.External, lb.FloatingIP, lb.VIP, lb.AdditionalVIPs)
				}
				if slices.Contains(lb.Tags, TagFloatingIP) {
					t.Errorf("tags %v: no floating IP is the controller's", lb.Tags)
				}
				if len(lb.Listeners) != 2 {
					t.Fatalf("listeners %+v", lb.Listeners)
				}
				if l := lb.Listeners[0]; l.Port != 80 || len(l.Tags) != 0 {
					t.Errorf("cluster IP listener %d %v: externalTrafficPolicy does not apply to it", l.Port, l.Tags)
				}
				want := []string{flows.TagNodePort, flows.TagLocalOnly, flows.TagHealthCheckNodePortPrefix + "31234"}
				if l := lb.Listeners[1]; l.Port != 30080 || !reflect.DeepEqual(l.Tags, want) {
					t.Errorf("node port listener %d %v, want 30080 %v", l.Port, l.Tags, want)
				}
			}},
		{name: "ClassOnly: our class is still ours", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerClass = ptr.To(DefaultClass)
		}), opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext", ClassOnly: true},
			check: func(t *testing.T, lb *LB) {
				if !lb.External || lb.VIP.SubnetID != "sub-ext" {
					t.Errorf("external %v, VIP %+v", lb.External, lb.VIP)
				}
			}},
		{name: "ClientIP affinity without a timeout: kube-proxy's 10800 s", svc: service(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}), check: func(t *testing.T, lb *LB) {
			if p := lb.Listeners[0].Pool.Persistence; p == nil || *p != (Persistence{"SOURCE_IP", 10800}) {
				t.Errorf("persistence %+v", p)
			}
		}},
		{name: "externalIPs: a listener tag per IPv4 address, sorted, once; externalTrafficPolicy applies",
			svc: service(func(s *corev1.Service) {
				s.Spec.ExternalIPs = []string{"198.19.200.2", "198.19.200.1", "2001:2::1", "198.19.200.2"}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
			}),
			check: func(t *testing.T, lb *LB) {
				want := []string{flows.TagLocalOnly, flows.TagExternalIPPrefix + "198.19.200.1", flows.TagExternalIPPrefix + "198.19.200.2"}
				for _, l := range lb.Listeners {
					if !reflect.DeepEqual(l.Tags, want) {
						t.Errorf("listener %s tags %v, want %v", l.Name, l.Tags, want)
					}
				}
				if lb.External || lb.VIP.Address != "198.19.64.10" || len(lb.AdditionalVIPs) != 0 {
					t.Errorf("external %v, VIP %+v, additional %+v: external IPs take no VIP", lb.External, lb.VIP, lb.AdditionalVIPs)
				}
			}},
		{name: "externalIPs of a NodePort Service: not on its node ports", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalIPs = []string{"198.19.200.1"}
		}), check: func(t *testing.T, lb *LB) {
			if len(lb.Listeners) != 2 || !reflect.DeepEqual(lb.Listeners[0].Tags, []string{flows.TagExternalIPPrefix + "198.19.200.1"}) ||
				!reflect.DeepEqual(lb.Listeners[1].Tags, []string{flows.TagNodePort}) {
				t.Errorf("listeners %+v", lb.Listeners)
			}
		}},
		{name: "externalIPs of another class's LoadBalancer Service are served", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerClass = ptr.To("example.com/other")
			s.Spec.ExternalIPs = []string{"198.19.200.1"}
		}), check: func(t *testing.T, lb *LB) {
			if lb.External || !reflect.DeepEqual(lb.Listeners[0].Tags, []string{flows.TagExternalIPPrefix + "198.19.200.1"}) {
				t.Errorf("external %v, tags %v", lb.External, lb.Listeners[0].Tags)
			}
		}},
		{name: "another class's LoadBalancer ingress IPs are served as external IPs, not those of ipMode Proxy; externalTrafficPolicy applies",
			svc: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerClass = ptr.To("example.com/other")
				s.Spec.ExternalIPs = []string{"198.19.200.1"}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.19.255.3"}, {IP: "198.19.200.1", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
					{IP: "198.19.255.4", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}, {Hostname: "lb.example.com"}, {IP: "2001:2::5"}}
			}), check: func(t *testing.T, lb *LB) {
				want := []string{flows.TagLocalOnly, flows.TagExternalIPPrefix + "198.19.200.1", flows.TagExternalIPPrefix + "198.19.255.3"}
				if lb.External || !reflect.DeepEqual(lb.Listeners[0].Tags, want) {
					t.Errorf("external %v, tags %v, want %v", lb.External, lb.Listeners[0].Tags, want)
				}
			}},
		{name: "ClassOnly: the cloud provider's ingress is its load balancer's VIP, not taken", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.19.128.2"}}
		}), opts: &Options{Cluster: "lab", ClusterIPSubnet: "sub-cluster", ExternalSubnet: "sub-ext", ClassOnly: true},
			check: func(t *testing.T, lb *LB) {
				if lb.External || len(lb.Listeners[0].Tags) != 0 {
					t.Errorf("external %v, tags %v", lb.External, lb.Listeners[0].Tags)
				}
			}},
		{name: "our class's ingress is its VIP, not an external IP", svc: service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.19.255.3"}}
		}), check: func(t *testing.T, lb *LB) {
			if !lb.External || len(lb.Listeners[0].Tags) != 0 {
				t.Errorf("external %v, tags %v", lb.External, lb.Listeners[0].Tags)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			if tc.opts != nil {
				o = *tc.opts
			}
			lb, err := Desired(tc.svc, tc.slices, o)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.check == nil:
				if lb != nil {
					t.Errorf("got an LB for a Service that is not served: %+v", lb)
				}
			default:
				if lb == nil {
					t.Fatal("no LB")
				}
				tc.check(t, lb)
			}
		})
	}
}

// TestOwnsExternal: whose external address a Service's is, by type,
// loadBalancerClass and the controller's class options.
func TestOwnsExternal(t *testing.T) {
	lb := func(class *string) *corev1.Service {
		return service(func(s *corev1.Service) { s.Spec.Type, s.Spec.LoadBalancerClass = corev1.ServiceTypeLoadBalancer, class })
	}
	def, ours, other := Options{}, Options{Class: "example.com/ours"}, Options{ClassOnly: true}
	both := Options{Class: "example.com/ours", ClassOnly: true}
	tests := []struct {
		name string
		svc  *corev1.Service
		opts Options
		want bool
	}{
		{"no class, default options", lb(nil), def, true},
		{"no class, another class configured", lb(nil), ours, true},
		{"no class, ClassOnly: the cloud provider's", lb(nil), other, false},
		{"no class, ClassOnly with a configured class", lb(nil), both, false},
		{"the default class", lb(ptr.To(DefaultClass)), def, true},
		{"the default class, ClassOnly", lb(ptr.To(DefaultClass)), other, true},
		{"the default class when another is configured", lb(ptr.To(DefaultClass)), both, false},
		{"the configured class, ClassOnly", lb(ptr.To("example.com/ours")), both, true},
		{"another class", lb(ptr.To("example.com/other")), def, false},
		{"another class, ClassOnly", lb(ptr.To("example.com/other")), other, false},
		{"NodePort", service(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), def, false},
		{"ClusterIP", service(), def, false},
	}
	for _, tc := range tests {
		if got := OwnsExternal(tc.svc, tc.opts); got != tc.want {
			t.Errorf("%s: OwnsExternal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDesiredDualStack: one load balancer per Service whatever its
// families. Its VIPs are its cluster IPs in the Service's order of
// families (for a LoadBalancer Service its external addresses first, one
// per family with an external subnet); its pools hold the endpoints of
// the families it serves; source ranges, pod networks and external IPs
// keep to those families. Without the IPv6 subnets, IPv6 is not served.
func TestDesiredDualStack(t *testing.T) {
	dual := Options{Cluster: "lab", ClusterIPSubnet: "c4", ExternalSubnet: "e4", ClusterIPSubnet6: "c6", ExternalSubnet6: "e6"}
	v4only := Options{Cluster: "lab", ClusterIPSubnet: "c4", ExternalSubnet: "e4"}
	noExt6 := dual
	noExt6.ExternalSubnet6 = ""
	floating := dual
	floating.FloatingNetwork = "public"
	const ip4, ip6 = "198.19.64.10", "2001:2:0:a000::10"
	stackOf := func(typ corev1.ServiceType, policy corev1.IPFamilyPolicy, ips ...string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.Type, s.Spec.IPFamilyPolicy, s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = typ, &policy, ips[0], ips, nil
			for _, ip := range ips {
				f := corev1.IPv4Protocol
				if strings.Contains(ip, ":") {
					f = corev1.IPv6Protocol
				}
				s.Spec.IPFamilies = append(s.Spec.IPFamilies, f)
			}
			if typ != corev1.ServiceTypeClusterIP {
				s.Spec.Ports[0].NodePort = 30080
			}
		}
	}
	ready := func(addr, node, pod string) ep { return ep{addr, node, pod, true, true, false} }
	v6 := slice("web-v6", 8080, "http", ready("2001:2:0:18::2", "n2", "web-2"), ready("2001:2:0:17::2", "n1", "web-1"))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	eps := []*discoveryv1.EndpointSlice{slice("web-v4", 8080, "http", ready("198.18.17.2", "n1", "web-1"), ready("198.18.18.2", "n2", "web-2")), v6}
	// brief: the VIPs (subnet=address, * for an external one), then per
	// listener its port, members and allowed CIDRs and external IPs.
	brief := func(lb *LB) string {
		vip := func(v VIP) string {
			s := v.SubnetID + "=" + v.Address
			if v.External {
				s += "*"
			}
			return s
		}
		out := []string{vip(lb.VIP)}
		for _, v := range lb.AdditionalVIPs {
			out = append(out, vip(v))
		}
		for _, l := range lb.Listeners {
			var ms []string
			for _, m := range l.Pool.Members {
				ms = append(ms, m.Key())
			}
			var ext []string
			for _, tag := range l.Tags {
				if a, ok := strings.CutPrefix(tag, flows.TagExternalIPPrefix); ok {
					ext = append(ext, a)
				}
			}
			out = append(out, "| "+strconv.Itoa(l.Port)+" "+strings.Join(ms, ",")+" cidrs="+strings.Join(l.AllowedCIDRs, ",")+" ext="+strings.Join(ext, ","))
		}
		if lb.FloatingIP != nil {
			out = append(out, "| floating "+lb.FloatingIP.Network)
		}
		return strings.Join(out, " ")
	}
	members4 := "198.18.17.2:8080,198.18.18.2:8080"
	members6 := "[2001:2:0:17::2]:8080,[2001:2:0:18::2]:8080"
	both := members4 + "," + members6
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		o    Options
		want string
		err  string
	}{
		{name: "SingleStack IPv4: as ever, IPv6 endpoints left out",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicySingleStack, ip4)), o: dual,
			want: "c4=198.19.64.10 | 80 " + members4 + " cidrs= ext="},
		{name: "SingleStack IPv6: the IPv6 cluster IP on the IPv6 subnet, IPv6 members",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicySingleStack, ip6)), o: dual,
			want: "c6=2001:2:0:a000::10 | 80 " + members6 + " cidrs= ext="},
		{name: "SingleStack IPv6 without an IPv6 cluster-IP subnet: refused",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicySingleStack, ip6)), o: v4only,
			err: "IPv6 needs an IPv6 cluster-IP subnet"},
		{name: "PreferDualStack IPv4 first: the IPv6 cluster IP an additional VIP, members of both",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicyPreferDualStack, ip4, ip6)), o: dual,
			want: "c4=198.19.64.10 c6=2001:2:0:a000::10 | 80 " + both + " cidrs= ext="},
		{name: "RequireDualStack IPv6 first: the IPv6 cluster IP is the VIP",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicyRequireDualStack, ip6, ip4)), o: dual,
			want: "c6=2001:2:0:a000::10 c4=198.19.64.10 | 80 " + both + " cidrs= ext="},
		{name: "RequireDualStack without IPv6 subnets: served on IPv4 alone, as before IPv6",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicyRequireDualStack, ip6, ip4)), o: v4only,
			want: "c4=198.19.64.10 | 80 " + members4 + " cidrs= ext="},
		{name: "NodePort dual-stack: the node port's pool has both families",
			svc: service(stackOf(corev1.ServiceTypeNodePort, corev1.IPFamilyPolicyRequireDualStack, ip4, ip6)), o: dual,
			want: "c4=198.19.64.10 c6=2001:2:0:a000::10 | 80 " + both + " cidrs= ext= | 30080 " + both + " cidrs= ext="},
		{name: "LoadBalancer dual-stack IPv6 first: an external address per family first, then the cluster IPs",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyRequireDualStack, ip6, ip4)), o: dual,
			want: "e6=* e4=* c6=2001:2:0:a000::10 c4=198.19.64.10 | 80 " + both + " cidrs= ext= | 30080 " + both + " cidrs= ext="},
		{name: "LoadBalancer dual-stack without an IPv6 external subnet: an IPv4 external address only",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyPreferDualStack, ip4, ip6)), o: noExt6,
			want: "e4=* c4=198.19.64.10 c6=2001:2:0:a000::10 | 80 " + both + " cidrs= ext= | 30080 " + both + " cidrs= ext="},
		{name: "LoadBalancer IPv6-only without an IPv6 external subnet: refused",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicySingleStack, ip6)), o: noExt6,
			err: "needs an external subnet"},
		{name: "loadBalancerIP goes to the external VIP of its family",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyRequireDualStack, ip4, ip6), func(s *corev1.Service) {
				s.Spec.LoadBalancerIP = "2001:2:0:c000::7"
			}), o: dual,
			want: "e4=* e6=2001:2:0:c000::7* c4=198.19.64.10 c6=2001:2:0:a000::10 | 80 " + both + " cidrs= ext= | 30080 " + both + " cidrs= ext="},
		{name: "loadBalancerIP of a family without an external subnet: refused",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyRequireDualStack, ip4, ip6), func(s *corev1.Service) {
				s.Spec.LoadBalancerIP = "2001:2:0:c000::7"
			}), o: noExt6,
			err: "no external subnet of its family"},
		{name: "floating IP: on the IPv4 cluster IP, made the primary VIP",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyRequireDualStack, ip6, ip4)), o: floating,
			want: "c4=198.19.64.10 c6=2001:2:0:a000::10 | 80 " + both + " cidrs= ext= | 30080 " + both + " cidrs= ext= | floating public"},
		{name: "floating IP for an IPv6-only Service: refused",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicySingleStack, ip6)), o: floating,
			err: "needs an IPv4 cluster IP"},
		{name: "source ranges and pod networks of the served families only",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyPreferDualStack, ip4, ip6), func(s *corev1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24", "2001:2:0:1::/64"}
				s.Spec.AllocateLoadBalancerNodePorts, s.Spec.Ports[0].NodePort = ptr.To(false), 0
			}), o: withPodCIDRs(v4only, "198.18.17.0/24", "2001:2:0:17::/64"),
			want: "e4=* c4=198.19.64.10 | 80 " + members4 + " cidrs=198.18.1.0/24,198.18.17.0/24 ext="},
		{name: "source ranges and pod networks of both families on a dual-stack load balancer",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyPreferDualStack, ip4, ip6), func(s *corev1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24", "2001:2:0:1::/64"}
				s.Spec.AllocateLoadBalancerNodePorts, s.Spec.Ports[0].NodePort = ptr.To(false), 0
			}), o: withPodCIDRs(dual, "198.18.17.0/24", "2001:2:0:17::/64"),
			want: "e4=* e6=* c4=198.19.64.10 c6=2001:2:0:a000::10 | 80 " + both + " cidrs=198.18.1.0/24,198.18.17.0/24,2001:2:0:17::/64,2001:2:0:1::/64 ext="},
		{name: "source ranges of no served family: refused rather than open",
			svc: service(stackOf(corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicySingleStack, ip4), func(s *corev1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"2001:2:0:1::/64"}
			}), o: dual,
			err: "none is of the Service's IP families"},
		{name: "external IPs of the served families",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicyPreferDualStack, ip4, ip6), func(s *corev1.Service) {
				s.Spec.ExternalIPs = []string{"2001:2:0:c000::9", "198.19.200.1"}
			}), o: dual,
			want: "c4=198.19.64.10 c6=2001:2:0:a000::10 | 80 " + both + " cidrs= ext=198.19.200.1,2001:2:0:c000::9"},
		{name: "external IPs of the served families: IPv4 alone without IPv6 subnets",
			svc: service(stackOf(corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicyPreferDualStack, ip4, ip6), func(s *corev1.Service) {
				s.Spec.ExternalIPs = []string{"2001:2:0:c000::9", "198.19.200.1"}
			}), o: v4only,
			want: "c4=198.19.64.10 | 80 " + members4 + " cidrs= ext=198.19.200.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb, err := Desired(tc.svc, eps, tc.o)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if got := brief(lb); got != tc.want {
					t.Errorf("\ngot  %s\nwant %s", got, tc.want)
				}
			}
		})
	}
}

func withPodCIDRs(o Options, cidrs ...string) Options {
	o.PodCIDRs = cidrs
	return o
}

// TestIngressIPs: the addresses of the external VIPs as applied, primary
// first, each additional one found by its subnet; cluster IPs are not
// ingress.
func TestIngressIPs(t *testing.T) {
	dual := &LB{VIP: VIP{SubnetID: "e6", External: true},
		AdditionalVIPs: []VIP{{SubnetID: "e4", External: true}, {SubnetID: "c6", Address: "2001:2:0:a000::10"}, {SubnetID: "c4", Address: "198.19.64.10"}}}
	applied := Result{VIPAddress: "2001:2:0:c000::5", AdditionalVIPs: []ActualVIP{
		{SubnetID: "c4", IPAddress: "198.19.64.10"}, {SubnetID: "e4", IPAddress: "198.19.128.5"}, {SubnetID: "c6", IPAddress: "2001:2:0:a000::10"}}}
	for _, tc := range []struct {
		name string
		lb   *LB
		r    Result
		want []string
	}{
		{"ClusterIP: none", &LB{VIP: VIP{SubnetID: "c4", Address: "198.19.64.10"}}, Result{VIPAddress: "198.19.64.10"}, nil},
		{"single-stack LoadBalancer: the VIP", &LB{VIP: VIP{SubnetID: "e4", External: true}, AdditionalVIPs: []VIP{{SubnetID: "c4", Address: "198.19.64.10"}}},
			Result{VIPAddress: "198.19.128.5", AdditionalVIPs: []ActualVIP{{SubnetID: "c4", IPAddress: "198.19.64.10"}}}, []string{"198.19.128.5"}},
		{"dual-stack: both external addresses, the primary's family first", dual, applied, []string{"2001:2:0:c000::5", "198.19.128.5"}},
		{"an external VIP the answer lacks is left out", dual, Result{VIPAddress: "2001:2:0:c000::5"}, []string{"2001:2:0:c000::5"}},
	} {
		if got := tc.lb.IngressIPs(tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDesiredNodePorts: which Services get node-port listeners, and what
// each carries.
func TestDesiredNodePorts(t *testing.T) {
	eps := []*discoveryv1.EndpointSlice{slice("a", 8080, "http", ep{"198.18.17.2", "n1", "p1", true, true, false})}
	withPorts := func(typ corev1.ServiceType, ports ...corev1.ServicePort) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.Type, s.Spec.Ports = typ, ports }
	}
	http := corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}
	dns := corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053}
	sctp := corev1.ServicePort{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 2905, NodePort: 32905}
	// brief: protocol/port name tags, one listener a line.
	brief := func(lb *LB) string {
		var out []string
		for _, l := range lb.Listeners {
			out = append(out, l.Protocol+"/"+strconv.Itoa(l.Port)+" "+l.Name+" "+strings.Join(l.Tags, ",")+" cidrs="+strings.Join(l.AllowedCIDRs, ","))
		}
		return strings.Join(out, "\n")
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want string
		err  string
	}{
		{name: "NodePort: a node-port listener per port, TCP, UDP and SCTP",
			svc:  service(withPorts(corev1.ServiceTypeNodePort, http, dns, sctp)),
			want: "TCP/80 http  cidrs=\nTCP/30080 http-node-port flowlb:node-port cidrs=\nUDP/53 dns  cidrs=\nUDP/30053 dns-node-port flowlb:node-port cidrs=\nSCTP/2905 sig  cidrs=\nSCTP/32905 sig-node-port flowlb:node-port cidrs="},
		{name: "NodePort with externalTrafficPolicy Local: only the node port is local-only",
			svc: service(withPorts(corev1.ServiceTypeNodePort, http), func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}),
			want: "TCP/80 http  cidrs=\nTCP/30080 http-node-port flowlb:node-port,flowlb:local-only cidrs="},
		{name: "internalTrafficPolicy Local governs the cluster IP, not the node port; PreferClose both",
			svc: service(withPorts(corev1.ServiceTypeNodePort, http), func(s *corev1.Service) {
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
			}),
			want: "TCP/80 http flowlb:internal-local,flowlb:prefer-close cidrs=\nTCP/30080 http-node-port flowlb:node-port,flowlb:prefer-close cidrs="},
		{name: "LoadBalancer: node ports beside the VIP's; source ranges do not restrict them",
			svc: service(withPorts(corev1.ServiceTypeLoadBalancer, http), func(s *corev1.Service) {
				s.Spec.LoadBalancerSourceRanges = []string{"198.18.1.0/24"}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}),
			want: "TCP/80 http flowlb:local-only cidrs=198.18.1.0/24\nTCP/30080 http-node-port flowlb:node-port,flowlb:local-only cidrs="},
		{name: "LoadBalancer with allocateLoadBalancerNodePorts false: no node port (none allocated)",
			svc: service(withPorts(corev1.ServiceTypeLoadBalancer, corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}), func(s *corev1.Service) {
				s.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
			}),
			want: "TCP/80 http  cidrs="},
		{name: "LoadBalancer, Local, with a health-check node port: on every local-only listener",
			svc: service(withPorts(corev1.ServiceTypeLoadBalancer, http, dns), func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30500
			}),
			want: "TCP/80 http flowlb:local-only,flowlb:health-check-node-port=30500 cidrs=\n" +
				"TCP/30080 http-node-port flowlb:node-port,flowlb:local-only,flowlb:health-check-node-port=30500 cidrs=\n" +
				"UDP/53 dns flowlb:local-only,flowlb:health-check-node-port=30500 cidrs=\n" +
				"UDP/30053 dns-node-port flowlb:node-port,flowlb:local-only,flowlb:health-check-node-port=30500 cidrs="},
		{name: "health-check node port without node ports: on the VIP's listener",
			svc: service(withPorts(corev1.ServiceTypeLoadBalancer, corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}), func(s *corev1.Service) {
				s.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30500
			}),
			want: "TCP/80 http flowlb:local-only,flowlb:health-check-node-port=30500 cidrs="},
		{name: "NodePort, Local, with a health-check node port: on the node port",
			svc: service(withPorts(corev1.ServiceTypeNodePort, http), func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 30500
			}),
			want: "TCP/80 http  cidrs=\nTCP/30080 http-node-port flowlb:node-port,flowlb:local-only,flowlb:health-check-node-port=30500 cidrs="},
		{name: "a health-check node port with externalTrafficPolicy Cluster is not served, as in kube-proxy",
			svc: service(withPorts(corev1.ServiceTypeLoadBalancer, http), func(s *corev1.Service) {
				s.Spec.HealthCheckNodePort = 30500
			}),
			want: "TCP/80 http  cidrs=\nTCP/30080 http-node-port flowlb:node-port cidrs="},
		{name: "ClusterIP: a stray nodePort is not served",
			svc:  service(withPorts(corev1.ServiceTypeClusterIP, http)),
			want: "TCP/80 http  cidrs="},
		{name: "a node port equal to another port's number is refused",
			svc: service(withPorts(corev1.ServiceTypeNodePort, http, corev1.ServicePort{Name: "alt", Protocol: corev1.ProtocolTCP, Port: 30080, NodePort: 30081})),
			err: "both on TCP/30080"},
		{name: "the same number on another protocol is fine",
			svc:  service(withPorts(corev1.ServiceTypeNodePort, http, corev1.ServicePort{Name: "alt", Protocol: corev1.ProtocolUDP, Port: 30080})),
			want: "TCP/80 http  cidrs=\nTCP/30080 http-node-port flowlb:node-port cidrs=\nUDP/30080 alt  cidrs="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb, err := Desired(tc.svc, eps, opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := brief(lb); got != tc.want {
				t.Errorf("listeners\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// A node port's pool is the Service port's: same endpoints, algorithm,
// persistence and monitor, in objects of its own.
func TestDesiredNodePortPool(t *testing.T) {
	svc := service(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Annotations = map[string]string{AnnHealthMonitor: "true", AnnLBMethod: "SOURCE_IP"}
	})
	eps := []*discoveryv1.EndpointSlice{slice("a", 8080, "http", ep{"198.18.17.2", "n1", "p1", true, true, false}, ep{"198.18.18.2", "n2", "p2", true, true, false})}
	lb, err := Desired(svc, eps, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(lb.Listeners) != 2 {
		t.Fatalf("listeners %+v", lb.Listeners)
	}
	vip, np := lb.Listeners[0].Pool, lb.Listeners[1].Pool
	if np.Name != "http-node-port" || np.Protocol != "TCP" {
		t.Errorf("node-port pool %+v", np)
	}
	np.Name = vip.Name
	if !reflect.DeepEqual(vip, np) {
		t.Errorf("node-port pool\n%+v\nwant the port's\n%+v", np, vip)
	}
	if &vip.Members[0] == &np.Members[0] || vip.Monitor == np.Monitor {
		t.Error("the node-port pool shares the port pool's members or monitor")
	}
}
