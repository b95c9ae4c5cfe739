package kubelet

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func labNode(i int, mod ...func(*corev1.Node)) *corev1.Node {
	n := nodeObject("x", i, 3)
	n.Status = nodeStatus(corev1.NodeStatus{}, i, netip.Addr{}, metav1.Now())
	for _, m := range mod {
		m(n)
	}
	return n
}

func ownedPod(name string, owner types.UID, node string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: owner, Controller: ptr.To(true)}}
	}
	return p
}

func TestSchedulable(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"pending", corev1.Pod{}, true},
		{"default scheduler named", corev1.Pod{Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName}}, true},
		{"bound", corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}, false},
		{"other scheduler", corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "volcano"}}, false},
		{"deleting", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false},
		{"failed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
	} {
		if got := schedulable(&tc.pod); got != tc.want {
			t.Errorf("%s: schedulable %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFits(t *testing.T) {
	notReady := func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
	}
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	tainted := func(effect corev1.TaintEffect) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "lb", Effect: effect}}
		}
	}
	tol := func(tols ...corev1.Toleration) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tols}}
	}
	affinity := func(terms ...corev1.NodeSelectorTerm) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}}}
	}
	onNode := func(name string) corev1.NodeSelectorTerm { // as the DaemonSet controller pins its pods
		return corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{name}}}}
	}
	zoneReq := func(op corev1.NodeSelectorOperator, v ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: LabelZone, Operator: op, Values: v}}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want bool
	}{
		{"ready node", &corev1.Pod{}, labNode(1), true},
		{"not ready", &corev1.Pod{}, labNode(1, notReady), false},
		{"cordoned", &corev1.Pod{}, labNode(1, cordoned), false},
		{"selector matches zone", &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{LabelZone: "zone-b"}}}, labNode(2), true},
		{"selector does not match", &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{LabelZone: "zone-b"}}}, labNode(1), false},
		{"NoSchedule taint", &corev1.Pod{}, labNode(1, tainted(corev1.TaintEffectNoSchedule)), false},
		{"NoExecute taint", &corev1.Pod{}, labNode(1, tainted(corev1.TaintEffectNoExecute)), false},
		{"PreferNoSchedule taint is a preference", &corev1.Pod{}, labNode(1, tainted(corev1.TaintEffectPreferNoSchedule)), true},
		{"tolerated by Equal", tol(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "lb"}), labNode(1, tainted(corev1.TaintEffectNoSchedule)), true},
		{"tolerated by empty operator (Equal)", tol(corev1.Toleration{Key: "dedicated", Value: "lb", Effect: corev1.TaintEffectNoSchedule}), labNode(1, tainted(corev1.TaintEffectNoSchedule)), true},
		{"wrong value", tol(corev1.Toleration{Key: "dedicated", Value: "db"}), labNode(1, tainted(corev1.TaintEffectNoSchedule)), false},
		{"wrong effect", tol(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}), labNode(1, tainted(corev1.TaintEffectNoSchedule)), false},
		{"Exists on the key", tol(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}), labNode(1, tainted(corev1.TaintEffectNoExecute)), true},
		{"DaemonSet pod on its node", affinity(onNode("n2")), labNode(2), true},
		{"DaemonSet pod elsewhere", affinity(onNode("n2")), labNode(1), false},
		{"affinity In zone", affinity(zoneReq(corev1.NodeSelectorOpIn, "zone-a", "zone-b")), labNode(2), true},
		{"affinity NotIn zone", affinity(zoneReq(corev1.NodeSelectorOpNotIn, "zone-a")), labNode(1), false},
		{"affinity Exists", affinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: LabelZone, Operator: corev1.NodeSelectorOpExists}}}), labNode(1), true},
		{"affinity DoesNotExist", affinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: LabelZone, Operator: corev1.NodeSelectorOpDoesNotExist}}}), labNode(1), false},
		{"terms are ORed", affinity(onNode("n3"), zoneReq(corev1.NodeSelectorOpIn, "zone-a")), labNode(1), true},
		{"unknown field", affinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "spec.x", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}), labNode(1), false},
		{"Exists on everything", tol(corev1.Toleration{Operator: corev1.TolerationOpExists}), labNode(1, tainted(corev1.TaintEffectNoSchedule)), true},
	} {
		if got := fits(tc.pod, tc.node); got != tc.want {
			t.Errorf("%s: fits %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A ReplicaSet's pods bound one after the other spread evenly; ties go
// round-robin; unfit nodes are skipped.
func TestPickNodeSpreads(t *testing.T) {
	nodes := []*corev1.Node{labNode(1), labNode(2), labNode(3)}
	var bound []*corev1.Pod
	count := map[string]int{}
	next := 0
	for k := range 9 {
		p := ownedPod(fmt.Sprintf("web-%d", k), "rs1", "")
		name := ""
		name, next = pickNode(p, nodes, bound, next)
		if name == "" {
			t.Fatalf("pod %d: no node", k)
		}
		p.Spec.NodeName = name
		bound = append(bound, p)
		count[name]++
	}
	if count["n1"] != 3 || count["n2"] != 3 || count["n3"] != 3 {
		t.Errorf("9 replicas on 3 nodes: %v", count)
	}

	// Another owner's pods do not count against a node; the fewest
	// siblings win even against the round-robin position.
	bound = []*corev1.Pod{ownedPod("a", "rs1", "n1"), ownedPod("b", "rs1", "n2"), ownedPod("c", "rs2", "n3"), ownedPod("d", "rs2", "n3")}
	if name, _ := pickNode(ownedPod("e", "rs1", ""), nodes, bound, 0); name != "n3" {
		t.Errorf("rs1 pod went to %s, want n3 (no rs1 pod there)", name)
	}
	// Terminating siblings do not count.
	now := metav1.NewTime(time.Now())
	gone := ownedPod("f", "rs1", "n3")
	gone.DeletionTimestamp = &now
	bound = []*corev1.Pod{ownedPod("a", "rs1", "n1"), ownedPod("b", "rs1", "n2"), gone}
	if name, _ := pickNode(ownedPod("g", "rs1", ""), nodes, bound, 0); name != "n3" {
		t.Errorf("rs1 pod went to %s, want n3 (its pod there is terminating)", name)
	}
	// Pods without an owner go round-robin.
	var got []string
	next = 0
	for k := range 4 {
		name := ""
		name, next = pickNode(ownedPod(fmt.Sprint(k), "", ""), nodes, nil, next)
		got = append(got, name)
	}
	if fmt.Sprint(got) != "[n1 n2 n3 n1]" {
		t.Errorf("round-robin %v", got)
	}
	// Nothing fits: no node, position unchanged.
	cordoned := []*corev1.Node{labNode(1, func(n *corev1.Node) { n.Spec.Unschedulable = true })}
	if name, nx := pickNode(ownedPod("h", "", ""), cordoned, nil, 5); name != "" || nx != 5 {
		t.Errorf("no fit: %q, %d", name, nx)
	}
}

func TestNodeObjectAndStatus(t *testing.T) {
	n := nodeObject("lab1", 4, 3)
	if n.Name != "n4" || n.Spec.PodCIDR != "198.18.20.0/24" || !slices.Equal(n.Spec.PodCIDRs, []string{"198.18.20.0/24", "2001:2:0:4004::/64"}) ||
		n.Labels[LabelZone] != "zone-a" || n.Labels[LabelLab] != "lab1" || n.Labels[corev1.LabelHostname] != "n4" {
		t.Errorf("node %+v", n)
	}
	for i, want := range map[int]string{1: "zone-a", 2: "zone-b", 3: "zone-c", 4: "zone-a", 5: "zone-b"} {
		if got := Zone(i, 3); got != want {
			t.Errorf("Zone(%d, 3) = %s, want %s", i, got, want)
		}
	}
	if Zone(7, 0) != "zone-a" {
		t.Errorf("no zones: %s", Zone(7, 0))
	}
	t0 := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	st := nodeStatus(corev1.NodeStatus{}, 4, netip.Addr{}, t0)
	if len(st.Addresses) != 3 || st.Addresses[0].Type != corev1.NodeInternalIP || st.Addresses[0].Address != "198.18.0.4" ||
		st.Addresses[1].Type != corev1.NodeInternalIP || st.Addresses[1].Address != "2001:2::4" {
		t.Errorf("addresses %+v", st.Addresses)
	}
	if !nodeReady(&corev1.Node{Status: st}) {
		t.Errorf("not ready: %+v", st.Conditions)
	}
	// A node with an address of its own (Config.NodeIPs) reports it
	// in place of the fabric's IPv4 address, nothing else changed.
	own := nodeStatus(corev1.NodeStatus{}, 4, netip.MustParseAddr("198.18.225.7"), t0)
	if len(own.Addresses) != 3 || own.Addresses[0].Address != "198.18.225.7" || own.Addresses[1].Address != "2001:2::4" ||
		own.Addresses[2].Type != corev1.NodeHostName || own.Addresses[2].Address != "n4" {
		t.Errorf("addresses with a node IP: %+v", own.Addresses)
	}
	t1 := metav1.NewTime(t0.Add(time.Minute))
	st = nodeStatus(st, 4, netip.Addr{}, t1)
	for _, c := range st.Conditions {
		if !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
			t.Errorf("condition %s: transition %s heartbeat %s", c.Type, c.LastTransitionTime, c.LastHeartbeatTime)
		}
	}
}

func TestParseNodeIP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		node int
		addr string // "" : refused
	}{
		{"1=198.18.225.5", 1, "198.18.225.5"},
		{"12=10.0.0.1", 12, "10.0.0.1"},
		{"0=198.18.225.5", 0, ""},
		{"n1=198.18.225.5", 0, ""},
		{"198.18.225.5", 0, ""},
		{"1=", 0, ""},
		{"1=2001:2::5", 0, ""},
		{"1=not-an-address", 0, ""},
	} {
		n, a, err := parseNodeIP(tc.in)
		if tc.addr == "" {
			if err == nil {
				t.Errorf("parseNodeIP(%q) = %d, %s, want an error", tc.in, n, a)
			}
			continue
		}
		if err != nil || n != tc.node || a.String() != tc.addr {
			t.Errorf("parseNodeIP(%q) = %d, %s, %v, want %d, %s", tc.in, n, a, err, tc.node, tc.addr)
		}
	}
}
