package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flowlb/flowlb/internal/lab"
)

// Labels the lab kubelet puts on its nodes.
const (
	LabelLab  = "flowlb.io/lab"
	LabelZone = corev1.LabelTopologyZone
)

// NodeLeaseNamespace holds the nodes' heartbeat leases.
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// Zone is the topology zone of lab node i when the lab has zones zones:
// nodes are dealt round-robin, zone-a, zone-b, ... (lab.Zone).
func Zone(i, zones int) string { return lab.Zone(i, zones) }

// nodeObject is the Node that stands for lab node i: its pod CIDRs
// (IPv4 first, then IPv6, as a dual-stack node's), its fabric addresses
// and its zone.
func nodeObject(labName string, i, zones int) *corev1.Node {
	name := lab.NodeName(i)
	cidrs := []string{lab.PodCIDR(i).String(), lab.PodCIDR6(i).String()}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				LabelZone:              Zone(i, zones),
				LabelLab:               labName,
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: cidrs[0], PodCIDRs: cidrs},
	}
}

// nodeStatus is the status the kubelet reports for lab node i; ready
// conditions keep their transition time while they hold. Its IPv4
// InternalIP is ip4 if valid (Config.NodeIPs), else its fabric address.
func nodeStatus(old corev1.NodeStatus, i int, ip4 netip.Addr, now metav1.Time) corev1.NodeStatus {
	st := *old.DeepCopy()
	if !ip4.IsValid() {
		ip4 = lab.NodeAddr(i)
	}
	st.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: ip4.String()},
		{Type: corev1.NodeInternalIP, Address: lab.NodeAddr6(i).String()},
		{Type: corev1.NodeHostName, Address: lab.NodeName(i)},
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse(strconv.Itoa(lab.MaxPodsPerNode)),
	}
	st.Capacity, st.Allocatable = res, res.DeepCopy()
	st.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:          lab.KubeVersion,
		OperatingSystem:         "linux",
		Architecture:            "amd64",
		OSImage:                 "flowlb lab",
		KernelVersion:           "",
		ContainerRuntimeVersion: "flowlb-lab://1",
	}
	st.Phase = ""
	want := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "flowlb lab kubelet is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated", Message: "lab routes pod CIDRs between nodes"},
	}
	var conds []corev1.NodeCondition
	for _, c := range want {
		c.LastHeartbeatTime, c.LastTransitionTime = now, now
		for _, o := range old.Conditions {
			if o.Type == c.Type && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		conds = append(conds, c)
	}
	st.Conditions = conds
	return st
}

// registerNode creates lab node i's Node if it is missing and posts its
// status.
func (k *Kubelet) registerNode(ctx context.Context, i int) error {
	nodes := k.client.CoreV1().Nodes()
	want := nodeObject(k.cfg.Lab, i, k.cfg.Zones)
	n, err := nodes.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = nodes.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			k.log.Info("registered node", "node", n.Name, "podCIDR", n.Spec.PodCIDR, "zone", n.Labels[LabelZone])
		}
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", want.Name, err)
	}
	return k.postNodeStatus(ctx, n, i)
}

func (k *Kubelet) postNodeStatus(ctx context.Context, n *corev1.Node, i int) error {
	n = n.DeepCopy()
	n.Status = nodeStatus(n.Status, i, k.cfg.NodeIPs[i], metav1.NewTime(time.Now()))
	if _, err := k.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", n.Name, err)
	}
	return nil
}

// heartbeat renews lab node i's lease, creating it (owned by the Node, so
// it goes with it) when missing.
func (k *Kubelet) heartbeat(ctx context.Context, i int) error {
	name := lab.NodeName(i)
	leases := k.client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: NodeLeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: n.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(k.cfg.LeaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l = l.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(name)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(k.cfg.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// nodeLoop registers the nodes, then renews their leases every
// HeartbeatPeriod and posts their status every StatusPeriod (and whenever
// a node went missing or lost its Ready condition).
func (k *Kubelet) nodeLoop(ctx context.Context) {
	lastStatus := time.Time{}
	tick := time.NewTicker(k.cfg.HeartbeatPeriod)
	defer tick.Stop()
	for {
		status := time.Since(lastStatus) >= k.cfg.StatusPeriod
		ok := true
		for _, i := range k.nodes {
			if status || !k.nodeReadyInCache(i) {
				if err := k.registerNode(ctx, i); err != nil {
					ok = false
					k.log.Warn("node status", "node", lab.NodeName(i), "err", err)
					continue
				}
			}
			if err := k.heartbeat(ctx, i); err != nil {
				ok = false
				k.log.Warn("node lease", "node", lab.NodeName(i), "err", err)
			}
		}
		if status && ok {
			lastStatus = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (k *Kubelet) nodeReadyInCache(i int) bool {
	n, err := k.nodeLister.Get(lab.NodeName(i))
	return err == nil && nodeReady(n)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
