package kubecontroller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
)

// What an unchanged Service costs: nothing per Service. The controller
// keeps, for every Service, what it last applied and the load balancer's
// updated_at when it saw that ACTIVE (the stamp: Octavia stamps the load
// balancer whenever a change anywhere in its tree completes). Then:
//
//   - an informer resync, or any update that leaves the desired load
//     balancer as it was, compares in memory and calls nothing;
//   - every auditEvery, one list of the cluster's load balancers (paged,
//     a call per 1,000) compares each stamp with the API's: a load
//     balancer gone, replaced, not ACTIVE or stamped anew (changed
//     through the API by someone else) has its Service forgotten and
//     queued, and so read in full and repaired;
//   - a batch member update reads the load balancer's row first, as the
//     batch's own completion would stamp over a foreign change;
//   - a restart lists the load balancers once (the garbage collection's
//     list) and trusts a Service whose annotation AnnApplied names the
//     digest of the load balancer it wants now, that load balancer's id
//     and the stamp the list shows. The annotation is written at the
//     Service's first reconcile 30 s or more after its change was seen
//     ACTIVE (in bulk, the next resync's).

// AnnApplied is written on a served Service by the controller: "v1
// <digest of the desired load balancer> <load balancer id> <its
// updated_at>", what it last applied and saw ACTIVE. It lets a restarted
// controller skip reading the load balancers of unchanged Services.
const AnnApplied = "flowlb.io/applied"

const (
	// defaultAuditEvery bounds how long a change made behind the
	// controller's back stays: it is found by the next list.
	defaultAuditEvery = 5 * time.Minute
	// defaultRecordDelay: a Service's annotation is written at its
	// first reconcile at least this long after its change was seen
	// ACTIVE (record). A restart before that reads that Service's load
	// balancer in full.
	defaultRecordDelay = 30 * time.Second
)

// digest identifies a desired load balancer: what Desired computes from
// the Service, its EndpointSlices and the options. A controller whose
// Desired computes another for the same Service (another version) finds
// another digest and applies it.
func digest(want *kubelb.LB) string {
	b, err := json.Marshal(want)
	if err != nil {
		panic(err) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// appliedValue is AnnApplied's value for want applied to load balancer
// id, seen ACTIVE with updated_at stamp.
func appliedValue(want *kubelb.LB, id, stamp string) string {
	return "v1 " + digest(want) + " " + id + " " + stamp
}

// parseApplied reads AnnApplied's value; ok is false for anything but
// what appliedValue writes.
func parseApplied(v string) (dig, id, stamp string, ok bool) {
	f := strings.Fields(v)
	if len(f) != 4 || f[0] != "v1" {
		return "", "", "", false
	}
	return f[1], f[2], f[3], true
}

// unchanged says whether lb, as a list shows it, is still what a
// Service's load balancer was when seen ACTIVE with stamp.
func unchanged(lb *kubelb.ActualLB, id, stamp string) bool {
	return lb != nil && stamp != "" && lb.ID == id && lb.UpdatedAt == stamp && lb.ProvisioningStatus == "ACTIVE"
}

// restored is what a Service's annotation says was applied, when it
// still holds: the Service wants the load balancer of the annotation's
// digest, and the list at start showed that load balancer with the
// annotation's stamp. The Service's first reconcile after a restart so
// reads nothing.
func (c *Controller) restored(key string, svc *corev1.Service, want *kubelb.LB) (applied, bool) {
	c.mu.Lock()
	lb, listed := c.listed[key]
	delete(c.listed, key) // only the first reconcile after the start may use it
	at := c.listedAt
	c.mu.Unlock()
	dig, id, stamp, ok := parseApplied(svc.Annotations[AnnApplied])
	if !listed || !ok || dig != digest(want) || !unchanged(&lb, id, stamp) {
		return applied{}, false
	}
	a := applied{want: want, lbID: id, stamp: stamp, stampedAt: at, at: c.now()}
	if want.FloatingIP != nil {
		// The floating IP is Neutron's, not in the list: the ingress the
		// controller wrote when it applied it.
		for _, in := range svc.Status.LoadBalancer.Ingress {
			a.ingress = append(a.ingress, in.IP)
		}
		if len(a.ingress) == 0 {
			return applied{}, false
		}
	} else {
		a.ingress = want.IngressIPs(kubelb.Result{VIPAddress: lb.VIPAddress, AdditionalVIPs: lb.AdditionalVIPs})
	}
	c.keep(key, a)
	return a, true
}

// record writes AnnApplied for a on the Service, unless it says so
// already or a was seen ACTIVE less than recordDelay ago: at the first
// reconcile after that, which the informers' resync brings within 10
// minutes if nothing else does. Not sooner: a write per Service while
// Services are made in bulk slowed the Kubernetes API's creates (two
// runs of 1,000 in docs/benchmarks.md), and a rolling update's endpoint
// changes so cost one write in all.
func (c *Controller) record(ctx context.Context, svc *corev1.Service, a applied) error {
	if a.stamp == "" || a.lbID == "" {
		return nil
	}
	v := appliedValue(a.want, a.lbID, a.stamp)
	if svc.Annotations[AnnApplied] == v {
		return nil
	}
	if time.Since(a.stampedAt) < c.recordDelay {
		return nil
	}
	cp := svc.DeepCopy()
	if cp.Annotations == nil {
		cp.Annotations = map[string]string{}
	}
	cp.Annotations[AnnApplied] = v
	_, err := c.client.CoreV1().Services(cp.Namespace).Update(ctx, cp, metav1UpdateOptions)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the newer Service comes with its own event
	}
	return err
}

// audit lists this cluster's load balancers and queues, forgotten, every
// Service whose load balancer is not what the controller last saw ACTIVE
// (unchanged): a change or a deletion behind its back, repaired by the
// full reconcile that follows. What was stamped after the list began is
// newer than the list and left alone, and so are changes under way.
func (c *Controller) audit(ctx context.Context) error {
	start := time.Now()
	owned, err := c.octavia.Owned(ctx, kubelb.TagCluster+c.opts.Cluster)
	if err != nil {
		return err
	}
	byName := make(map[string]*kubelb.ActualLB, len(owned))
	for i := range owned {
		byName[owned[i].Name] = &owned[i]
	}
	var stale []string
	c.mu.Lock()
	for key, a := range c.applied {
		if a.stamp == "" || a.pending != "" || !a.stampedAt.Before(start) {
			continue
		}
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil || unchanged(byName[kubelb.Name(c.opts.Cluster, ns, name)], a.lbID, a.stamp) {
			continue
		}
		delete(c.applied, key)
		stale = append(stale, key)
	}
	c.mu.Unlock()
	for _, key := range stale {
		c.log.Info("load balancer changed behind the controller's back; reading it in full", "service", key)
		c.m.drifted.Inc()
		c.add(key)
	}
	return nil
}

// onlyRecorded says whether a Service update changed nothing but
// AnnApplied (the controller's own write, which changes nothing it
// applies): such an update is not queued. A resync (the same object
// again) still is.
func onlyRecorded(old, cur any) bool {
	a, ok1 := old.(*corev1.Service)
	b, ok2 := cur.(*corev1.Service)
	if !ok1 || !ok2 || a.ResourceVersion == b.ResourceVersion || a.Annotations[AnnApplied] == b.Annotations[AnnApplied] {
		return false
	}
	x, y := a.DeepCopy(), b.DeepCopy()
	for _, s := range []*corev1.Service{x, y} {
		delete(s.Annotations, AnnApplied)
		if len(s.Annotations) == 0 {
			s.Annotations = nil
		}
		s.ResourceVersion, s.ManagedFields, s.Generation = "", nil, 0
	}
	return reflect.DeepEqual(x, y)
}
