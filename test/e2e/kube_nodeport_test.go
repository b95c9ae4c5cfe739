package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestKubernetesNodePort: NodePort Services on the lab's real Kubernetes
// control plane, with no kube-proxy: from the external client to every
// node's address, TCP and UDP. externalTrafficPolicy Cluster reaches the
// pods of every node from any node, the client masqueraded to the node;
// Local reaches only the receiving node's pod, which sees the client's
// own address, and a node without one does not answer. A UDP socket on
// a node port moves to another pod when its pod goes.
func TestKubernetesNodePort(t *testing.T) {
	e := newKubeEnv(t, 1)
	client := e.lab.Client()
	withUDP := func(d *appsv1.Deployment) {
		c := &d.Spec.Template.Spec.Containers[0]
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "udp", ContainerPort: 9090, Protocol: corev1.ProtocolUDP})
	}
	e.deployWith("web", 3, withUDP)
	np := e.service("np", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromString("udp")})
	})
	tcpPort, udpPort := np.Spec.Ports[0].NodePort, np.Spec.Ports[1].NodePort
	if tcpPort == 0 || udpPort == 0 {
		t.Fatalf("node ports %d, %d: not allocated", tcpPort, udpPort)
	}
	e.waitPodMembers(t, "np", "web", 3)
	nodes := e.lab.Nodes()

	t.Run("Cluster", func(t *testing.T) {
		for _, n := range nodes {
			addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(tcpPort)))
			by := map[string]int{}
			for range 30 {
				r, err := ask(client, addr)
				if err != nil {
					t.Fatalf("client -> %s (%s): %v", addr, n.Name, err)
				}
				local, _, _ := net.SplitHostPort(r.Addr)
				by[local]++
				if peer, _, _ := net.SplitHostPort(r.Peer); peer == lab.ClientAddr.String() {
					t.Errorf("via %s the pod saw the client's address %s: not masqueraded", n.Name, peer)
				}
			}
			if !slices.Equal(keys(by), e.readyPods("web")) {
				t.Errorf("via %s the client reached %v, want every pod %v", n.Name, by, e.readyPods("web"))
			}
			c, err := client.Dial(e.ctx, "udp", net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(udpPort))))
			if err != nil {
				t.Fatal(err)
			}
			r, err := askUDP(c)
			c.Close()
			if err != nil || !slices.Contains(e.readyPods("web"), strings.Split(r.Addr, ":")[0]) {
				t.Errorf("UDP via %s: %+v, %v", n.Name, r, err)
			}
		}
	})

	// A UDP client that keeps one socket on a node port follows the
	// Service when the pod serving it goes: the agent deletes the
	// conntrack entry to the pod that left, where it would otherwise
	// send to it until the entry expired. The socket goes through one
	// node to a pod of the other: the kernel itself forgets the entries
	// masqueraded to a pod's own link when that link goes, not those
	// masqueraded to the node's fabric address.
	t.Run("UDP conntrack of a removed endpoint", func(t *testing.T) {
		var c net.Conn
		var first string
		for i := 0; first == ""; i++ {
			if i == 20 {
				t.Fatal("20 sockets, each to a pod of the node it went through")
			}
			n := nodes[i%len(nodes)]
			var err error
			if c, err = client.Dial(e.ctx, "udp", net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(udpPort)))); err != nil {
				t.Fatal(err)
			}
			r, err := askUDP(c)
			if err != nil {
				t.Fatal(err)
			}
			if pod := strings.Split(r.Addr, ":")[0]; lab.NodeName(nodeOfPod(t, pod)) != n.Name {
				first = pod
			} else {
				c.Close()
			}
		}
		defer c.Close()
		// The same socket keeps its pod while it is there.
		for range 3 {
			if r, err := askUDP(c); err != nil || strings.Split(r.Addr, ":")[0] != first {
				t.Fatalf("the socket moved from %s: %+v, %v", first, r, err)
			}
		}
		pods, err := e.k.CoreV1().Pods("default").List(e.ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + first})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("the pod of %s: %v %v", first, pods, err)
		}
		if err := e.k.CoreV1().Pods("default").Delete(e.ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 60*time.Second, "3 ready pods, "+first+" gone", func() (bool, string) {
			ready := e.readyPods("web")
			return len(ready) == 3 && !slices.Contains(ready, first), fmt.Sprint(ready)
		})
		e.waitPodMembers(t, "np", "web", 3)
		testutil.Eventually(t, 10*time.Second, "the socket on another pod", func() (bool, string) {
			r, err := askUDP(c)
			got := strings.Split(r.Addr, ":")[0]
			return err == nil && got != first && slices.Contains(e.readyPods("web"), got), fmt.Sprintf("%+v, %v", r, err)
		})
	})

	t.Run("Local", func(t *testing.T) {
		e.deploy("solo", 1)
		local := e.service("local", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Selector = map[string]string{"app": "solo"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		e.waitPodMembers(t, "local", "solo", 1)
		pod := e.readyPods("solo")[0]
		port := strconv.Itoa(int(local.Spec.Ports[0].NodePort))
		var with, without []lab.Host
		for _, n := range nodes {
			// Node i is 198.18.0.i, its pod CIDR 198.18.(16+i).0/24.
			if strings.HasPrefix(pod, fmt.Sprintf("198.18.%d.", 16+int(n.Addr.As4()[3]))) {
				with = append(with, n)
			} else {
				without = append(without, n)
			}
		}
		if len(with) != 1 || len(without) == 0 {
			t.Fatalf("pod %s: nodes with it %v, without %v", pod, with, without)
		}
		for range 10 {
			r, err := ask(client, net.JoinHostPort(with[0].Addr.String(), port))
			if err != nil {
				t.Fatalf("client -> %s, the pod's node: %v", with[0].Name, err)
			}
			if local, _, _ := net.SplitHostPort(r.Addr); local != pod {
				t.Errorf("reached %s, want %s", local, pod)
			}
			if peer, _, _ := net.SplitHostPort(r.Peer); peer != lab.ClientAddr.String() {
				t.Errorf("the pod saw %s, want the client's address %s", peer, lab.ClientAddr)
			}
		}
		for _, n := range without {
			ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
			r, err := client.Ask(ctx, net.JoinHostPort(n.Addr.String(), port), 500*time.Millisecond)
			cancel()
			if err == nil {
				t.Errorf("%s has no pod of the Service, yet answered (%s)", n.Name, r.Pod)
			}
		}
	})
}

// waitPodMembers waits until Service name's load balancer is ACTIVE with
// the n ready pods of app=app as the members of each of its pools.
func (e *kubeEnv) waitPodMembers(t *testing.T, name, app string, n int) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("Service %s's pools' members = its %d ready pods", name, n), func() (bool, string) {
		ready := e.readyPods(app)
		pools := e.poolMembers(name)
		if len(ready) != n || len(pools) == 0 {
			return false, fmt.Sprintf("pools %v, ready pods %v", pools, ready)
		}
		// Every pool: a Service port's and its node port's are updated
		// by separate calls, each turning the load balancer ACTIVE.
		for _, members := range pools {
			if !slices.Equal(members, ready) {
				return false, fmt.Sprintf("pools %v, ready pods %v", pools, ready)
			}
		}
		return true, ""
	})
}
