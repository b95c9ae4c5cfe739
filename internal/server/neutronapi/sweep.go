package neutronapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// A crash between a VIP port's create in Neutron and the commit of its
// load balancer leaves the port behind: the sweep deletes such orphans,
// this deployment's marked ports whose load balancer is not in the store,
// once they are older than any create could take.

// Live is what of the store keeps a port: the load balancers that exist
// and the ports their VIPs name.
type Live struct {
	LoadBalancers map[string]bool
	Ports         map[string]bool
}

// LiveOf reads Live from the store.
func LiveOf(tx store.ReadTx) (Live, error) {
	recs, err := tx.List(store.KindLoadBalancer, store.Filter{})
	if err != nil {
		return Live{}, fmt.Errorf("list load balancers: %w", err)
	}
	l := Live{LoadBalancers: map[string]bool{}, Ports: map[string]bool{}}
	for _, rec := range recs {
		var lb lbaas.LoadBalancer
		if err := jsondoc.Unmarshal(rec.Data, &lb); err != nil {
			return Live{}, fmt.Errorf("decode load balancer %s: %w", rec.ID, err)
		}
		l.LoadBalancers[rec.ID] = true
		if lb.VIPPortID != "" {
			l.Ports[lb.VIPPortID] = true
		}
		for _, av := range lb.AdditionalVIPs {
			if av.PortID != "" {
				l.Ports[av.PortID] = true
			}
		}
	}
	return l, nil
}

// Orphans are the ports of ps that may be deleted: flowlb's, with mark,
// named for a load balancer (device_id lb-<id>) that does not exist and
// not a VIP of any that does, and made more than grace before now by
// Neutron's created_at. Anything in doubt (no creation time, another
// device_id) is kept.
func Orphans(ps []ports.Port, live Live, mark string, now time.Time, grace time.Duration) []ports.Port {
	var out []ports.Port
	for _, p := range ps {
		lbID, named := strings.CutPrefix(p.DeviceID, "lb-")
		if ours, _ := marks(p.Tags, mark); !ours || !named || lbID == "" {
			continue
		}
		if shape, _ := isVIPPort(&p); !shape {
			continue
		}
		if live.LoadBalancers[lbID] || live.Ports[p.ID] {
			continue
		}
		if p.CreatedAt.IsZero() || now.Sub(p.CreatedAt) <= grace {
			continue
		}
		out = append(out, p)
	}
	return out
}

// OrphanGroups are the groups of gs that may be deleted, by the rule of
// Orphans: this deployment's, named for a load balancer (lb-<id>) that
// does not exist, made more than grace before now.
func OrphanGroups(gs []groups.SecGroup, live Live, mark string, now time.Time, grace time.Duration) []groups.SecGroup {
	var out []groups.SecGroup
	for _, g := range gs {
		lbID, named := strings.CutPrefix(g.Name, "lb-")
		if ours, _ := marks(g.Tags, mark); !ours || !named || lbID == "" || live.LoadBalancers[lbID] {
			continue
		}
		if g.CreatedAt.IsZero() || now.Sub(g.CreatedAt) <= grace {
			continue
		}
		out = append(out, g)
	}
	return out
}

// SweepOptions tune the sweep.
type SweepOptions struct {
	// Every is the time between rounds; 0 sweeps never.
	Every time.Duration
	// Grace is the age below which a port is kept whatever the store
	// says: longer than the longest create.
	Grace time.Duration
	// Leads says whether this replica sweeps (one replica of a cluster
	// does; nil: this one).
	Leads func(ctx context.Context) (bool, error)
	Log   *slog.Logger
}

// Sweeper deletes this deployment's orphan VIP ports.
type Sweeper struct {
	a       *Allocator
	st      store.Store
	o       SweepOptions
	deleted prometheus.Counter
	failed  prometheus.Counter
}

// NewSweeper returns the sweep of a's ports against st.
func NewSweeper(a *Allocator, st store.Store, o SweepOptions, reg prometheus.Registerer) *Sweeper {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Sweeper{a: a, st: st, o: o,
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_neutron_orphan_ports_deleted_total",
			Help: "VIP ports and security groups of this deployment deleted from Neutron because no load balancer holds them."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_neutron_orphan_sweep_failures_total",
			Help: "Rounds of the orphan VIP port sweep skipped or cut short by an error of the store or of Neutron."}),
	}
	if reg != nil {
		reg.MustRegister(s.deleted, s.failed)
	}
	return s
}

// Run sweeps every o.Every until ctx ends, on the leading replica.
func (s *Sweeper) Run(ctx context.Context) {
	if s.o.Every <= 0 {
		return
	}
	tick := time.NewTicker(s.o.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if s.o.Leads != nil {
			lead, err := s.o.Leads(ctx)
			if err != nil || !lead {
				continue
			}
		}
		if _, err := s.Round(ctx, time.Now()); err != nil && ctx.Err() == nil {
			s.o.Log.Warn("orphan VIP port sweep skipped", "err", err)
		}
	}
}

// Round lists the marked ports, then reads the store, and deletes the
// orphans among them as of now; it returns how many it deleted. Neutron
// is read before the store so that a port whose load balancer commits in
// between is seen live; one whose create is still in flight is younger
// than the grace. Any error ends the round before another deletion.
func (s *Sweeper) Round(ctx context.Context, now time.Time) (int, error) {
	n, err := s.round(ctx, now)
	if err != nil {
		s.failed.Inc()
	}
	return n, err
}

func (s *Sweeper) round(ctx context.Context, now time.Time) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, callTimeout)
	pages, err := ports.List(s.a.net, ports.ListOpts{Tags: s.a.mark}).AllPages(lctx)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("list VIP ports: %w", err)
	}
	ps, err := ports.ExtractPorts(pages)
	if err != nil {
		return 0, fmt.Errorf("list VIP ports: %w", err)
	}
	lctx, cancel = context.WithTimeout(ctx, callTimeout)
	gpages, err := groups.List(s.a.net, groups.ListOpts{Tags: s.a.mark}).AllPages(lctx)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("list security groups: %w", err)
	}
	gs, err := groups.ExtractGroups(gpages)
	if err != nil {
		return 0, fmt.Errorf("list security groups: %w", err)
	}
	var live Live
	if err := s.st.View(ctx, func(tx store.ReadTx) (err error) {
		live, err = LiveOf(tx)
		return err
	}); err != nil {
		return 0, err
	}
	deleted := 0
	for _, p := range Orphans(ps, live, s.a.mark, now, s.o.Grace) {
		dctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := ports.Delete(dctx, s.a.net, p.ID).ExtractErr()
		cancel()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			return deleted, errors.Join(fmt.Errorf("delete orphan VIP port %s", p.ID), err)
		}
		deleted++
		s.deleted.Inc()
		s.o.Log.Info("deleted an orphan VIP port: its load balancer does not exist", "port", p.ID, "name", p.Name,
			"device_id", p.DeviceID, "created", p.CreatedAt, "mark", s.a.mark)
	}
	// The groups after the ports, which hold them: a group still on a
	// port (someone else's) is refused by Neutron and kept for a later
	// round.
	for _, g := range OrphanGroups(gs, live, s.a.mark, now, s.o.Grace) {
		dctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := groups.Delete(dctx, s.a.net, g.ID).ExtractErr()
		cancel()
		switch {
		case gophercloud.ResponseCodeIs(err, http.StatusNotFound):
			continue
		case gophercloud.ResponseCodeIs(err, http.StatusConflict):
			s.o.Log.Warn("orphan security group in use: kept", "group", g.ID, "name", g.Name, "err", err)
			continue
		case err != nil:
			return deleted, errors.Join(fmt.Errorf("delete orphan security group %s", g.ID), err)
		}
		deleted++
		s.deleted.Inc()
		s.o.Log.Info("deleted an orphan security group: its load balancer does not exist", "group", g.ID, "name", g.Name,
			"created", g.CreatedAt, "mark", s.a.mark)
	}
	return deleted, nil
}
