package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestKubernetesHealthCheckNodePort: a LoadBalancer Service with
// externalTrafficPolicy Local on the lab's real Kubernetes control plane,
// no kube-proxy. Asked from the external client, every node's agent
// answers the Service's healthCheckNodePort as kube-proxy would: 200 with
// one local endpoint on the node of the pod, 503 with none on the other;
// the answers swap when the pod moves to the other node, and both are 503
// when it is scaled away; with externalTrafficPolicy Cluster no node
// serves the port any more. Each node's /healthz and /livez (port 10256)
// answer 200.
func TestKubernetesHealthCheckNodePort(t *testing.T) {
	// The node health endpoint is off by default, so that an agent beside
	// kube-proxy leaves it its port; a cluster without kube-proxy turns it on.
	e := newKubeEnvOpts(t, kubeEnvOptions{nodes: 2, controllers: 1, agentArgs: []string{"--healthz-bind-address", "0.0.0.0:10256"}})
	client := e.lab.Client()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return client.Dial(ctx, network, addr)
		}}}
	// ask returns the status and the localEndpoints of a health check.
	type answer struct {
		Service struct {
			Namespace, Name string
		} `json:"service"`
		LocalEndpoints int `json:"localEndpoints"`
		status         int
	}
	ask := func(url string) (answer, error) {
		var a answer
		r, err := hc.Get(url)
		if err != nil {
			return a, err
		}
		defer r.Body.Close()
		a.status = r.StatusCode
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			return a, fmt.Errorf("%s: %d, body: %w", url, r.StatusCode, err)
		}
		return a, nil
	}
	nodes := e.lab.Nodes()
	// nodeOf is the lab host whose pod CIDR holds ip (node i is
	// 198.18.0.i, its pods 198.18.(16+i).0/24).
	nodeOf := func(ip string) lab.Host {
		for _, n := range nodes {
			if strings.HasPrefix(ip, fmt.Sprintf("198.18.%d.", 16+int(n.Addr.As4()[3]))) {
				return n
			}
		}
		t.Fatalf("pod %s is on no lab node", ip)
		return lab.Host{}
	}

	e.deploy("hcsolo", 1)
	svc := e.service("hc", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.Selector = map[string]string{"app": "hcsolo"}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	port := strconv.Itoa(int(svc.Spec.HealthCheckNodePort))
	if port == "0" {
		t.Fatal("no healthCheckNodePort allocated")
	}
	// expect waits until the node holding the pod (none: "") answers 200
	// with one local endpoint and every other node 503 with none.
	expect := func(what, podIP string) {
		t.Helper()
		var seen string
		testutil.Eventually(t, 60*time.Second, what, func() (bool, string) {
			var got []string
			defer func() { seen = strings.Join(got, "; ") }()
			ok := true
			for _, n := range nodes {
				a, err := ask("http://" + net.JoinHostPort(n.Addr.String(), port) + "/")
				if err != nil {
					return false, fmt.Sprintf("%s: %v", n.Name, err)
				}
				want := answer{status: 503}
				if podIP != "" && nodeOf(podIP).Name == n.Name {
					want = answer{status: 200, LocalEndpoints: 1}
				}
				got = append(got, fmt.Sprintf("%s: %d localEndpoints=%d service=%s/%s", n.Name, a.status, a.LocalEndpoints, a.Service.Namespace, a.Service.Name))
				ok = ok && a.status == want.status && a.LocalEndpoints == want.LocalEndpoints && a.Service.Namespace == "default" && a.Service.Name == "hc"
			}
			return ok, strings.Join(got, "; ")
		})
		t.Logf("%s: %s", what, seen)
	}
	e.waitPodMembers(t, "hc", "hcsolo", 1)
	first := e.readyPods("hcsolo")[0]
	expect("200 on the pod's node "+nodeOf(first).Name+", 503 elsewhere", first)

	for _, n := range nodes {
		for _, path := range []string{"/healthz", "/livez"} {
			url := "http://" + net.JoinHostPort(n.Addr.String(), "10256") + path
			r, err := hc.Get(url)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			var b struct {
				Healthy      bool   `json:"healthy"`
				NodeEligible bool   `json:"nodeEligible"`
				LastUpdated  string `json:"lastUpdated"`
			}
			err = json.NewDecoder(r.Body).Decode(&b)
			r.Body.Close()
			if err != nil || r.StatusCode != 200 || !b.Healthy || !b.NodeEligible || b.LastUpdated == "" {
				t.Errorf("%s: %d %+v %v", url, r.StatusCode, b, err)
			}
		}
	}

	// Move the pod: pin the Deployment to another node.
	pods, err := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=hcsolo"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v (%d)", err, len(pods.Items))
	}
	ns, err := e.k.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, n := range ns.Items {
		if n.Name != pods.Items[0].Spec.NodeName {
			other = n.Name
		}
	}
	if other == "" {
		t.Fatalf("no node other than %s", pods.Items[0].Spec.NodeName)
	}
	e.updateDeployment("hcsolo", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: other}
	})
	var moved string
	testutil.Eventually(t, 90*time.Second, "the pod moved to "+other, func() (bool, string) {
		ready := e.readyPods("hcsolo")
		if len(ready) == 1 && nodeOf(ready[0]).Name != nodeOf(first).Name {
			moved = ready[0]
			return true, ""
		}
		return false, fmt.Sprintf("ready pods %v", ready)
	})
	expect("after the move, 200 on "+nodeOf(moved).Name+", 503 on "+nodeOf(first).Name, moved)

	e.updateDeployment("hcsolo", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) })
	expect("scaled to zero, 503 everywhere", "")

	// externalTrafficPolicy Cluster: the API server releases the port,
	// and no node serves it any more.
	testutil.Eventually(t, 30*time.Second, "externalTrafficPolicy Cluster", func() (bool, string) {
		s, err := e.k.CoreV1().Services("default").Get(e.ctx, "hc", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		if _, err := e.k.CoreV1().Services("default").Update(e.ctx, s, metav1.UpdateOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	testutil.Eventually(t, 60*time.Second, "the health-check node port no longer served", func() (bool, string) {
		for _, n := range nodes {
			if a, err := ask("http://" + net.JoinHostPort(n.Addr.String(), port) + "/"); err == nil {
				return false, fmt.Sprintf("%s still answers %d", n.Name, a.status)
			}
		}
		return true, ""
	})
}

// updateDeployment changes Deployment name with mut, retrying on
// conflicts.
func (e *kubeEnv) updateDeployment(name string, mut func(*appsv1.Deployment)) {
	e.t.Helper()
	testutil.Eventually(e.t, 30*time.Second, "update Deployment "+name, func() (bool, string) {
		d, err := e.k.AppsV1().Deployments("default").Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		mut(d)
		if _, err := e.k.AppsV1().Deployments("default").Update(e.ctx, d, metav1.UpdateOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}
