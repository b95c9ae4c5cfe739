package e2e

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/flowlb/flowlb/internal/lab"
)

// TestKubernetesNodePortMembers: a load balancer of flowlb's own whose
// members are the nodes' node ports, made through the API the way
// cloud-provider-openstack makes one, in front of a NodePort Service
// that flowlb serves with no kube-proxy. Every connection is answered,
// from the external client through each node and from the static pod of
// each node, and each node reaches the pods of both nodes: the member
// that is the receiving node's own node port goes to that node port's
// endpoints (the agent flattens it), the other node's is forwarded to
// that node, whose node port serves it.
func TestKubernetesNodePortMembers(t *testing.T) {
	e := newKubeEnv(t, 1)
	e.deploy("web", 4)
	svc := e.service("np", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	nodePort := int(svc.Spec.Ports[0].NodePort)
	if nodePort == 0 {
		t.Fatal("no node port allocated")
	}
	e.waitPodMembers(t, "np", "web", 4)
	pods := e.readyPods("web")
	if nodesOf(t, pods) != 2 {
		t.Fatalf("web's pods %v are not on both nodes", pods)
	}

	var members []any
	for _, n := range e.lab.Nodes() {
		members = append(members, map[string]any{"address": n.Addr.String(), "protocol_port": nodePort, "name": n.Name})
	}
	code, body := e.call("POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "node-ports", "vip_subnet_id": e.extSub,
		"listeners": []any{map[string]any{"protocol": "TCP", "protocol_port": 80, "default_pool": map[string]any{
			"name": "nodes", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "members": members}}},
	}})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	lb := e.waitActive(body["loadbalancer"].(map[string]any)["id"].(string))
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	t.Logf("load balancer %s, VIP %s, members the nodes' node port %d; web's pods %v", lb["id"], vip, nodePort, pods)

	// Answers through one node, by pod; every request must be answered
	// (each picks either member: a refused own node port fails half).
	const tries = 40
	reached := func(from lab.Host) map[string]int {
		t.Helper()
		by := map[string]int{}
		for i := range tries {
			r, err := ask(from, vip)
			if err != nil {
				t.Fatalf("%s -> %s, request %d: %v", from.Name, vip, i, err)
			}
			pod, _, _ := net.SplitHostPort(r.Addr)
			by[pod]++
		}
		return by
	}
	bothNodes := func(who string, by map[string]int) {
		t.Helper()
		nodes := map[int]bool{}
		for pod := range by {
			if !slices.Contains(pods, pod) {
				t.Errorf("%s reached %s, not a pod of web %v", who, pod, pods)
				continue
			}
			nodes[nodeOfPod(t, pod)] = true
		}
		if len(nodes) != 2 {
			t.Errorf("%s reached %v: the pods of %d node(s), want both nodes' endpoints", who, by, len(nodes))
		}
	}
	defer func() { _ = e.lab.SetNextHops(1, 2) }()
	for i, n := range e.lab.Nodes() {
		if err := e.lab.SetNextHops(i + 1); err != nil {
			t.Fatal(err)
		}
		by := reached(e.lab.Client())
		t.Logf("the external client through %s: %v", n.Name, by)
		bothNodes("the external client through "+n.Name, by)
	}
	if err := e.lab.SetNextHops(1, 2); err != nil {
		t.Fatal(err)
	}
	for _, p := range e.lab.Pods() {
		by := reached(p)
		t.Logf("the static pod %s: %v", p.Name, by)
		bothNodes("the static pod "+p.Name, by)
	}
	// The node port itself still serves every node directly.
	for _, n := range e.lab.Nodes() {
		addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(nodePort))
		if _, err := ask(e.lab.Client(), addr); err != nil {
			t.Errorf("the node port on %s: %v", n.Name, fmt.Sprint(err))
		}
	}
}
