// Package kubelb translates a Kubernetes Service and its EndpointSlices
// into the load balancer that serves it, in Octavia's terms (docs/kubernetes.md).
// It is pure: the controller (package kubecontroller) reads the objects
// and applies the result through any Octavia-compatible API.
package kubelb

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Options are the cluster-wide settings of the translation.
type Options struct {
	// Cluster names the Kubernetes cluster in LB names and tags, so that
	// several clusters can share one Octavia project.
	Cluster string
	// ClusterIPSubnet is the Octavia VIP subnet holding the Services'
	// cluster IPs; ExternalSubnet the one LoadBalancer addresses come
	// from. All four must be on one network (additional_vips).
	ClusterIPSubnet, ExternalSubnet string
	// ClusterIPSubnet6 and ExternalSubnet6 are their IPv6 twins. Without
	// ClusterIPSubnet6 IPv6 is not served: a dual-stack Service gets its
	// IPv4 family only, an IPv6-only one is refused. Without
	// ExternalSubnet6 a LoadBalancer Service has no IPv6 external
	// address.
	ClusterIPSubnet6, ExternalSubnet6 string
	// Class is the loadBalancerClass whose external addresses are ours,
	// besides none unless ClassOnly (OwnsExternal).
	Class string
	// ClassOnly leaves the LoadBalancer Services of no class to another
	// controller, the cluster's cloud provider (cloud-provider-openstack's
	// service controller takes exactly those): they are served as
	// NodePort ones, their load balancer and ingress are that
	// controller's.
	ClassOnly bool
	// FloatingNetwork (an ID or a name) turns on the Kuryr model: a
	// LoadBalancer Service keeps its cluster IP as its only VIP and is
	// reached through a floating IP of this network associated with the
	// VIP port. The Service's annotations may pick another network or
	// opt out.
	FloatingNetwork string
	// PodCIDRs are the cluster's pod networks (the controller adds the
	// Nodes' spec.podCIDRs to those configured). Source ranges restrict the
	// external address, but Octavia's allowed_cidrs hold for every VIP of
	// a listener, the cluster IP included: pods are let through so that
	// in-cluster traffic to the cluster IP keeps working.
	PodCIDRs []string
	// AnnounceWait turns on the ingress gate (IngressGate): a Service's
	// external addresses are written to its status once a node announces
	// one of them, and, when the API replica asked cannot see every node,
	// after this long at the latest. 0: at ACTIVE, announced or not.
	AnnounceWait time.Duration
}

// DefaultClass is the loadBalancerClass flowlb answers to by default.
const DefaultClass = "flowlb.io/flowlb"

// Tags on the load balancers the controller owns.
const (
	TagCluster = "flowlb:kube-cluster="
	TagService = flows.TagKubeServicePrefix // namespace/name
	TagUID     = "flowlb:kube-uid="
	// TagFloatingIP marks a load balancer whose VIP port the controller
	// gave a floating IP: the floating IP is released before the load
	// balancer changes to one without (or goes).
	TagFloatingIP = "flowlb:kube-floating-ip"
)

// LabelServiceProxyName on a Service, whatever its value, hands it to
// another proxy: kube-proxy leaves such Services alone, and so does flowlb.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// LabelHeadless on a Service, whatever its value, makes it headless for
// the service proxies (its cluster IP is not served, as for a Service of
// clusterIP None): kube-proxy's informers select Services without it.
const LabelHeadless = "service.kubernetes.io/headless"

// Annotations of cloud-provider-openstack that are read.
const (
	AnnLBMethod         = "loadbalancer.openstack.org/lb-method"
	AnnHealthMonitor    = "loadbalancer.openstack.org/enable-health-monitor"
	AnnHMDelay          = "loadbalancer.openstack.org/health-monitor-delay"
	AnnHMTimeout        = "loadbalancer.openstack.org/health-monitor-timeout"
	AnnHMMaxRetries     = "loadbalancer.openstack.org/health-monitor-max-retries"
	AnnHMMaxRetriesDown = "loadbalancer.openstack.org/health-monitor-max-retries-down"
	AnnSourceRanges     = "service.beta.kubernetes.io/load-balancer-source-ranges"
	// AnnFloatingNetwork picks the floating network (an ID or a name) of
	// a LoadBalancer Service, with or without --floating-network.
	AnnFloatingNetwork = "loadbalancer.openstack.org/floating-network-id"
	// AnnInternal "true" opts a LoadBalancer Service out of the floating
	// IP: it gets an address from the external subnet instead.
	AnnInternal = "service.beta.kubernetes.io/openstack-internal-load-balancer"
	// Listener timeouts in milliseconds. They are set on the listeners for
	// any Octavia provider to apply; flowlb's flow provider forwards with
	// NAT, has no client or member connection of its own, and applies
	// none of them (docs/kubernetes.md).
	AnnTimeoutClientData    = "loadbalancer.openstack.org/timeout-client-data"
	AnnTimeoutMemberConnect = "loadbalancer.openstack.org/timeout-member-connect"
	AnnTimeoutMemberData    = "loadbalancer.openstack.org/timeout-member-data"
	AnnTimeoutTCPInspect    = "loadbalancer.openstack.org/timeout-tcp-inspect"
)

// LB is the desired load balancer of a Service.
type LB struct {
	Name        string
	Description string
	Tags        []string
	VIP         VIP
	// AdditionalVIPs: the second family's cluster IP, and for a
	// LoadBalancer Service the second family's external address and the
	// cluster IPs (the external addresses come first).
	AdditionalVIPs []VIP
	Listeners      []Listener
	// External: a LoadBalancer Service, whose primary VIP (or floating
	// IP) goes to status.loadBalancer.ingress.
	External bool
	// FloatingIP: the floating IP to associate with the VIP port (nil:
	// none); its address is the ingress.
	FloatingIP *FloatingIP
}

// FloatingIP is the floating IP a LoadBalancer Service is reached
// through.
type FloatingIP struct {
	// Network is the floating network, an ID or a name.
	Network string
	// Address is spec.loadBalancerIP: an existing floating IP to
	// associate, or the address to create one with; "" for any.
	Address string
}

// VIP is an address on a subnet ("" address: the subnet allocates one).
type VIP struct {
	SubnetID, Address string
	// External: a LoadBalancer Service's external address, which goes to
	// status.loadBalancer.ingress (IngressIPs).
	External bool
}

// Listener is one Service port.
type Listener struct {
	Name         string
	Protocol     string // TCP, UDP, SCTP
	Port         int
	AllowedCIDRs []string
	// Tags: flows.TagLocalOnly for externalTrafficPolicy=Local,
	// flows.TagNodePort on a node port's listener, ...
	Tags     []string
	Timeouts Timeouts
	Pool     Pool
}

// Timeouts are a listener's timeouts in milliseconds, as Octavia has them.
type Timeouts struct {
	ClientData, MemberConnect, MemberData, TCPInspect int
}

// DefaultTimeouts are Octavia's defaults, which cloud-provider-openstack
// also sets when an annotation is absent.
var DefaultTimeouts = Timeouts{ClientData: 50000, MemberConnect: 5000, MemberData: 50000, TCPInspect: 0}

// maxTimeout is the largest timeout Octavia accepts (24 hours, in ms).
const maxTimeout = 86400000

// Pool is a listener's backends.
type Pool struct {
	Name        string
	Protocol    string
	Algorithm   string
	Persistence *Persistence
	Members     []Member
	Monitor     *Monitor
}

// Persistence is SOURCE_IP session persistence.
type Persistence struct {
	Type    string
	Timeout int // seconds
}

// Member is one endpoint address and target port.
type Member struct {
	Name    string
	Address string
	Port    int
	Tags    []string // flows.TagNodePrefix + node
}

// Key identifies a member within its pool.
func (m Member) Key() string { return hostPort(m.Address, m.Port) }

func hostPort(a string, p int) string {
	return netip.AddrPortFrom(netip.MustParseAddr(a), uint16(p)).String()
}

// Monitor is a health monitor built from the Service's annotations.
type Monitor struct {
	Type                                       string
	Delay, Timeout, MaxRetries, MaxRetriesDown int
}

// Name is the LB name of a Service, as Kuryr and cloud-provider-openstack
// name theirs.
func Name(cluster, namespace, name string) string {
	return "kube_service_" + cluster + "_" + namespace + "_" + name
}

// Serves reports whether the controller answers for svc: ClusterIP,
// NodePort and LoadBalancer Services with a cluster IP that no other proxy
// is named for. Like kube-proxy, it serves a LoadBalancer Service of
// another loadBalancerClass too, but only as a NodePort one
// (OwnsExternal).
func Serves(svc *corev1.Service, o Options) bool {
	if _, ok := svc.Labels[LabelServiceProxyName]; ok {
		return false
	}
	if _, ok := svc.Labels[LabelHeadless]; ok {
		return false
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, "", corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
	default:
		return false // ExternalName
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return false // headless
	}
	return true
}

// OwnsExternal reports whether svc's external address is the
// controller's to allocate and write to status.loadBalancer.ingress: a
// LoadBalancer Service of our loadBalancerClass, or of none unless
// o.ClassOnly. Another implementation (another class's, or the cloud
// provider's for no class) gives it its address; its cluster IP, node
// ports, health-check node port and external IPs are still served, as
// kube-proxy serves them.
func OwnsExternal(svc *corev1.Service, o Options) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == cmp.Or(o.Class, DefaultClass)
	}
	return !o.ClassOnly
}

// Desired is the load balancer svc should have, given its EndpointSlices.
// It fails on what cannot be served (the caller reports it as an event).
func Desired(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, o Options) (*LB, error) {
	if !Serves(svc, o) {
		return nil, nil
	}
	lb := &LB{
		Name:        Name(o.Cluster, svc.Namespace, svc.Name),
		Description: "Kubernetes Service " + svc.Namespace + "/" + svc.Name,
		Tags:        []string{TagCluster + o.Cluster, TagService + svc.Namespace + "/" + svc.Name, TagUID + string(svc.UID)},
	}
	st, err := stacksOf(svc, o)
	if err != nil {
		return nil, err
	}
	if err := setVIPs(lb, svc, st, o); err != nil {
		return nil, err
	}
	fam := familiesOf(st)
	ls, err := listenerTemplate(svc, lb.External, externalIPs(svc, fam, o), fam, o)
	if err != nil {
		return nil, err
	}
	for _, sp := range svc.Spec.Ports {
		l, err := ls.forPort(sp, eps, fam)
		if err != nil {
			return nil, err
		}
		lb.Listeners = append(lb.Listeners, l)
		if servesNodePorts(svc) && sp.NodePort != 0 {
			lb.Listeners = append(lb.Listeners, ls.nodePort(l, int(sp.NodePort)))
		}
	}
	if err := distinctPorts(lb.Listeners); err != nil {
		return nil, err
	}
	return lb, nil
}

// servesNodePorts reports whether svc's node ports are served: those of
// a NodePort or LoadBalancer Service, whichever spec.ports[].nodePort
// holds (none for a LoadBalancer Service with
// allocateLoadBalancerNodePorts false, unless one was asked for), as
// kube-proxy serves them.
func servesNodePorts(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

// nodePort is the listener of the node port of the Service port whose
// listener is l: tagged flows.TagNodePort, on the node port, with a pool
// of the same endpoints. Source ranges do not restrict node ports, and
// internalTrafficPolicy does not apply to them, as in kube-proxy.
func (s *listenerSettings) nodePort(l Listener, port int) Listener {
	np := l
	np.Name, np.Port, np.AllowedCIDRs, np.Tags = l.Name+"-node-port", port, nil, s.nodePortTags
	np.Pool.Name = np.Name
	np.Pool.Members = slices.Clone(l.Pool.Members)
	if l.Pool.Monitor != nil {
		m := *l.Pool.Monitor
		np.Pool.Monitor = &m
	}
	return np
}

// distinctPorts refuses two listeners on one protocol and port, which a
// node port equal to another Service port's number would make and
// Octavia refuses.
func distinctPorts(ls []Listener) error {
	seen := map[string]string{}
	for _, l := range ls {
		k := l.Protocol + "/" + strconv.Itoa(l.Port)
		if other, ok := seen[k]; ok {
			return fmt.Errorf("listeners %s and %s are both on %s: a node port may not be the number of another port of the Service", other, l.Name, k)
		}
		seen[k] = l.Name
	}
	return nil
}

// stack is what a Service gets of one IP family: its cluster IP and the
// controller's subnets of that family.
type stack struct {
	clusterIP                     netip.Addr
	clusterSubnet, externalSubnet string
}

// stacksOf are svc's cluster IPs, in its order of families (spec.clusterIPs
// follows spec.ipFamilies), of the families the controller has a
// cluster-IP subnet for.
func stacksOf(svc *corev1.Service, o Options) ([]stack, error) {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []stack
	for _, ip := range ips {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("cluster IP %q: %w", ip, err)
		}
		s := stack{clusterIP: a.Unmap(), clusterSubnet: o.ClusterIPSubnet, externalSubnet: o.ExternalSubnet}
		if s.clusterIP.Is6() {
			s.clusterSubnet, s.externalSubnet = o.ClusterIPSubnet6, o.ExternalSubnet6
		}
		if s.clusterSubnet != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cluster IP of a family the controller serves (%v): IPv6 needs an IPv6 cluster-IP subnet (--cluster-ip-subnet6 or --cluster-ip-cidr6)", ips)
	}
	return out, nil
}

// families says which IP families a load balancer serves.
type families struct{ v4, v6 bool }

func familiesOf(st []stack) families {
	var f families
	for _, s := range st {
		f.v4 = f.v4 || s.clusterIP.Is4()
		f.v6 = f.v6 || s.clusterIP.Is6()
	}
	return f
}

// has reports whether a's family is served.
func (f families) has(a netip.Addr) bool {
	if a.Unmap().Is4() {
		return f.v4
	}
	return f.v6
}

// setVIPs sets lb's VIPs: the cluster IPs of st in order, or for a
// LoadBalancer Service its external addresses (one per family with an
// external subnet) first, then the cluster IPs.
func setVIPs(lb *LB, svc *corev1.Service, st []stack, o Options) error {
	var cluster []VIP
	for _, s := range st {
		cluster = append(cluster, VIP{SubnetID: s.clusterSubnet, Address: s.clusterIP.String()})
	}
	if !OwnsExternal(svc, o) {
		lb.setVIPs(cluster)
		return nil
	}
	lb.External = true
	network, err := floatingNetwork(svc, o)
	if err != nil {
		return err
	}
	if network != "" {
		// The Kuryr model: the floating IP translates to the cluster IP,
		// which must be the IPv4 one (Neutron's floating IPs are IPv4)
		// and the primary VIP, whose port address the floating IP takes.
		i := slices.IndexFunc(st, func(s stack) bool { return s.clusterIP.Is4() })
		if i < 0 {
			return fmt.Errorf("a floating IP needs an IPv4 cluster IP; this Service has %v (opt out with %s=true)", svc.Spec.ClusterIPs, AnnInternal)
		}
		lb.setVIPs(append([]VIP{cluster[i]}, slices.Delete(slices.Clone(cluster), i, i+1)...))
		lb.FloatingIP = &FloatingIP{Network: network, Address: svc.Spec.LoadBalancerIP}
		lb.Tags = append(lb.Tags, TagFloatingIP)
		return nil
	}
	var ext []VIP
	asked := false // spec.loadBalancerIP found its family
	for _, s := range st {
		if s.externalSubnet == "" {
			continue
		}
		v := VIP{SubnetID: s.externalSubnet, External: true}
		if a, err := netip.ParseAddr(svc.Spec.LoadBalancerIP); err == nil && a.Unmap().Is4() == s.clusterIP.Is4() {
			v.Address, asked = a.Unmap().String(), true
		}
		ext = append(ext, v)
	}
	switch {
	case len(ext) == 0:
		return fmt.Errorf("type LoadBalancer needs an external subnet (--external-subnet, --external-subnet6 for IPv6) or a floating network (--floating-network)")
	case svc.Spec.LoadBalancerIP != "" && !asked:
		return fmt.Errorf("loadBalancerIP %s: no external subnet of its family serves this Service", svc.Spec.LoadBalancerIP)
	}
	lb.setVIPs(append(ext, cluster...))
	return nil
}

// setVIPs makes the first of vips the primary VIP, the others additional.
func (lb *LB) setVIPs(vips []VIP) {
	lb.VIP = vips[0]
	if len(vips) > 1 {
		lb.AdditionalVIPs = vips[1:]
	}
}

// floatingNetwork is the floating network of a LoadBalancer Service: none
// when it opts out, else its annotation's, else the controller's.
func floatingNetwork(svc *corev1.Service, o Options) (string, error) {
	internal, err := annBool(svc.Annotations, AnnInternal)
	if err != nil || internal {
		return "", err
	}
	if n, ok := svc.Annotations[AnnFloatingNetwork]; ok {
		if n = strings.TrimSpace(n); n == "" {
			return "", fmt.Errorf("annotation %s is empty: name a network, or remove it", AnnFloatingNetwork)
		}
		return n, nil
	}
	return o.FloatingNetwork, nil
}

// listenerSettings are what every listener of a Service shares; forPort
// makes one listener of them.
type listenerSettings struct {
	algorithm    string
	persistence  *Persistence
	allowedCIDRs []string
	// tags: of the listeners of the Service ports, external IPs included.
	tags []string
	// nodePortTags are the tags of the node-port listeners.
	nodePortTags []string
	monitor      *Monitor
	timeouts     Timeouts
}

// listenerTemplate reads the settings every listener of svc shares from
// its spec and annotations; extIPs are its external IPs, fam the families
// its load balancer serves.
func listenerTemplate(svc *corev1.Service, external bool, extIPs []string, fam families, o Options) (*listenerSettings, error) {
	alg, err := algorithmOf(svc.Annotations)
	if err != nil {
		return nil, err
	}
	var ranges []string
	if external {
		if ranges, err = allowedCIDRs(svc, o.PodCIDRs, fam); err != nil {
			return nil, err
		}
	}
	monitor, err := monitorOf(svc.Annotations)
	if err != nil {
		return nil, err
	}
	timeouts, err := timeoutsOf(svc.Annotations)
	if err != nil {
		return nil, err
	}
	return &listenerSettings{algorithm: alg, persistence: persistenceOf(svc), allowedCIDRs: ranges,
		tags: listenerTags(svc, external, extIPs), nodePortTags: nodePortTags(svc), monitor: monitor, timeouts: timeouts}, nil
}

// nodePortTags mark a node-port listener, with externalTrafficPolicy
// Local (whatever the Service's type: it governs node ports too) and the
// topology preference.
func nodePortTags(svc *corev1.Service) []string {
	tags := []string{flows.TagNodePort}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		tags = append(tags, flows.TagLocalOnly)
		tags = append(tags, healthCheckTags(svc)...)
	}
	if prefersClose(svc) {
		tags = append(tags, flows.TagPreferClose)
	}
	return tags
}

// healthCheckTags carry spec.healthCheckNodePort, which the API server
// allocates for LoadBalancer Services with externalTrafficPolicy Local
// (or the user sets), to the local-only listeners: external load
// balancers ask each node's health check whether it holds an endpoint.
func healthCheckTags(svc *corev1.Service) []string {
	if p := svc.Spec.HealthCheckNodePort; p > 0 && p <= 65535 {
		return []string{flows.TagHealthCheckNodePortPrefix + strconv.Itoa(int(p))}
	}
	return nil
}

// forPort is the listener of Service port sp, with its pool of the
// endpoints of the families fam.
func (s *listenerSettings) forPort(sp corev1.ServicePort, eps []*discoveryv1.EndpointSlice, fam families) (Listener, error) {
	proto := string(cmp.Or(sp.Protocol, corev1.ProtocolTCP))
	name := cmp.Or(sp.Name, strings.ToLower(proto)+"-"+strconv.Itoa(int(sp.Port)))
	l := Listener{Name: name, Protocol: proto, Port: int(sp.Port), AllowedCIDRs: s.allowedCIDRs, Tags: s.tags, Timeouts: s.timeouts,
		Pool: Pool{Name: name, Protocol: proto, Algorithm: s.algorithm, Persistence: s.persistence, Members: members(sp, slicesOf(eps), fam)}}
	if s.monitor != nil {
		m := *s.monitor
		switch proto {
		case "TCP":
			m.Type = "TCP"
		case "UDP":
			m.Type = "UDP-CONNECT"
		default:
			return Listener{}, fmt.Errorf("health monitors are not supported for %s ports", proto)
		}
		l.Pool.Monitor = &m
	}
	return l, nil
}

// algorithmOf is the pool algorithm the lb-method annotation asks for
// (ROUND_ROBIN when absent).
func algorithmOf(ann map[string]string) (string, error) {
	m := ann[AnnLBMethod]
	if m == "" {
		return "ROUND_ROBIN", nil
	}
	alg := strings.ToUpper(m)
	if !slices.Contains([]string{"ROUND_ROBIN", "SOURCE_IP", "SOURCE_IP_PORT"}, alg) {
		return "", fmt.Errorf("annotation %s=%q: use ROUND_ROBIN, SOURCE_IP or SOURCE_IP_PORT", AnnLBMethod, m)
	}
	return alg, nil
}

// persistenceOf is ClientIP session affinity as SOURCE_IP persistence.
func persistenceOf(svc *corev1.Service) *Persistence {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return nil
	}
	timeout := 10800
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		timeout = int(*c.ClientIP.TimeoutSeconds)
	}
	return &Persistence{Type: "SOURCE_IP", Timeout: timeout}
}

// allowedCIDRs are the source ranges of a LoadBalancer Service and, when
// there are any, the pod networks (allowed_cidrs guard the cluster IP
// too), of the families fam only (Octavia refuses a CIDR of a family none
// of the VIPs has), masked, sorted and without duplicates. Source ranges
// of no served family would leave the listeners open: refused.
func allowedCIDRs(svc *corev1.Service, podCIDRs []string, fam families) ([]string, error) {
	var ranges []string
	rs := sourceRanges(svc)
	for _, r := range rs {
		p, err := netip.ParsePrefix(strings.TrimSpace(r))
		if err != nil {
			return nil, fmt.Errorf("load balancer source range %q: %w", r, err)
		}
		if fam.has(p.Addr()) {
			ranges = append(ranges, p.Masked().String())
		}
	}
	if len(rs) > 0 && len(ranges) == 0 {
		return nil, fmt.Errorf("load balancer source ranges %v: none is of the Service's IP families", rs)
	}
	if len(ranges) > 0 {
		for _, c := range podCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, fmt.Errorf("pod CIDR %q: %w", c, err)
			}
			if fam.has(p.Addr()) {
				ranges = append(ranges, p.Masked().String())
			}
		}
	}
	slices.Sort(ranges)
	return slices.Compact(ranges), nil
}

// listenerTags carry the traffic policies, the topology preference and
// the external IPs. externalTrafficPolicy governs a Service reachable from
// outside on its listeners: one with its external address (external), or
// with external IPs.
func listenerTags(svc *corev1.Service, external bool, extIPs []string) []string {
	var tags []string
	if (external || len(extIPs) > 0) && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		tags = append([]string{flows.TagLocalOnly}, healthCheckTags(svc)...)
	}
	for _, a := range extIPs {
		tags = append(tags, flows.TagExternalIPPrefix+a)
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		tags = append(tags, flows.TagInternalLocal)
	}
	if prefersClose(svc) {
		tags = append(tags, flows.TagPreferClose)
	}
	return tags
}

// externalIPs are the addresses besides its VIPs on which svc is served,
// as kube-proxy serves them: spec.externalIPs and, for a LoadBalancer
// Service of another loadBalancerClass, the IPs of its
// status.loadBalancer.ingress, unless their ipMode is Proxy (that
// implementation's proxy takes the traffic, and kube-proxy leaves those
// alone too). The ingress of a Service of no class that is not ours
// (--load-balancer-class-only) is the cloud provider's load balancer's
// VIP, served by that load balancer (by flowlb's own when
// cloud-provider-openstack drives flowlb's API): taking it too would put
// a second load balancer on the same address and port. Of the families fam only (as kube-proxy, an address of a
// family the Service does not have is not served), canonical, sorted and
// without duplicates; those that do not parse are left out (the API
// server validates them).
func externalIPs(svc *corev1.Service, fam families, o Options) []string {
	var out []string
	add := func(s string) {
		if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil && fam.has(a) {
			out = append(out, a.Unmap().String())
		}
	}
	for _, s := range svc.Spec.ExternalIPs {
		add(s)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass != nil && !OwnsExternal(svc, o) {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IPMode == nil || *in.IPMode == corev1.LoadBalancerIPModeVIP {
				add(in.IP)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SourceRestricted reports whether svc is a LoadBalancer Service whose
// source ranges restrict its listeners (and so list the pod networks).
func SourceRestricted(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(sourceRanges(svc)) > 0
}

// sourceRanges are spec.loadBalancerSourceRanges or, when empty, the
// older annotation's.
func sourceRanges(svc *corev1.Service) []string {
	if rs := svc.Spec.LoadBalancerSourceRanges; len(rs) > 0 {
		return rs
	}
	if a := svc.Annotations[AnnSourceRanges]; a != "" {
		return strings.Split(a, ",")
	}
	return nil
}

func slicesOf(s []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := slices.Clone(s)
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// members are the endpoints of the families fam serving Service port sp
// (a pool holds both families; each VIP uses its own family's): the ready
// ones, or, when none is ready, the serving ones that are terminating,
// tagged so (so that a rolling update or a scale-down to zero drains
// instead of failing, while health checks send new clients elsewhere).
func members(sp corev1.ServicePort, es []*discoveryv1.EndpointSlice, fam families) []Member {
	var ready, terminating []Member
	seen := map[string]bool{}
	for _, s := range es {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN
		}
		port := -1
		for _, p := range s.Ports {
			if p.Port != nil && ptrStr(p.Name) == sp.Name && cmp.Or(ptrProto(p.Protocol), corev1.ProtocolTCP) == cmp.Or(sp.Protocol, corev1.ProtocolTCP) {
				port = int(*p.Port)
			}
		}
		if port < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			isReady := e.Conditions.Ready == nil || *e.Conditions.Ready
			serving := e.Conditions.Serving == nil || *e.Conditions.Serving
			isTerminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			for _, a := range e.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || addr.Is6() != (s.AddressType == discoveryv1.AddressTypeIPv6) || !fam.has(addr) {
					continue
				}
				m := Member{Address: addr.String(), Port: port, Name: a}
				if e.TargetRef != nil {
					m.Name = e.TargetRef.Name
				}
				if e.NodeName != nil {
					m.Tags = []string{flows.TagNodePrefix + *e.NodeName}
				}
				m.Tags = append(m.Tags, hintTags(e.Hints)...)
				if seen[m.Key()] {
					continue
				}
				switch {
				case isReady:
					seen[m.Key()] = true
					ready = append(ready, m)
				case serving && isTerminating:
					m.Tags = append(m.Tags, flows.TagTerminating)
					terminating = append(terminating, m)
				}
			}
		}
	}
	out := ready
	if len(out) == 0 {
		out = terminating
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Key(), b.Key()) })
	return slices.CompactFunc(out, func(a, b Member) bool { return a.Key() == b.Key() })
}

// prefersClose reports whether svc asks that its traffic stay close to
// the client: trafficDistribution PreferClose or its alias
// PreferSameZone, PreferSameNode (the node, then the zone), or
// topology-aware routing (service.kubernetes.io/topology-mode: Auto).
// The hints on the endpoints say which level applies (hintTags).
func prefersClose(svc *corev1.Service) bool {
	if td := svc.Spec.TrafficDistribution; td != nil {
		switch *td {
		case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferSameNode:
			return true
		}
	}
	return strings.EqualFold(svc.Annotations[corev1.AnnotationTopologyMode], "auto")
}

// hintTags are the member tags of an endpoint's hints, which kube-proxy
// follows: its zone hints, which the EndpointSlice controller sets for
// PreferClose and PreferSameNode (the endpoint's own zone) and
// topology-mode Auto (a zone it is allotted to), and its node hints,
// which it sets for PreferSameNode (the endpoint's own node). An endpoint
// without hints gets none: its pool then has no preference at that level
// (flows.Service.Near), as in kube-proxy.
func hintTags(h *discoveryv1.EndpointHints) []string {
	if h == nil {
		return nil
	}
	var zones, nodes []string
	for _, z := range h.ForZones {
		if z.Name != "" {
			zones = append(zones, flows.TagZonePrefix+z.Name)
		}
	}
	for _, n := range h.ForNodes {
		if n.Name != "" {
			nodes = append(nodes, flows.TagForNodePrefix+n.Name)
		}
	}
	slices.Sort(zones)
	slices.Sort(nodes)
	return append(slices.Compact(zones), slices.Compact(nodes)...)
}

func ptrStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptrProto(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return ""
	}
	return *p
}

// monitorOf reads cloud-provider-openstack's health monitor annotations
// (its defaults: delay 5, timeout 3, max_retries 1, max_retries_down 3).
func monitorOf(ann map[string]string) (*Monitor, error) {
	on, err := annBool(ann, AnnHealthMonitor)
	if err != nil || !on {
		return nil, err
	}
	m := &Monitor{Delay: 5, Timeout: 3, MaxRetries: 1, MaxRetriesDown: 3}
	for _, f := range []struct {
		key string
		dst *int
	}{{AnnHMDelay, &m.Delay}, {AnnHMTimeout, &m.Timeout}, {AnnHMMaxRetries, &m.MaxRetries}, {AnnHMMaxRetriesDown, &m.MaxRetriesDown}} {
		v, ok := ann[f.key]
		if !ok {
			continue
		}
		// CPO takes durations for delay and timeout ("5s") and integers.
		n, err := strconv.Atoi(strings.TrimSuffix(v, "s"))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("annotation %s=%q: want a positive integer", f.key, v)
		}
		*f.dst = n
	}
	if m.Delay < m.Timeout {
		return nil, fmt.Errorf("health monitor delay %d is shorter than its timeout %d", m.Delay, m.Timeout)
	}
	return m, nil
}

// timeoutsOf reads cloud-provider-openstack's listener timeout
// annotations: integers in milliseconds, Octavia's defaults when absent.
func timeoutsOf(ann map[string]string) (Timeouts, error) {
	t := DefaultTimeouts
	for _, f := range []struct {
		key string
		dst *int
	}{{AnnTimeoutClientData, &t.ClientData}, {AnnTimeoutMemberConnect, &t.MemberConnect}, {AnnTimeoutMemberData, &t.MemberData}, {AnnTimeoutTCPInspect, &t.TCPInspect}} {
		v, ok := ann[f.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > maxTimeout {
			return Timeouts{}, fmt.Errorf("annotation %s=%q: want milliseconds, an integer from 0 to %d", f.key, v, maxTimeout)
		}
		*f.dst = n
	}
	return t, nil
}

func annBool(ann map[string]string, key string) (bool, error) {
	v, ok := ann[key]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("annotation %s=%q: want true or false", key, v)
	}
	return b, nil
}
