// Package announce tells the network which VIPs a node should receive
// from outside the cluster: the agent keeps, in a routing table of the
// node, one host route for every VIP within the announced ranges that the
// node can serve, and a routing daemon on the node (BIRD, FRR, GoBGP)
// exports that table to the routers, which then spread each VIP over the
// nodes that announce it (ECMP). A VIP whose services are all local-only
// (Kubernetes externalTrafficPolicy=Local) is announced only by the nodes
// with a backend of their own, as MetalLB and Calico do, so that no router
// sends it to a node that would drop it. docs/kubernetes.md describes it.
package announce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Protocol is the routing protocol number of the announcement routes
// ("proto 249" in `ip route`), so that they are told from any other.
const Protocol = 249

// Routes is where announcements go: a routing table of the node.
type Routes interface {
	// List returns the VIPs announced now.
	List() ([]netip.Addr, error)
	Add(vip netip.Addr) error
	Del(vip netip.Addr) error
}

// Batch is a Routes that takes the announcements and withdrawals of a
// change at once (a BGP speaker sends them in one update).
type Batch interface {
	Update(add, del []netip.Addr) error
}

// Starter is a Routes told when the first whole table has been
// announced: a BGP speaker starts its sessions then, so that its first
// update to a router already holds every VIP.
type Starter interface {
	Synced()
}

// Programmer is the data plane as the agent drives it.
type Programmer interface {
	Sync(ctx context.Context, t flows.Table) error
	Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error
}

// Announcer is a Programmer that programs the data plane it wraps and
// then announces what the node can serve: the announcements follow the
// flows the kernel holds, in O(changes).
type Announcer struct {
	inner  Programmer
	node   string
	ranges []netip.Prefix
	routes Routes
	log    *slog.Logger

	mu sync.Mutex
	// servable holds the announceable services this node can serve;
	// count how many there are per VIP; announced what the routing table
	// holds.
	servable  map[flows.Key]bool
	count     map[netip.Addr]int
	announced map[netip.Addr]bool

	vips   prometheus.Gauge
	errors prometheus.Counter
}

// New wraps inner for the node named node: VIPs within ranges are
// announced in routes. What routes holds already (an agent restarting)
// is kept until the first Sync says otherwise.
func New(inner Programmer, node string, ranges []netip.Prefix, routes Routes, reg prometheus.Registerer, log *slog.Logger) (*Announcer, error) {
	a := &Announcer{inner: inner, node: node, ranges: ranges, routes: routes, log: log,
		servable: map[flows.Key]bool{}, count: map[netip.Addr]int{}, announced: map[netip.Addr]bool{},
		vips: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_announced_vips",
			Help: "VIPs this node announces (in its announcement table, or by BGP)."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_announce_errors_total",
			Help: "Announcements the routing table or the BGP speaker refused (retried at the next change)."}),
	}
	if reg != nil {
		reg.MustRegister(a.vips, a.errors)
	}
	have, err := routes.List()
	if err != nil {
		return nil, fmt.Errorf("read announcements: %w", err)
	}
	for _, v := range have {
		a.announced[v] = true
	}
	a.vips.Set(float64(len(a.announced)))
	return a, nil
}

func (a *Announcer) inRanges(v netip.Addr) bool {
	return slices.ContainsFunc(a.ranges, func(p netip.Prefix) bool { return p.Contains(v) })
}

// set records whether the service at k is servable here.
func (a *Announcer) set(k flows.Key, on bool) {
	if !a.inRanges(k.VIP) || a.servable[k] == on {
		return
	}
	if on {
		a.servable[k] = true
		a.count[k.VIP]++
		return
	}
	delete(a.servable, k)
	if a.count[k.VIP]--; a.count[k.VIP] <= 0 {
		delete(a.count, k.VIP)
	}
}

// Sync programs the whole table, then announces exactly what it makes
// servable.
func (a *Announcer) Sync(ctx context.Context, t flows.Table) error {
	if err := a.inner.Sync(ctx, t); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.servable, a.count = map[flows.Key]bool{}, map[netip.Addr]int{}
	for k, s := range t.Services {
		a.set(k, s.Servable(a.node))
	}
	a.reconcile()
	if st, ok := a.routes.(Starter); ok {
		st.Synced()
	}
	return nil
}

// Apply programs a change, then announces what it changes.
func (a *Announcer) Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error {
	if err := a.inner.Apply(ctx, upserts, deletes); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range deletes {
		a.set(k, false)
	}
	for _, s := range upserts {
		a.set(s.Key, s.Servable(a.node))
	}
	a.reconcile()
	return nil
}

// reconcile brings the routing table to the servable VIPs. A route the
// kernel refuses is logged and counted, not returned: the flows are
// programmed and acknowledged regardless, and the next change retries.
func (a *Announcer) reconcile() {
	if b, ok := a.routes.(Batch); ok {
		a.reconcileBatch(b)
		return
	}
	var errs []error
	for v := range a.announced {
		if a.count[v] > 0 {
			continue
		}
		if err := a.routes.Del(v); err != nil {
			errs = append(errs, fmt.Errorf("withdraw %s: %w", v, err))
			continue
		}
		delete(a.announced, v)
		a.log.Info("withdrew VIP", "vip", v)
	}
	for v := range a.count {
		if a.announced[v] {
			continue
		}
		if err := a.routes.Add(v); err != nil {
			errs = append(errs, fmt.Errorf("announce %s: %w", v, err))
			continue
		}
		a.announced[v] = true
		a.log.Info("announced VIP", "vip", v)
	}
	a.vips.Set(float64(len(a.announced)))
	if err := errors.Join(errs...); err != nil {
		a.errors.Add(float64(len(errs)))
		a.log.Warn("announcements", "err", err)
	}
}

// reconcileBatch is reconcile in one call.
func (a *Announcer) reconcileBatch(b Batch) {
	var add, del []netip.Addr
	for v := range a.announced {
		if a.count[v] <= 0 {
			del = append(del, v)
		}
	}
	for v := range a.count {
		if !a.announced[v] {
			add = append(add, v)
		}
	}
	if len(add)+len(del) == 0 {
		return
	}
	slices.SortFunc(add, netip.Addr.Compare)
	slices.SortFunc(del, netip.Addr.Compare)
	if err := b.Update(add, del); err != nil {
		a.errors.Inc()
		a.log.Warn("announcements", "err", err)
		return
	}
	for _, v := range del {
		delete(a.announced, v)
	}
	for _, v := range add {
		a.announced[v] = true
	}
	a.vips.Set(float64(len(a.announced)))
	a.log.Info("announcements", "announced", len(add), "withdrawn", len(del), "total", len(a.announced))
}

// Announced lists the announced VIPs, sorted.
func (a *Announcer) Announced() []netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]netip.Addr, 0, len(a.announced))
	for v := range a.announced {
		out = append(out, v)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
