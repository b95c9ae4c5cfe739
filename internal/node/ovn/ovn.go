// Package ovn is the data plane of an agent that programs no kernel: it
// writes flowlb's services as OVN northbound Load_Balancer rows, attached
// to the logical switch of each VIP's port and to the logical routers on
// that switch, so that any VM of an ML2/OVN cloud reaches the VIPs
// through OVN's own distributed load balancing; a listener's
// allowed_cidrs become ACL rows on those switches and the external ones
// behind the routers (acl.go). Only rows whose external_ids carry
// flowlb:load_balancer are read, written or deleted.
// It is an agent.Programmer, agent.Verifier and agent.Drifter: the
// monitor cache hears of other clients' changes to flowlb's rows and
// their attachments, and a check writes what differs.
package ovn

//go:generate go run github.com/ovn-org/libovsdb/cmd/modelgen -p nbdb -o nbdb /usr/share/ovn/ovn-nb.ovsschema

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Scope of a check: the rows and their attachments, read from the
// monitor cache.
const Scope = "ovn-nb"

// Config of the OVN data plane.
type Config struct {
	// NB is the northbound database: tcp:IP:PORT, ssl:IP:PORT or
	// unix:PATH; several, comma-separated, for a clustered database.
	NB string
	// Timeout bounds each transaction (default 10 s): a database out of
	// reach fails the write, which the agent retries with backoff.
	Timeout time.Duration
}

// Dataplane writes flowlb's services into the northbound database.
type Dataplane struct {
	c       client.Client
	log     *slog.Logger
	timeout time.Duration

	// mu serialises the writes and guards what follows.
	mu       sync.Mutex
	services map[flows.Key]flows.Service
	// written: a Sync or Apply came. Before it the data plane knows
	// nothing of what is wanted, and checks nothing: the rows a previous
	// agent wrote stay until the first snapshot says otherwise.
	written bool
	refused map[flows.Key]string // logged, until the service changes or goes
	missing map[netip.Addr]bool  // VIPs with no switch port, logged once
	missed  atomic.Int64         // len(missing)
	// fips are the floating IPs of the switch ports' addresses, as the
	// last write found them.
	fips   map[netip.Addr][]netip.Addr
	wanted atomic.Pointer[wanted] // for the cache's handler, which must not take mu
	drift  chan struct{}
	// floating gets a value when Neutron associates or releases a
	// floating IP of a port: the rows follow it (follow), which is no
	// repair.
	floating  chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	detected  atomic.Int64 // unix ns of the first change heard since the last check
}

// wanted is what the cache's handler compares events with.
type wanted struct {
	rows    map[string]Row
	acls    map[string]ACLRow
	missing map[netip.Addr]bool
}

// New connects to the northbound database and monitors the tables the
// data plane reads. It writes nothing until the first Sync or Apply.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Dataplane, error) {
	dbModel, err := clientModel()
	if err != nil {
		return nil, err
	}
	lg := logr.FromSlogHandler(log.With("component", "libovsdb").Handler())
	opts := []client.Option{client.WithLogger(&lg), client.WithReconnect(cfg.timeout(), &backoff.ExponentialBackOff{
		InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: 5 * time.Second,
		Stop: backoff.Stop, Clock: backoff.SystemClock})}
	for _, ep := range splitEndpoints(cfg.NB) {
		opts = append(opts, client.WithEndpoint(ep))
	}
	c, err := client.NewOVSDBClient(dbModel, opts...)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{c: c, log: log, timeout: cfg.timeout(), services: map[flows.Key]flows.Service{},
		refused: map[flows.Key]string{}, missing: map[netip.Addr]bool{}, drift: make(chan struct{}, 1),
		floating: make(chan struct{}, 1), closed: make(chan struct{})}
	d.wanted.Store(&wanted{rows: map[string]Row{}, acls: map[string]ACLRow{}, missing: map[netip.Addr]bool{}})
	cctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	if err := c.Connect(cctx); err != nil {
		return nil, fmt.Errorf("ovn northbound %s: %w", cfg.NB, err)
	}
	c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(table string, m model.Model) { d.heard(table, nil, m) },
		UpdateFunc: func(table string, old, m model.Model) { d.heard(table, old, m) },
		DeleteFunc: func(table string, m model.Model) { d.heard(table, m, nil) },
	})
	if _, err := c.MonitorAll(cctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("ovn northbound %s: monitor: %w", cfg.NB, err)
	}
	go d.follow()
	return d, nil
}

func (c Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 10 * time.Second
}

func splitEndpoints(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// clientModel is the part of the northbound schema the data plane uses.
func clientModel() (model.ClientDBModel, error) {
	return model.NewClientDBModel("OVN_Northbound", map[string]model.Model{
		nbdb.LoadBalancerTable:      &nbdb.LoadBalancer{},
		nbdb.LogicalSwitchTable:     &nbdb.LogicalSwitch{},
		nbdb.LogicalSwitchPortTable: &nbdb.LogicalSwitchPort{},
		nbdb.LogicalRouterTable:     &nbdb.LogicalRouter{},
		nbdb.LogicalRouterPortTable: &nbdb.LogicalRouterPort{},
		nbdb.ACLTable:               &nbdb.ACL{},
	})
}

// Close disconnects from the database; the rows stay.
func (d *Dataplane) Close() {
	d.closeOnce.Do(func() { close(d.closed) })
	d.c.Close()
}

// follow writes the rows again whenever a floating IP of a port came or
// went, until Close. A write that fails is left to the next check.
func (d *Dataplane) follow() {
	for {
		select {
		case <-d.closed:
			return
		case <-d.floating:
		}
		d.mu.Lock()
		if d.written {
			if _, err := d.converge(context.Background(), nil); err != nil {
				d.log.Warn("floating IPs: rows not written; the next check retries", "err", err)
			}
		}
		d.mu.Unlock()
	}
}

// Drift gets a value when another client changed one of flowlb's rows
// or their attachments, or a port took a VIP that had none.
func (d *Dataplane) Drift() <-chan struct{} { return d.drift }

// Unattached counts the VIPs that no switch port holds: their rows are
// written but attached to no switch or router.
func (d *Dataplane) Unattached() int64 { return d.missed.Load() }

// heard looks at a cache event (old or new nil for an insert or a
// delete): flowlb's own writes leave what is wanted, another's may not.
func (d *Dataplane) heard(table string, old, new model.Model) {
	w := d.wanted.Load()
	foreign := false
	switch table {
	case nbdb.LoadBalancerTable:
		for _, m := range []model.Model{old, new} {
			if lb, ok := m.(*nbdb.LoadBalancer); ok && lb.ExternalIDs[LoadBalancerKey] != "" {
				want, ok := w.rows[lb.Name]
				switch {
				case m == new && !(ok && want.Equal(rowOf(lb))):
					foreign = true // written otherwise than wanted
				case m == old && new == nil && ok:
					foreign = true // a wanted row deleted
				}
			}
		}
	case nbdb.ACLTable:
		for _, m := range []model.Model{old, new} {
			if a, ok := m.(*nbdb.ACL); ok && isFlowlbACL(a) {
				want, ok := w.acls[a.ExternalIDs[ACLKey]]
				switch {
				case m == new && !(ok && want.Equal(a)):
					foreign = true // written otherwise than wanted
				case m == old && new == nil && ok:
					foreign = true // a wanted row dropped
				}
			}
		}
	case nbdb.LogicalSwitchTable:
		o, n := asSwitch(old), asSwitch(new)
		foreign = o != nil && n != nil && (lost(o.LoadBalancer, n.LoadBalancer) || lost(o.ACLs, n.ACLs))
	case nbdb.LogicalRouterTable:
		o, n := asRouter(old), asRouter(new)
		foreign = o != nil && n != nil && lost(o.LoadBalancer, n.LoadBalancer)
	case nbdb.LogicalSwitchPortTable:
		o, n := asPort(old), asPort(new)
		if len(w.missing) > 0 {
			for _, a := range lspAddrs(n) {
				foreign = foreign || w.missing[a]
			}
		}
		if o.ExternalIDs[NeutronFIPKey] != n.ExternalIDs[NeutronFIPKey] {
			select {
			case d.floating <- struct{}{}:
			default:
			}
		}
	}
	if !foreign {
		return
	}
	d.detected.CompareAndSwap(0, time.Now().UnixNano())
	select {
	case d.drift <- struct{}{}:
	default:
	}
}

func asSwitch(m model.Model) *nbdb.LogicalSwitch { s, _ := m.(*nbdb.LogicalSwitch); return s }
func asRouter(m model.Model) *nbdb.LogicalRouter { r, _ := m.(*nbdb.LogicalRouter); return r }

// asPort is m as a switch port; a nil one (no port) reads as empty.
func asPort(m model.Model) *nbdb.LogicalSwitchPort {
	if p, ok := m.(*nbdb.LogicalSwitchPort); ok {
		return p
	}
	return &nbdb.LogicalSwitchPort{}
}

// lost reports whether a load balancer left a switch's or router's list
// (the data plane's own detaches are rare: a VIP that moved).
func lost(old, new []string) bool {
	for _, u := range old {
		if !slices.Contains(new, u) {
			return true
		}
	}
	return false
}

// rowOf is a row as the database holds it.
func rowOf(lb *nbdb.LoadBalancer) Row {
	r := Row{Name: lb.Name, LoadBalancerID: lb.ExternalIDs[LoadBalancerKey], Vips: lb.Vips,
		SelectionFields: slices.Sorted(slices.Values(lb.SelectionFields)), Options: lb.Options, ExternalIDs: lb.ExternalIDs}
	if lb.Protocol != nil {
		r.Protocol = *lb.Protocol
	}
	if len(r.SelectionFields) == 0 {
		r.SelectionFields = nil
	}
	return r
}

// Sync makes the database hold t's services and no other of flowlb's.
func (d *Dataplane) Sync(ctx context.Context, t flows.Table) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.services = maps.Clone(t.Services)
	if d.services == nil {
		d.services = map[flows.Key]flows.Service{}
	}
	d.written = true
	_, err := d.converge(ctx, nil)
	return err
}

// Apply writes the services that changed.
func (d *Dataplane) Apply(ctx context.Context, upserts []flows.Service, deletes []flows.Key) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range deletes {
		delete(d.services, k)
	}
	for _, s := range upserts {
		d.services[s.Key] = s
	}
	d.written = true
	_, err := d.converge(ctx, nil)
	return err
}

// Verify compares the database with what the data plane wrote and
// writes again what differs: flowlb's rows, their attachments, and
// flowlb's ACLs on their switches.
func (d *Dataplane) Verify(ctx context.Context) (dataplane.Check, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	check := dataplane.Check{Scope: Scope}
	if !d.written {
		return check, nil
	}
	_, err := d.converge(ctx, &check)
	return check, err
}

// Kinds of repair of the OVN data plane.
const (
	RepairRow    = dataplane.OVNLoadBalancer
	RepairAttach = dataplane.OVNAttach
	RepairACL    = dataplane.OVNACL
)

// converge writes what differs between the database and the services
// in one transaction; with check, what it writes is counted as repairs.
// It returns the operations written.
func (d *Dataplane) converge(ctx context.Context, check *dataplane.Check) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	detected := time.Unix(0, d.detected.Swap(0))
	if detected.UnixNano() == 0 || check == nil {
		detected = time.Now()
	}
	plan := Translate(d.services)
	d.noteRefused(plan.Refused)
	var topo Topology
	var lbs []nbdb.LoadBalancer
	var acls []nbdb.ACL
	for _, l := range []any{&topo.SwitchPorts, &topo.Switches, &topo.Routers, &topo.RouterPorts} {
		if err := d.c.List(ctx, l); err != nil {
			return 0, fmt.Errorf("ovn northbound: read the cache: %w", err)
		}
	}
	if err := d.c.WhereCache(func(lb *nbdb.LoadBalancer) bool { return lb.ExternalIDs[LoadBalancerKey] != "" }).List(ctx, &lbs); err != nil {
		return 0, fmt.Errorf("ovn northbound: read the cache: %w", err)
	}
	if err := d.c.WhereCache(isFlowlbACL).List(ctx, &acls); err != nil {
		return 0, fmt.Errorf("ovn northbound: read the cache: %w", err)
	}
	fips := floatingOf(topo.SwitchPorts)
	d.fips = fips
	plan.Rows = WithFloatingIPs(plan.Rows, fips)
	att := Attach(topo, plan.Rows)
	aclRows, aclOn := ACLs(plan.Guards, att, fips)
	d.noteMissing(plan.Rows, aclRows, att)
	acts := Diff(plan.Rows, att, lbs, topo.Switches, topo.Routers)
	DiffACLs(&acts, aclRows, aclOn, acls, topo.Switches)
	if acts.Empty() {
		return 0, nil
	}
	ops, err := d.ops(acts)
	if err != nil {
		return 0, err
	}
	res, err := d.c.Transact(ctx, ops...)
	if err != nil {
		return 0, fmt.Errorf("ovn northbound: transact: %w", err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return 0, fmt.Errorf("ovn northbound: transact: %w", err)
	}
	if check != nil {
		for _, r := range acts.Create {
			check.Repair(RepairRow, 1, detected, "ovn load balancer "+describe(r)+" written again")
		}
		for _, u := range acts.Update {
			check.Repair(RepairRow, 1, detected, "ovn load balancer "+describe(u.Row)+" rewritten")
		}
		check.Repair(RepairRow, len(acts.Delete), detected, fmt.Sprintf("%d foreign or stale flowlb load balancer rows removed", len(acts.Delete)))
		if n := acts.attachments(); n > 0 {
			check.Repair(RepairAttach, n, detected, fmt.Sprintf("%d load balancer attachments to switches and routers repaired", n))
		}
		for _, r := range acts.ACLCreate {
			check.Repair(RepairACL, 1, detected, "ovn acl "+r.Key+" written again")
		}
		for _, u := range acts.ACLUpdate {
			check.Repair(RepairACL, 1, detected, "ovn acl "+u.Row.Key+" rewritten")
		}
		if n := acts.aclAttachments(); n > 0 {
			check.Repair(RepairACL, n, detected, fmt.Sprintf("%d acls put back on, or taken off, switches", n))
		}
	}
	d.settle(ctx, acts, res)
	return len(ops), nil
}

// settle waits (briefly) until the cache shows the rows inserted and
// not those deleted, so that the next check reads what was written.
func (d *Dataplane) settle(ctx context.Context, acts Actions, res []ovsdb.OperationResult) {
	var created, createdACLs []string
	for i := range len(acts.Create) + len(acts.ACLCreate) {
		if i < len(res) && res[i].UUID.GoUUID != "" {
			if i < len(acts.Create) {
				created = append(created, res[i].UUID.GoUUID)
			} else {
				createdACLs = append(createdACLs, res[i].UUID.GoUUID)
			}
		}
	}
	done := func() bool {
		for _, u := range created {
			if err := d.c.Get(ctx, &nbdb.LoadBalancer{UUID: u}); err != nil {
				return false
			}
		}
		for _, u := range createdACLs {
			if err := d.c.Get(ctx, &nbdb.ACL{UUID: u}); err != nil {
				return false
			}
		}
		for _, u := range acts.Delete {
			if err := d.c.Get(ctx, &nbdb.LoadBalancer{UUID: u}); err == nil {
				return false
			}
		}
		for _, u := range acts.ACLStale {
			if err := d.c.Get(ctx, &nbdb.ACL{UUID: u}); err == nil {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(time.Second)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// noteRefused logs each service refused, once until it changes.
func (d *Dataplane) noteRefused(refused map[flows.Key]string) {
	for k, why := range refused {
		if d.refused[k] != why {
			d.log.Warn("service not written to OVN", "vip", k.VIP, "port", k.Port, "protocol", k.Protocol, "reason", why)
		}
	}
	d.refused = refused
}

// noteMissing logs each VIP without a switch port once, and counts every
// time one is seen.
func (d *Dataplane) noteMissing(rows map[string]Row, acls map[string]ACLRow, att map[string]Attachment) {
	missing := map[netip.Addr]bool{}
	for name, a := range att {
		for _, v := range a.Missing {
			missing[v] = true
			if !d.missing[v] {
				d.log.Warn("no OVN switch port holds the VIP: its load balancer row is written but attached nowhere until one does", "vip", v, "row", name)
			}
		}
	}
	d.missing = missing
	d.missed.Store(int64(len(missing)))
	d.wanted.Store(&wanted{rows: rows, acls: acls, missing: missing})
}

// ops turns actions into one transaction's operations: the inserts
// first, load balancers then ACLs (their results' UUIDs are read in that
// order), then updates, attachments and deletes.
func (d *Dataplane) ops(a Actions) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	for i, r := range a.Create {
		lb := lbOf(r)
		lb.UUID = namedUUID(i)
		if err := add(d.c.Create(lb)); err != nil {
			return nil, err
		}
	}
	for i, r := range a.ACLCreate {
		acl := aclRow(r)
		acl.UUID = namedACLUUID(i)
		if err := add(d.c.Create(acl)); err != nil {
			return nil, err
		}
	}
	for _, u := range a.Update {
		lb := lbOf(u.Row)
		lb.UUID = u.UUID
		if err := add(d.c.Where(lb).Update(lb, &lb.Name, &lb.Vips, &lb.Protocol, &lb.SelectionFields, &lb.Options, &lb.ExternalIDs)); err != nil {
			return nil, err
		}
	}
	for _, u := range a.ACLUpdate {
		acl := aclRow(u.Row)
		acl.UUID = u.UUID
		if err := add(d.c.Where(acl).Update(acl, &acl.Action, &acl.Direction, &acl.Match, &acl.Priority, &acl.ExternalIDs,
			&acl.Name, &acl.Log, &acl.Label, &acl.Options, &acl.Meter, &acl.Severity)); err != nil {
			return nil, err
		}
	}
	ref := func(r Ref) string {
		if r.UUID != "" {
			return r.UUID
		}
		return namedUUID(r.Create)
	}
	aclRef := func(r Ref) string {
		if r.UUID != "" {
			return r.UUID
		}
		return namedACLUUID(r.Create)
	}
	for _, sw := range slices.Sorted(maps.Keys(a.ACLAttach)) {
		ls := &nbdb.LogicalSwitch{UUID: sw}
		if err := add(d.c.Where(ls).Mutate(ls, mutation(&ls.ACLs, ovsdb.MutateOperationInsert, a.ACLAttach[sw], aclRef))); err != nil {
			return nil, err
		}
	}
	for _, sw := range slices.Sorted(maps.Keys(a.ACLDetach)) {
		ls := &nbdb.LogicalSwitch{UUID: sw}
		if err := add(d.c.Where(ls).Mutate(ls, mutation(&ls.ACLs, ovsdb.MutateOperationDelete, a.ACLDetach[sw], aclRef))); err != nil {
			return nil, err
		}
	}
	for _, sw := range slices.Sorted(maps.Keys(a.SwitchAttach)) {
		ls := &nbdb.LogicalSwitch{UUID: sw}
		if err := add(d.c.Where(ls).Mutate(ls, mutation(&ls.LoadBalancer, ovsdb.MutateOperationInsert, a.SwitchAttach[sw], ref))); err != nil {
			return nil, err
		}
	}
	for _, sw := range slices.Sorted(maps.Keys(a.SwitchDetach)) {
		ls := &nbdb.LogicalSwitch{UUID: sw}
		if err := add(d.c.Where(ls).Mutate(ls, mutation(&ls.LoadBalancer, ovsdb.MutateOperationDelete, a.SwitchDetach[sw], ref))); err != nil {
			return nil, err
		}
	}
	for _, lr := range slices.Sorted(maps.Keys(a.RouterAttach)) {
		r := &nbdb.LogicalRouter{UUID: lr}
		if err := add(d.c.Where(r).Mutate(r, mutation(&r.LoadBalancer, ovsdb.MutateOperationInsert, a.RouterAttach[lr], ref))); err != nil {
			return nil, err
		}
	}
	for _, lr := range slices.Sorted(maps.Keys(a.RouterDetach)) {
		r := &nbdb.LogicalRouter{UUID: lr}
		if err := add(d.c.Where(r).Mutate(r, mutation(&r.LoadBalancer, ovsdb.MutateOperationDelete, a.RouterDetach[lr], ref))); err != nil {
			return nil, err
		}
	}
	for _, u := range a.Delete {
		if err := add(d.c.Where(&nbdb.LoadBalancer{UUID: u}).Delete()); err != nil {
			return nil, err
		}
	}
	if len(ops) == 0 {
		return nil, errors.New("ovn northbound: no operations for a change")
	}
	return ops, nil
}

func mutation(field *[]string, m ovsdb.Mutator, refs []Ref, ref func(Ref) string) model.Mutation {
	v := make([]string, 0, len(refs))
	for _, r := range refs {
		v = append(v, ref(r))
	}
	return model.Mutation{Field: field, Mutator: m, Value: v}
}

func namedUUID(i int) string { return fmt.Sprintf("flowlb_new_%d", i) }

func namedACLUUID(i int) string { return fmt.Sprintf("flowlb_acl_%d", i) }

func lbOf(r Row) *nbdb.LoadBalancer {
	proto := r.Protocol
	return &nbdb.LoadBalancer{Name: r.Name, Vips: r.Vips, Protocol: &proto, SelectionFields: r.SelectionFields,
		Options: r.Options, ExternalIDs: r.ExternalIDs}
}
