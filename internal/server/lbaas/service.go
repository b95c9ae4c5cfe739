package lbaas

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/shared/ids"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// VIPAllocator gives load balancers their addresses, inside the caller's
// transaction so that an LB and its VIP commit or fail together.
type VIPAllocator interface {
	Allocate(tx store.Tx, r VIPRequest) (VIP, error)
	Release(tx store.Tx, portID string) error
}

// VIPRequest asks for an address on a subnet, network or existing port.
type VIPRequest struct {
	ProjectID, LoadBalancerID, SubnetID, NetworkID, PortID, Address string
	// Token is the caller's (empty without Keystone): an allocator on a
	// real Neutron reads the subnet, network or port asked for with it,
	// so that Neutron's own rules decide whether the caller may use it.
	Token identity.Token
	// VIPNetworkID is set for an additional VIP: the network of the load
	// balancer's VIP, which the additional VIP's subnet must be on. An
	// allocator that cannot tell a subnet's network (noop) takes it as
	// the answer; one that can lets the domain compare.
	VIPNetworkID string
	// VIPOwned is set for an additional VIP whose load balancer's VIP
	// port the allocator made: the additional VIP's port is protected
	// as that one is (a real Neutron's group lb-<id>, VIPGroups).
	VIPOwned bool
}

// VIP is an allocated address.
type VIP struct {
	Address, PortID, SubnetID, NetworkID string
	// Owned is true when the port was created for this LB and must be
	// released with it.
	Owned bool
}

// Config holds the service's settings.
type Config struct {
	// DefaultProvider names the provider used when a create names none.
	DefaultProvider string
	// ProviderAliases maps names clients ask for (Octavia's "amphora",
	// "ovn") to an enabled provider that realizes their load balancers.
	// A load balancer keeps the name it was created with, so that a
	// client reading it back finds what it sent.
	ProviderAliases map[string]string
	// QuotaDefaults apply to projects without their own quota; -1 is unlimited.
	QuotaDefaults Quota
	// Replica names this server among the replicas sharing the database:
	// it owns the changes it commits until it completes them.
	Replica string
	// Unmeasured says that no data plane serves the VIPs (the noop network
	// of conformance runs): operating statuses then stay as created,
	// OFFLINE and members NO_MONITOR, as under Octavia's noop drivers,
	// instead of claiming ONLINE for traffic nothing forwards.
	Unmeasured bool
	// Written, when set, is given each committed change's tree as its
	// transaction wrote it, with its change-log entry, so that the
	// data plane's fan-out compiles that tree instead of reading it back.
	Written func(w Written)
	// FlowsUnchanged, when set, says whether the data plane serves a
	// load balancer's tree, as its completion leaves it, as it serves the
	// load balancer now (the fan-out compares the digest of the tree's
	// compiled services and probes with the one it kept from compiling
	// the change). A completion it answers true for, as a successful one
	// moving objects from PENDING_* to ACTIVE, writes no change-log
	// entry, so that the fan-out sends no agent a second update per
	// change for nothing. Nil: every completion is logged.
	FlowsUnchanged func(lbID string, change int64, t *Tree) bool
	// Certificates, when set, reads the certificates a listener's
	// request names before the change (nil: none are read, and a
	// provider that terminates no TLS refuses such listeners).
	Certificates Certificates
	// TLSCipherProhibitList are the cipher names a listener's or pool's
	// tls_ciphers may not name (Octavia's [api_settings]
	// tls_cipher_prohibit_list).
	TLSCipherProhibitList []string
}

// Written is a committed change's tree as its transaction wrote it.
type Written struct {
	// Entry is the change-log entry of the tree's load balancer.
	Entry int64
	// Tree is read only: the request answers from it too. Its floating
	// IPs are those its transaction saw (a concurrent Neutron write may
	// have changed them since, logging a change of its own), and it has
	// no security rules (Tree.Security is loaded for the data plane
	// only).
	Tree *Tree
	// Began is when the change's transaction began, or earlier: a read of
	// the store that ended before it cannot have seen the change, nor
	// any later change of the load balancer.
	Began time.Time
	// FreshPorts: the change created the load balancer on VIP ports it
	// allocated, which have no security groups and no floating IPs yet,
	// so that the tree's (none) are all the load balancer has.
	FreshPorts bool
}

// Service implements the LBaaS operations.
type Service struct {
	st        store.Store
	vips      VIPAllocator
	providers map[string]Provider
	cfg       Config
	log       *slog.Logger
	now       func() time.Time

	inflight    sync.WaitGroup
	completions completionGroups
	// realizing holds the changes this process handed to a provider and
	// has not completed yet, so that Resume, when it takes back its own
	// changes after its lease lapsed, does not realize them twice.
	realizingMu sync.Mutex
	realizing   map[store.Pending]struct{}
	// logNews wakes the readers waiting for the change log to move.
	logNews broadcast
}

// New builds a service; providers must include cfg.DefaultProvider.
func New(st store.Store, vips VIPAllocator, providers []Provider, cfg Config, log *slog.Logger) (*Service, error) {
	s := &Service{st: st, vips: vips, providers: map[string]Provider{}, cfg: cfg, log: log, now: time.Now, realizing: map[store.Pending]struct{}{}}
	for _, p := range providers {
		s.providers[p.Name()] = p
	}
	for alias, target := range cfg.ProviderAliases {
		p, ok := s.providers[target]
		switch {
		case !ok || p.Name() != target:
			return nil, fmt.Errorf("provider alias %s=%s: no provider %q is enabled", alias, target, target)
		case s.providers[alias] != nil:
			return nil, fmt.Errorf("provider alias %s=%s: %q is an enabled provider's name", alias, target, alias)
		}
		s.providers[alias] = p
	}
	if _, ok := s.providers[cfg.DefaultProvider]; !ok {
		return nil, fmt.Errorf("default provider %q is not configured", cfg.DefaultProvider)
	}
	if s.cfg.Replica == "" {
		s.cfg.Replica = "local"
	}
	return s, nil
}

// Providers lists the enabled providers, sorted by name; aliases are not
// providers of their own.
func (s *Service) Providers() []Provider {
	out := make([]Provider, 0, len(s.providers))
	for name, p := range s.providers {
		if name == p.Name() {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Provider returns a provider by name or alias; an unknown one is invalid
// input.
func (s *Service) Provider(name string) (Provider, error) {
	p, ok := s.providers[name]
	if !ok {
		return nil, Invalid("Provider '%s' is not enabled.", name)
	}
	return p, nil
}

func (s *Service) timestamp() string { return s.now().UTC().Format(TimeFormat) }

func newID() string { return ids.New() }

// caller returns the request's principal; a context without one is a
// programming error in the HTTP layer (an internal error, not a refusal).
func caller(ctx context.Context) (identity.Caller, error) {
	c, ok := identity.FromContext(ctx)
	if !ok {
		return identity.Caller{}, errors.New("no caller in context")
	}
	return c, nil
}

// projectFor picks the project of a new object: the one the request
// names if the caller may set it, else the caller's.
func projectFor(c identity.Caller, o Owner) (string, error) {
	p := o.project()
	if p != "" && p != c.ProjectID && !c.IsAdmin {
		return "", Forbidden()
	}
	if p == "" {
		p = c.ProjectID
	}
	if p == "" {
		return "", Invalid("Missing project ID in request where one is required.")
	}
	return p, nil
}

// checkOwner refuses a child's create whose body names another project
// than the caller's, unless the caller is an admin. (The child belongs to
// its load balancer's project whatever it names.)
func checkOwner(ctx context.Context, o Owner) error {
	c, err := caller(ctx)
	if err != nil {
		return err
	}
	_, err = projectFor(c, o)
	if err != nil && c.ProjectID == "" {
		return nil
	}
	return err
}

// visible reports whether the caller may see an object of project p;
// writable whether it may change one. Another project's object is
// forbidden, not hidden, as Octavia's policy checks answer.
func visible(c identity.Caller, p string) bool { return c.IsAdmin || c.ReadAll || c.ProjectID == p }

func writable(c identity.Caller, p string) bool { return c.IsAdmin || c.ProjectID == p }

// visibleFilter narrows a list to what the caller may see: its own
// project, or everything for those who read across projects (as visible).
func visibleFilter(c identity.Caller) store.Filter {
	if c.IsAdmin || c.ReadAll {
		return store.Filter{}
	}
	return store.Filter{ProjectID: c.ProjectID}
}

// newBase fills the common fields of a new object of project.
func (s *Service) newBase(project string) Base {
	return Base{ID: newID(), ProjectID: project, ProvisioningStatus: PendingCreate, OperatingStatus: Offline, AdminStateUp: true, CreatedAt: s.timestamp(), Tags: []string{}}
}

// touchUpdated stamps updated_at.
func (s *Service) touchUpdated(b *Base) {
	ts := s.timestamp()
	b.UpdatedAt = &ts
}

// nonNil keeps list attributes rendered as [] rather than null.
func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// statusKinds are the kinds that have provisioning and operating
// statuses: a tree's LBaaS objects.
var statusKinds = append([]store.Kind{store.KindLoadBalancer}, lbaasChildKinds...)

// CountByStatus counts objects by kind, provisioning and operating
// status. The store counts them (a scrape of the metrics decodes no
// object: at 10,000 load balancers, reading every tree was seconds of
// CPU per scrape).
func (s *Service) CountByStatus(ctx context.Context) (map[[3]string]int, error) {
	var groups []store.GroupCount
	err := s.st.View(ctx, func(tx store.ReadTx) (err error) {
		groups, err = tx.CountGrouped(statusKinds, []string{"provisioning_status", "operating_status"})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[[3]string]int{}
	for _, g := range groups {
		out[[3]string{string(g.Kind), g.Values[0], g.Values[1]}] += g.N
	}
	return out, nil
}
