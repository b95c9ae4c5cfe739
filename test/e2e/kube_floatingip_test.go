package e2e

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestKubernetesFloatingIP: the Kuryr model on the real control plane.
// With kube-controller --floating-network, a LoadBalancer Service's
// ingress is a floating IP of the server's external network on its
// cluster IP's VIP port, and the external client reaches the pods through
// it; a Service naming a floating IP reserved by hand gets that one. When
// the Services go, the controller's floating IP is deleted and stops
// answering, and the reserved one stays, unassociated.
func TestKubernetesFloatingIP(t *testing.T) {
	e := newKubeEnvOpts(t, kubeEnvOptions{nodes: 2, controllers: 1, floating: true})
	e.deploy("web", 3)
	code, body := e.call("GET", "/v2.0/networks?name=flowlb-external", nil)
	nets := dig(body, "networks")
	if code != 200 || len(nets) != 1 {
		t.Fatalf("external network: %d %v", code, body)
	}
	code, body = e.call("POST", "/v2.0/floatingips", map[string]any{"floatingip": map[string]any{
		"floating_network_id": nets[0].(map[string]any)["id"], "description": "reserved by hand"}})
	if code != 201 {
		t.Fatalf("reserve a floating IP: %d %v", code, body)
	}
	reserved := body["floatingip"].(map[string]any)

	lbService := func(name, ip string) {
		e.service(name, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerIP = ip
		})
	}
	lbService("pub", "")
	lbService("named", reserved["floating_ip_address"].(string))
	fip := func(addr string) map[string]any {
		_, body := e.call("GET", "/v2.0/floatingips?floating_ip_address="+url.QueryEscape(addr), nil)
		if fs := dig(body, "floatingips"); len(fs) == 1 {
			return fs[0].(map[string]any)
		}
		return nil
	}
	ingress := map[string]string{}
	for _, name := range []string{"pub", "named"} {
		testutil.Eventually(t, 30*time.Second, name+"'s ingress and 3 members", func() (bool, string) {
			s, _ := e.k.CoreV1().Services("default").Get(e.ctx, name, metav1.GetOptions{})
			if len(s.Status.LoadBalancer.Ingress) == 1 {
				ingress[name] = s.Status.LoadBalancer.Ingress[0].IP
			}
			members := e.members(name)
			return ingress[name] != "" && len(members) == 3, fmt.Sprintf("ingress %q, members %v", ingress[name], members)
		})
		if !lab.ExternalVIPs.Contains(mustAddr(t, ingress[name])) {
			t.Fatalf("%s's ingress %s outside the external range %s", name, ingress[name], lab.ExternalVIPs)
		}
		s, _ := e.k.CoreV1().Services("default").Get(e.ctx, name, metav1.GetOptions{})
		f := fip(ingress[name])
		if f == nil || f["fixed_ip_address"] != s.Spec.ClusterIP {
			t.Fatalf("%s's floating IP %v, want one on the cluster IP %s", name, f, s.Spec.ClusterIP)
		}
		ext := net.JoinHostPort(ingress[name], "80")
		testutil.Eventually(t, 10*time.Second, "the external client reaches "+ext, func() (bool, string) {
			r, err := ask(e.lab.Client(), ext)
			if err != nil {
				return false, err.Error()
			}
			return true, r.Pod
		})
		by := e.spread([]lab.Host{e.lab.Client()}, ext, 30, false)
		t.Logf("%s: floating IP %s on cluster IP %s; 30 requests from the external client reached %v", name, ingress[name], s.Spec.ClusterIP, by)
		if len(by) < 2 {
			t.Errorf("the external client reached %v through %s, want several pods", by, ext)
		}
	}
	if ingress["named"] != reserved["floating_ip_address"] {
		t.Errorf("named's ingress %s, want the reserved %v", ingress["named"], reserved["floating_ip_address"])
	}

	for _, name := range []string{"pub", "named"} {
		if err := e.k.CoreV1().Services("default").Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "pub's floating IP deleted, the reserved one free", func() (bool, string) {
		p, r := fip(ingress["pub"]), fip(ingress["named"])
		return p == nil && r != nil && r["port_id"] == nil && e.lbCount("pub") == 0 && e.lbCount("named") == 0,
			fmt.Sprintf("pub's %v, reserved %v", p, r)
	})
	testutil.Eventually(t, 10*time.Second, "pub's floating IP withdrawn", func() (bool, string) {
		r, err := e.lab.Client().Ask(e.ctx, net.JoinHostPort(ingress["pub"], "80"), 500*time.Millisecond)
		return err != nil, "answered by " + r.Pod
	})
}
