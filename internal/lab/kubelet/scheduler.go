package kubelet

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// The lab's scheduler is deliberately small: a pod that names no other
// scheduler goes to a Ready, schedulable lab node that matches its node
// selector and whose taints it tolerates; among those, to the one that
// runs the fewest pods of the same owner (a ReplicaSet's pods spread over
// the nodes), ties broken round-robin.

// schedulable reports whether this scheduler handles pod now.
func schedulable(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		(pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// fits reports whether pod may go to node (the node being a lab node).
func fits(pod *corev1.Pod, node *corev1.Node) bool {
	if !nodeReady(node) || node.Spec.Unschedulable || node.DeletionTimestamp != nil {
		return false
	}
	if len(pod.Spec.NodeSelector) > 0 && !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil &&
		!matchesNodeSelector(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, node) {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(pod.Spec.Tolerations, t) {
			return false
		}
	}
	return true
}

// matchesNodeSelector reports whether node matches one of sel's terms
// (required node affinity; the DaemonSet controller pins its pods with a
// matchFields term on metadata.name). Gt and Lt are not supported and
// never match.
func matchesNodeSelector(sel *corev1.NodeSelector, node *corev1.Node) bool {
	for _, term := range sel.NodeSelectorTerms {
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			continue // an empty term matches nothing
		}
		ok := true
		for _, r := range term.MatchExpressions {
			v, has := node.Labels[r.Key]
			ok = ok && requirementMatches(r, v, has)
		}
		for _, r := range term.MatchFields {
			ok = ok && r.Key == "metadata.name" && requirementMatches(r, node.Name, true)
		}
		if ok {
			return true
		}
	}
	return false
}

func requirementMatches(r corev1.NodeSelectorRequirement, v string, has bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return has && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !has || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return has
	case corev1.NodeSelectorOpDoesNotExist:
		return !has
	}
	return false
}

// tolerated reports whether one of tols tolerates taint t.
func tolerated(tols []corev1.Toleration, t corev1.Taint) bool {
	for _, tol := range tols {
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		switch tol.Operator {
		case corev1.TolerationOpExists:
			if tol.Key == "" || tol.Key == t.Key {
				return true
			}
		case corev1.TolerationOpEqual, "":
			if tol.Key == t.Key && tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

// ownerUID is the UID of pod's controller, or "" if it has none.
func ownerUID(pod *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return ref.UID
	}
	return ""
}

// pickNode chooses a node for pod among nodes (in a stable order), given
// the pods already bound; next is the round-robin position, returned
// advanced past the chosen node. It returns "" when no node fits.
func pickNode(pod *corev1.Pod, nodes []*corev1.Node, bound []*corev1.Pod, next int) (string, int) {
	owner := ownerUID(pod)
	siblings := map[string]int{}
	if owner != "" {
		for _, p := range bound {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && ownerUID(p) == owner && p.UID != pod.UID {
				siblings[p.Spec.NodeName]++
			}
		}
	}
	best, bestAt := "", -1
	for k := range nodes {
		at := (next + k) % len(nodes)
		n := nodes[at]
		if !fits(pod, n) {
			continue
		}
		if best == "" || siblings[n.Name] < siblings[best] {
			best, bestAt = n.Name, at
		}
	}
	if best == "" {
		return "", next
	}
	return best, bestAt + 1
}

// schedule binds one pending pod.
func (k *Kubelet) schedule(ctx context.Context, key string) error {
	pod, err := k.podLister.Pods(namespaceOf(key)).Get(nameOf(key))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !schedulable(pod) {
		return nil
	}
	nodes, err := k.labNodes()
	if err != nil {
		return err
	}
	all, err := k.podLister.List(labels.Everything())
	if err != nil {
		return err
	}
	k.mu.Lock()
	// Bindings not yet seen by the informer count as made ("assumed"),
	// so pods scheduled in a burst spread too.
	bound := make([]*corev1.Pod, 0, len(all))
	for _, p := range all {
		if node, ok := k.assumed[p.UID]; ok {
			if p.Spec.NodeName != "" {
				delete(k.assumed, p.UID)
			} else {
				p = p.DeepCopy()
				p.Spec.NodeName = node
			}
		}
		bound = append(bound, p)
	}
	name, next := pickNode(pod, nodes, bound, k.rr)
	k.rr = next
	k.mu.Unlock()
	if name == "" {
		return fmt.Errorf("pod %s: no ready lab node fits", key)
	}
	err = k.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: name},
	}, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // bound by someone else meanwhile, or gone
	}
	if err != nil {
		return fmt.Errorf("bind %s to %s: %w", key, name, err)
	}
	k.mu.Lock()
	k.assumed[pod.UID] = name
	k.mu.Unlock()
	k.log.Info("scheduled", "pod", key, "node", name)
	return nil
}
