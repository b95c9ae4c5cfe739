package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/barbican"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// oicBinary is octavia-ingress-controller: $FLOWLB_OIC_BIN, else
// hack/octavia-ingress-bins.sh's cache (beside CPO's). Missing, or
// without Keystone or Barbican, the test skips, or fails under
// FLOWLB_REQUIRE_KUBE=1.
func oicBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("FLOWLB_OIC_BIN")
	if p == "" {
		root := os.Getenv("FLOWLB_CPO_CACHE")
		if root == "" {
			root = "/var/cache/flowlb/cpo"
		}
		p = filepath.Join(root, CPOVersion, "octavia-ingress-controller")
	}
	miss := func(err error) {
		if kubetest.Required() {
			t.Fatalf("%s=1 but %v", kubetest.RequireEnv, err)
		}
		t.Skip(err)
	}
	if _, err := os.Stat(p); err != nil {
		miss(fmt.Errorf("%s missing: run hack/octavia-ingress-bins.sh", p))
	}
	if err := keystone.Missing(); err != nil {
		miss(err)
	}
	if err := barbican.Missing(); err != nil {
		miss(err)
	}
	return p
}

// Where the test's Barbican serves, in the fabric beside Keystone.
var barbicanURL = fmt.Sprintf("http://%s:%d", control, barbican.Port)

// The Ingress's hosts: A has two paths, B one; both have a certificate
// of their own on the TLS Ingress.
const (
	ingressHostA = "a.ingress.flowlb.test"
	ingressHostB = "b.ingress.flowlb.test"
)

// TestOctaviaIngressController: cloud-provider-openstack's
// octavia-ingress-controller, unchanged, against flowlb's L7 (server
// --l7 --tls-certificates barbican, agents with --l7-ports) as the
// load-balancer and network endpoints of a real Keystone's catalog, with
// a real Barbican as its key-manager, on the lab's real Kubernetes with
// kube-proxy serving the node ports. Two Deployments behind NodePort
// Services one and two; two Ingresses of class openstack with the same
// rules (host A /api -> two, host A / -> one, host B / -> two), one
// plain, one with a TLS Secret per host. The controller makes a load
// balancer per Ingress with an HTTP listener on 80 (the plain one) or a
// TERMINATED_HTTPS listener on 443 whose certificates it stores in
// Barbican (PKCS#12), a pool per Service with the nodes' node ports as
// members, and a REDIRECT_TO_POOL policy per host and path (HOST_NAME
// REGEX, PATH STARTS_WITH), and (the Ingresses not internal) a floating
// IP on the VIP port, the Ingress's address. The external client
// reaches each host's and path's pods at it over HTTP and HTTPS
// through each node, SNI picking each host's certificate;
// an unknown host gets 503 (no default backend). A change of the plain
// Ingress (a path dropped, a host moved to the other Service) replaces
// and deletes policies and a pool, and the rest are renumbered from 1.
// Deleting the Ingresses removes the load balancers and floating IPs
// from flowlb and the certificates from Barbican; the controller logs
// no failure.
func TestOctaviaIngressController(t *testing.T) {
	kubetest.SkipUnlessKube(t)
	oic := oicBinary(t)
	ctx := t.Context()
	t0 := time.Now()
	prepared := keystone.Prepare(t, control+":5000", keystoneURL)
	t.Logf("Keystone prepared in %s", time.Since(t0).Round(100*time.Millisecond))
	t0 = time.Now()
	c := newClusterOpts(t, clusterOptions{nodes: 2, pods: 1, agentArgs: []string{"--l7-ports", "20000-20099"},
		serverArgs: []string{"--vip-cidr", "198.19.0.0/18", "--auth", "keystone", "--keystone-url", keystoneURL,
			"--keystone-user", "octavia", "--keystone-password", "octaviapw", "--keystone-project", "service",
			"--l7", "--tls-certificates", "barbican"},
		beforeServer: func(c *cluster) {
			ks := startLabKeystone(t, c, prepared.Copy(t), false)
			startLabBarbican(t, c, ks)
		}})
	hc := &http.Client{Transport: &http.Transport{DialContext: c.lab.Node(1).Dial}, Timeout: 10 * time.Second}
	var err error
	if c.authToken, err = keystone.Token(ctx, hc, keystoneURL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject); err != nil {
		t.Fatal(err)
	}
	kc, err := kubelet.Up(ctx, c.lab, lab.KubeOptions{Kubelet: []string{flowlb(t), "lab", "kubelet"}})
	if err != nil {
		t.Fatal(err)
	}
	e := &kubeEnv{cluster: c, kc: kc, k: kc.Client, ctx: ctx}
	startKubeProxies(t, e, "nftables")

	_, body := e.call("GET", "/v2.0/subnets?name=flowlb-vip-subnet", nil)
	vipSubnet := dig(body, "subnets")[0].(map[string]any)["id"].(string)
	_, body = e.call("GET", "/v2.0/networks?name=flowlb-external", nil)
	extNet := dig(body, "networks")[0].(map[string]any)["id"].(string)
	startIngressController(t, e, oic, vipSubnet, extNet)
	t.Logf("set up in %s: the lab, Keystone, Barbican, flowlb (L7), Kubernetes, kube-proxy and octavia-ingress-controller",
		time.Since(t0).Round(100*time.Millisecond))

	// The backends: two Deployments of two pods, each behind a NodePort
	// Service.
	for _, app := range []string{"one", "two"} {
		e.deploy(app, 2)
		e.service(app, func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": app}
			s.Spec.Type = corev1.ServiceTypeNodePort
		})
	}
	certs := map[string]string{}
	for _, h := range []string{ingressHostA, ingressHostB} {
		certPEM, keyPEM := selfSigned(t, h)
		certs[h] = certPEM
		if _, err := e.k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tlsSecretName(h)},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte(certPEM), "tls.key": []byte(keyPEM)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	created := map[string]time.Time{}
	for _, name := range []string{"web", "web-tls"} {
		created[name] = time.Now()
		if _, err := e.k.NetworkingV1().Ingresses("default").Create(ctx, ingressOf(name, name == "web-tls"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Each Ingress's address, and its load balancer as flowlb has it.
	nodes := []string{lab.NodeAddr(1).String(), lab.NodeAddr(2).String()}
	addrs := map[string]string{}
	for _, name := range []string{"web", "web-tls"} {
		var ip string
		testutil.Eventually(t, 3*time.Minute, name+"'s address in its status", func() (bool, string) {
			ing, err := e.k.NetworkingV1().Ingresses("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if lb := ing.Status.LoadBalancer.Ingress; len(lb) == 1 {
				ip = lb[0].IP
			}
			return ip != "", fmt.Sprint(ing.Status.LoadBalancer)
		})
		addrs[name] = ip
		lb := ingressDone(t, e, name)
		t.Logf("%s: floating IP %s in its status %s after its creation; load balancer %s, VIP %v, provider %v", name, ip,
			time.Since(created[name]).Round(time.Millisecond), lb["id"], lb["vip_address"], lb["provider"])
		f := ingressFIP(e, ip)
		if f == nil || f["port_id"] != lb["vip_port_id"] || f["fixed_ip_address"] != lb["vip_address"] ||
			!lab.ExternalVIPs.Contains(mustAddr(t, ip)) || lab.ExternalVIPs.Contains(mustAddr(t, lb["vip_address"].(string))) {
			t.Errorf("%s: address %s, floating IP %v: want an external floating IP on the VIP port %v (%v)", name, ip, f, lb["vip_port_id"], lb["vip_address"])
		}
		port := 80
		if name == "web-tls" {
			port = 443
		}
		checkIngressLB(t, e, name, lb["id"].(string), nodes, 2,
			ingressPolicies(port, ingressHostA+"/api", ingressHostA+"/", ingressHostB+"/"))
	}

	// The Services' node ports are served once each node's kube-proxy
	// has them, and each of the proxies (on the client's node) once
	// ACTIVE; the first answers wait for both.
	client := e.lab.Client()
	var one, two []string
	testutil.Eventually(t, 60*time.Second, "two ready pods of each Deployment", func() (bool, string) {
		one, two = e.readyPods("one"), e.readyPods("two")
		return len(one) == 2 && len(two) == 2, fmt.Sprintf("one %v, two %v", one, two)
	})
	// Each host's certificate as its Secret holds it.
	der := map[string][]byte{}
	for h, c := range certs {
		b, _ := pem.Decode([]byte(c))
		der[h] = b.Bytes
	}
	routes := []struct {
		host, path string
		want       []string
	}{
		{ingressHostA, "/", one}, {ingressHostA, "/index.html", one},
		{ingressHostA, "/api", two}, {ingressHostA, "/api/v1/x", two},
		{ingressHostB, "/", two}, {ingressHostB, "/api", two},
	}
	for _, tls := range []bool{false, true} {
		scheme, addr := "http", net.JoinHostPort(addrs["web"], "80")
		if tls {
			scheme, addr = "https", net.JoinHostPort(addrs["web-tls"], "443")
		}
		for i := 1; i <= 2; i++ {
			if err := e.lab.SetNextHops(i); err != nil {
				t.Fatal(err)
			}
			var spread []string
			for _, r := range routes {
				where := fmt.Sprintf("%s://%s%s via n%d", scheme, r.host, r.path, i)
				seen := map[string]int{}
				testutil.Eventually(t, 60*time.Second, where+" answered by "+strings.Join(r.want, " or "), func() (bool, string) {
					a, err := ingressGet(client, addr, r.host, r.path, tls)
					if err != nil {
						return false, err.Error()
					}
					if a.status != 200 || !slices.Contains(r.want, a.addr) {
						return false, fmt.Sprintf("%d from %q", a.status, a.addr)
					}
					if tls && (a.subject != r.host || !bytes.Equal(a.cert, der[r.host])) {
						return false, "certificate of " + a.subject
					}
					return true, ""
				})
				// Then every answer: one of the Service's pods, none of
				// the other's, and the host's own certificate every time.
				// (Which of the two: the proxy round-robins over the
				// nodes' node ports and keeps its connections to them,
				// and kube-proxy picks a pod per connection.)
				for range 10 {
					a, err := ingressGet(client, addr, r.host, r.path, tls)
					if err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					if a.status != 200 || !slices.Contains(r.want, a.addr) || tls && !bytes.Equal(a.cert, der[r.host]) {
						t.Errorf("%s: %d from %q (certificate of %q), want 200 from %v", where, a.status, a.addr, a.subject, r.want)
					}
					seen[a.addr]++
				}
				spread = append(spread, fmt.Sprintf("%s%s %v", r.host[:1], r.path, seen))
			}
			t.Logf("%s via n%d: each of %d hosts and paths answered by its Service's pods only: %s", scheme, i, len(routes), strings.Join(spread, ", "))
			// No rule takes another host: no default backend, Octavia's
			// 503.
			a, err := ingressGet(client, addr, "c.ingress.flowlb.test", "/", tls)
			if err != nil {
				t.Fatalf("%s: unknown host: %v", scheme, err)
			}
			if a.status != 503 {
				t.Errorf("%s via n%d: unknown host answered %d by %q, want 503", scheme, i, a.status, a.addr)
			}
			if tls && !bytes.Equal(a.cert, der[ingressHostA]) {
				t.Errorf("https via n%d: unknown host got the certificate of %q, want the default (the first TLS entry's, %s)", i, a.subject, ingressHostA)
			}
		}
	}
	if err := e.lab.SetNextHops(1, 2); err != nil {
		t.Fatal(err)
	}

	// An Ingress changed: web's host A loses /api and host B moves to
	// Service one. The controller deletes A's /api policy, makes B's
	// anew for one's pool and deletes the old one, then deletes two's
	// pool, which no policy uses any more; flowlb renumbers the
	// policies that stay.
	t0 = time.Now()
	ing, err := e.k.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ing.Spec.Rules[0].HTTP.Paths = ing.Spec.Rules[0].HTTP.Paths[1:]
	ing.Spec.Rules[1].HTTP.Paths[0].Backend.Service.Name = "one"
	if _, err := e.k.NetworkingV1().Ingresses("default").Update(ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	webLB := ingressDone(t, e, "web")["id"].(string)
	checkIngressLB(t, e, "web", webLB, nodes, 1, ingressPolicies(80, ingressHostA+"/", ingressHostB+"/"))
	t.Logf("web changed: flowlb's objects follow in %s", time.Since(t0).Round(time.Millisecond))
	for _, r := range []struct{ host, path string }{{ingressHostA, "/"}, {ingressHostA, "/api"}, {ingressHostB, "/"}} {
		testutil.Eventually(t, 30*time.Second, "http://"+r.host+r.path+" answered by one's pods", func() (bool, string) {
			for range 4 {
				a, err := ingressGet(client, net.JoinHostPort(addrs["web"], "80"), r.host, r.path, false)
				if err != nil {
					return false, err.Error()
				}
				if a.status != 200 || !slices.Contains(one, a.addr) {
					return false, fmt.Sprintf("%d from %q", a.status, a.addr)
				}
			}
			return true, ""
		})
	}

	// The certificates in Barbican, as the controller's user sees them.
	ingressSecrets := func() []string {
		names, err := barbicanSecretNames(ctx, hc, "kube_ingress_lab_default_web-tls_")
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	if s := ingressSecrets(); len(s) != 2 {
		t.Errorf("web-tls's certificates in Barbican: %v, want one per TLS Secret", s)
	}

	// Deleting the Ingresses deletes their load balancers (cascade) and
	// web-tls's certificates.
	for _, name := range []string{"web", "web-tls"} {
		if err := e.k.NetworkingV1().Ingresses("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t0 = time.Now()
	testutil.Eventually(t, 2*time.Minute, "the load balancers, the listeners, pools and policies, the floating IPs and the certificates gone", func() (bool, string) {
		var left []string
		for _, name := range []string{"web", "web-tls"} {
			if lbNamed(e, ingressLBName(name)) != nil {
				left = append(left, name+"'s load balancer")
			}
		}
		for _, kind := range []string{"listeners", "pools", "l7policies"} {
			_, body := e.call("GET", "/v2/lbaas/"+kind, nil)
			if n := len(dig(body, kind)); n != 0 {
				left = append(left, fmt.Sprintf("%d %s", n, kind))
			}
		}
		if s := ingressSecrets(); len(s) != 0 {
			left = append(left, fmt.Sprintf("secrets %v", s))
		}
		for _, a := range addrs {
			if ingressFIP(e, a) != nil {
				left = append(left, "floating IP "+a)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	t.Logf("deleted: load balancers, floating IPs and certificates gone in %s", time.Since(t0).Round(time.Millisecond))

	// Nothing failed on the way: the controller retries a failed step
	// and logs it at ERROR (logrus) before it succeeds.
	raw, err := os.ReadFile(e.lab.LogPath(lab.HostFabric, "octavia-ingress-controller"))
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "ERROR") || strings.Contains(line, "Failed to") {
			failed = append(failed, line)
		}
	}
	if len(failed) > 0 {
		t.Errorf("octavia-ingress-controller logged %d failures:\n%s", len(failed), strings.Join(failed, "\n"))
	}
}

// ingressDone waits until the controller is done with Ingress name's
// last change, and returns its load balancer: the controller's last step
// writes the Ingress's resource version (after its status) into the load
// balancer's description, and the load balancer is ACTIVE.
func ingressDone(t *testing.T, e *kubeEnv, name string) map[string]any {
	t.Helper()
	var lb map[string]any
	testutil.Eventually(t, 2*time.Minute, "the controller done with "+name, func() (bool, string) {
		ing, err := e.k.NetworkingV1().Ingresses("default").Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if lb = lbNamed(e, ingressLBName(name)); lb == nil {
			return false, "no load balancer " + ingressLBName(name)
		}
		d, _ := lb["description"].(string)
		return lb["provisioning_status"] == "ACTIVE" && strings.HasSuffix(d, "version: "+ing.ResourceVersion),
			fmt.Sprintf("%v, description %q, the Ingress at version %s", lb["provisioning_status"], d, ing.ResourceVersion)
	})
	return lb
}

// ingressFIP is the floating IP at addr, or nil.
func ingressFIP(e *kubeEnv, addr string) map[string]any {
	_, body := e.call("GET", "/v2.0/floatingips?floating_ip_address="+addr, nil)
	if fs := dig(body, "floatingips"); len(fs) == 1 {
		return fs[0].(map[string]any)
	}
	return nil
}

func tlsSecretName(host string) string { return "tls-" + strings.SplitN(host, ".", 2)[0] }

// ingressLBName is the controller's name of Ingress name's load balancer
// (cluster lab, namespace default).
func ingressLBName(name string) string { return "kube_ingress_lab_default_" + name }

// ingressOf is Ingress name of class openstack (the controller takes
// only the annotation), with a floating IP (not internal): host A /api
// to Service two and / to one (the
// controller makes the policies in the Ingress's order, the first
// matching wins), host B / to two; with TLS, a Secret per host.
func ingressOf(name string, withTLS bool) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	path := func(p, svc string) networkingv1.HTTPIngressPath {
		return networkingv1.HTTPIngressPath{Path: p, PathType: &prefix, Backend: networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}}
	}
	rule := func(host string, paths ...networkingv1.HTTPIngressPath) networkingv1.IngressRule {
		return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{
			HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}}}
	}
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{"kubernetes.io/ingress.class": "openstack", "octavia.ingress.kubernetes.io/internal": "false"}},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{
			rule(ingressHostA, path("/api", "two"), path("/", "one")),
			rule(ingressHostB, path("/", "two")),
		}}}
	if withTLS {
		for _, h := range []string{ingressHostA, ingressHostB} {
			ing.Spec.TLS = append(ing.Spec.TLS, networkingv1.IngressTLS{Hosts: []string{h}, SecretName: tlsSecretName(h)})
		}
	}
	return ing
}

// ingressPolicies are the policies, as checkIngressLB shows them, of an
// Ingress's hostAndPaths ("host/path") in order, on a listener's port.
func ingressPolicies(port int, hostAndPaths ...string) []string {
	var out []string
	for i, hp := range hostAndPaths {
		h, p, _ := strings.Cut(hp, "/")
		out = append(out, fmt.Sprintf("%d REDIRECT_TO_POOL [HOST_NAME REGEX ^%s(:%d)?$ PATH STARTS_WITH /%s]",
			i+1, strings.ReplaceAll(h, ".", `\.`), port, p))
	}
	return out
}

// checkIngressLB checks Ingress name's load balancer lbID in flowlb: one
// listener (HTTP 80, or TERMINATED_HTTPS 443 with a default and two SNI
// certificates), pools HTTP pools of members on the nodes, and the
// policies want (ingressPolicies).
func checkIngressLB(t *testing.T, e *kubeEnv, name, lbID string, nodes []string, pools int, want []string) {
	t.Helper()
	_, body := e.call("GET", "/v2/lbaas/listeners?loadbalancer_id="+lbID, nil)
	ls := dig(body, "listeners")
	if len(ls) != 1 {
		t.Fatalf("%s: listeners %v", name, ls)
	}
	l := ls[0].(map[string]any)
	proto, port := "HTTP", 80.0
	if name == "web-tls" {
		proto, port = "TERMINATED_HTTPS", 443
		if l["default_tls_container_ref"] == nil || len(l["sni_container_refs"].([]any)) != 2 {
			t.Errorf("%s: default certificate %v, SNI %v: want one and two", name, l["default_tls_container_ref"], l["sni_container_refs"])
		}
	}
	if l["protocol"] != proto || l["protocol_port"] != port {
		t.Errorf("%s: listener %v %v, want %s %v", name, l["protocol"], l["protocol_port"], proto, port)
	}
	_, body = e.call("GET", "/v2/lbaas/pools?loadbalancer_id="+lbID, nil)
	got := map[string]string{} // pool id: protocol and members
	for _, p := range dig(body, "pools") {
		p := p.(map[string]any)
		_, mb := e.call("GET", "/v2/lbaas/pools/"+p["id"].(string)+"/members", nil)
		var ms []string
		for _, m := range dig(mb, "members") {
			m := m.(map[string]any)
			ms = append(ms, fmt.Sprintf("%v:%v", m["address"], m["protocol_port"]))
		}
		slices.Sort(ms)
		got[p["id"].(string)] = fmt.Sprintf("%v %v", p["protocol"], ms)
		if p["protocol"] != "HTTP" || len(ms) != len(nodes) || !strings.HasPrefix(ms[0], nodes[0]+":") || !strings.HasPrefix(ms[1], nodes[1]+":") {
			t.Errorf("%s: pool %v: %s, want HTTP members on %v", name, p["id"], got[p["id"].(string)], nodes)
		}
	}
	if len(got) != pools {
		t.Errorf("%s: pools %v, want %d (one per Service)", name, got, pools)
	}
	_, body = e.call("GET", "/v2/lbaas/l7policies?listener_id="+l["id"].(string), nil)
	var policies []string
	for _, p := range dig(body, "l7policies") {
		p := p.(map[string]any)
		var rules []string
		for _, r := range p["rules"].([]any) {
			_, rb := e.call("GET", fmt.Sprintf("/v2/lbaas/l7policies/%s/rules/%s", p["id"], r.(map[string]any)["id"]), nil)
			rr := rb["rule"].(map[string]any)
			rules = append(rules, fmt.Sprintf("%v %v %v", rr["type"], rr["compare_type"], rr["value"]))
		}
		slices.Sort(rules)
		policies = append(policies, fmt.Sprintf("%v %v %v", p["position"], p["action"], rules))
	}
	t.Logf("%s: listener %s %v; pools %v; policies %q", name, proto, port, got, policies)
	if !slices.Equal(policies, want) {
		t.Errorf("%s: policies\n%q, want\n%q", name, policies, want)
	}
}

type ingressAnswer struct {
	status int
	// addr is the answering pod's address (its echo reply's).
	addr string
	// subject is the common name of the certificate the server showed,
	// cert the certificate (DER).
	subject string
	cert    []byte
}

// ingressGet asks addr for path with Host (and, with TLS, SNI) host from
// host from, on a new connection.
func ingressGet(from lab.Host, addr, host, path string, withTLS bool) (ingressAnswer, error) {
	var a ingressAnswer
	tr := &http.Transport{DialContext: from.Dial, DisableKeepAlives: true}
	scheme := "http"
	if withTLS {
		scheme = "https"
		// The certificates are self-signed: the test compares the
		// certificate with the Secret's rather than verify a chain.
		tr.TLSClientConfig = &tls.Config{ServerName: host, InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) > 0 {
					a.subject = cs.PeerCertificates[0].Subject.CommonName
					a.cert = cs.PeerCertificates[0].Raw
				}
				return nil
			}}
	}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+path, nil)
	if err != nil {
		return a, err
	}
	req.Host = host
	resp, err := hc.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a.status = resp.StatusCode
	if resp.Header.Get("X-Flowlb-Pod") != "" {
		r, err := echo.Parse(strings.TrimSpace(string(b)))
		if err != nil {
			return a, err
		}
		a.addr, _, _ = net.SplitHostPort(r.Addr)
	}
	return a, nil
}

// barbicanSecretNames lists the names of the secrets of project k8s
// (the ingress controller's) that begin with prefix, as the controller's
// user.
func barbicanSecretNames(ctx context.Context, hc *http.Client, prefix string) ([]string, error) {
	tok, err := keystone.Token(ctx, hc, keystoneURL, "ingress", "ingresspw", "k8s")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, barbicanURL+"/v1/secrets?limit=100", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Auth-Token", tok)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Secrets []struct {
			Name string `json:"name"`
		} `json:"secrets"`
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("list secrets: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	var names []string
	for _, s := range out.Secrets {
		if strings.HasPrefix(s.Name, prefix) {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// startLabBarbican starts Barbican (internal/lab/barbican) in the lab's
// fabric at barbicanURL, under ks: its service user, the key-manager
// endpoint, and project k8s's user ingress (the controller's: member,
// load-balancer_member and Barbican's creator, which storing a secret
// needs). The controller also wants a compute endpoint in the catalog
// (it makes Nova's client at start-up, and calls it only to manage
// security groups, off here): one where nothing listens.
func startLabBarbican(t *testing.T, c *cluster, ks *keystone.Keystone) {
	b, err := barbican.New(barbican.Config{Dir: filepath.Join(t.TempDir(), "barbican"), Listen: fmt.Sprintf("%s:%d", control, barbican.Port),
		URL: barbicanURL, KeystoneURL: keystoneURL, Project: "barbican-service"})
	if err != nil {
		t.Fatal(err)
	}
	argv, env := b.Argv()
	c.startInFabric(t, "barbican", argv, env, b.LogPath(), b.APILogPath())
	hc := &http.Client{Transport: &http.Transport{DialContext: c.lab.Node(1).Dial}, Timeout: 10 * time.Second}
	a, err := ks.Admin(t.Context(), hc)
	if err != nil {
		t.Fatal(err)
	}
	k8s, err := a.ProjectID("k8s")
	if err != nil {
		t.Fatal(err)
	}
	uid, err := a.User("ingress", "ingresspw", k8s)
	for _, err := range []error{
		err,
		a.Grant(k8s, uid, "member", "load-balancer_member", "creator"),
		a.ProjectUser(b.Project, b.User, b.Password, "admin", "service"),
		a.Endpoint("key-manager", "barbican", barbicanURL),
		a.Endpoint("compute", "nova", fmt.Sprintf("http://%s:8774/v2.1", control)),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	b.Wait(t, hc)
}

// startIngressController runs octavia-ingress-controller in the fabric
// as project k8s's user ingress, cluster name lab, its load balancers'
// VIPs on subnet and their floating IPs (for the Ingresses annotated
// not internal) on the network floating.
func startIngressController(t *testing.T, e *kubeEnv, bin, subnet, floating string) {
	conf := filepath.Join(t.TempDir(), "ingress.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`cluster-name: lab
kubernetes:
  kubeconfig: %s
openstack:
  auth-url: %s/v3
  username: ingress
  password: ingresspw
  project-name: k8s
  domain-name: Default
  region: %s
  ca-file: %s
octavia:
  subnet-id: %s
  floating-network-id: %s
`, e.kc.State.LabKubeconfig, keystoneURL, keystone.Region, e.tls.CACert, subnet, floating)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.lab.Fabric().Start("octavia-ingress-controller", []string{bin, "--config", conf, "--debug"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(e.lab.LogPath(lab.HostFabric, "octavia-ingress-controller"))
			t.Logf("--- octavia-ingress-controller\n%s", tail(string(b), 60))
		}
	})
}
