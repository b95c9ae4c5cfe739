// Package store persists flowlb's objects in SQL: SQLite (embedded, the
// default) or PostgreSQL (for several server replicas). It is a small
// document store: each object is a JSON document plus the few columns that
// queries and locking need. Every write transaction bumps a global revision
// and logs which load balancers it touched, which the agent fan-out uses.
package store

import (
	"context"
	"errors"
	"time"
)

// Kind names a table of documents.
type Kind string

const (
	KindLoadBalancer     Kind = "loadbalancer"
	KindListener         Kind = "listener"
	KindPool             Kind = "pool"
	KindMember           Kind = "member"
	KindHealthMonitor    Kind = "healthmonitor"
	KindL7Policy         Kind = "l7policy"
	KindL7Rule           Kind = "l7rule"
	KindFlavor           Kind = "flavor"
	KindFlavorProfile    Kind = "flavorprofile"
	KindAvailabilityZone Kind = "availability_zone"
	KindAZProfile        Kind = "availability_zone_profile"
	KindQuota            Kind = "quota"
	KindNetwork          Kind = "network"
	KindSubnet           Kind = "subnet"
	KindPort             Kind = "port"
)

// ErrNotFound is returned by Get when no document has that kind and id.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned by Insert when the id (or a unique key) exists.
var ErrConflict = errors.New("conflict")

// Record is one stored document.
type Record struct {
	Kind Kind
	ID   string
	// ProjectID scopes the object to a tenant; empty for global objects.
	ProjectID string
	// LoadBalancerID is the root load balancer of an LBaaS object (its own id
	// for a load balancer), empty otherwise. Used for cascade and fan-out.
	LoadBalancerID string
	// ParentID is the direct parent (listener of an l7policy, pool of a
	// member, ...), empty when there is none.
	ParentID string
	// Name is a load balancer's name, kept beside its document so that a
	// lookup by name (the kube-controller's, on every reconciliation) is
	// an index lookup; empty for other kinds.
	Name string
	// Data is the object's JSON document, opaque to the store.
	Data      []byte
	CreatedAt time.Time
}

// Filter selects records of one kind; empty fields do not filter.
type Filter struct {
	ProjectID      string
	LoadBalancerID string
	ParentID       string
	Name           string
}

// Store opens transactions.
type Store interface {
	// Update runs fn in a read-write transaction. If fn returns nil the
	// transaction commits and the global revision advances by one; the
	// new revision is returned. Serialization failures are retried, so fn
	// must have no side effects outside tx.
	Update(ctx context.Context, fn func(tx Tx) error) (revision int64, err error)
	// View runs fn in a read-only transaction with a consistent snapshot.
	View(ctx context.Context, fn func(tx ReadTx) error) error
	// Revision is the latest committed revision.
	Revision(ctx context.Context) (int64, error)
	// Changes returns the load balancer ids touched by revisions in
	// (after, upTo], oldest first, with the revision that last touched each.
	Changes(ctx context.Context, after int64) ([]Change, error)
	Close() error
}

// Change says that a revision touched a load balancer's tree.
type Change struct {
	Revision       int64
	LoadBalancerID string
}

// ReadTx reads documents.
type ReadTx interface {
	Get(kind Kind, id string) (Record, error)
	// List returns matching records ordered by (created_at, id).
	List(kind Kind, f Filter) ([]Record, error)
	Count(kind Kind, f Filter) (int, error)
	// Claimed returns the keys held in a claim space from `from` on, in
	// bytewise order, at most limit of them.
	Claimed(space, from string, limit int) ([]string, error)
	// CountClaimed counts the keys held in a claim space from `from` to
	// `to`, both included.
	CountClaimed(space, from, to string) (int, error)
}

// Tx reads and writes documents.
type Tx interface {
	ReadTx
	// GetForUpdate reads a record and locks it until the transaction ends,
	// the basis of the test-and-set on a load balancer's status.
	GetForUpdate(kind Kind, id string) (Record, error)
	// GetForShare reads a record and keeps it from being deleted or
	// locked for update until the transaction ends, while other
	// transactions may share it (PostgreSQL: FOR KEY SHARE). Plain
	// updates of the record do not wait for it.
	GetForShare(kind Kind, id string) (Record, error)
	// Claim takes a key in a claim space (an address in a subnet). The
	// database holds each (space, key) at most once, across transactions
	// and server replicas: ErrConflict if it is held, and the transaction
	// may go on (on PostgreSQL after waiting for a concurrent, not yet
	// committed claim of the same key to commit or roll back).
	Claim(space, key string) error
	// Unclaim gives a key back; ErrNotFound if it was not held.
	Unclaim(space, key string) error
	// Insert adds a record; ErrConflict if the kind and id exist.
	// A zero CreatedAt is set to the current time.
	Insert(r Record) error
	// InsertMany adds records in one statement; ErrConflict if any exists
	// (then none is added).
	InsertMany(rs []Record) error
	// Update replaces Data (and ParentID, LoadBalancerID) of an existing
	// record; ErrNotFound if it does not exist.
	Update(r Record) error
	// UpdateMany replaces Data (and ParentID, LoadBalancerID, ProjectID)
	// of existing records in one statement; ErrNotFound if any is missing.
	UpdateMany(rs []Record) error
	// Delete removes a record; ErrNotFound if it does not exist.
	Delete(kind Kind, id string) error
	// Touch records that this transaction changed a load balancer's tree.
	Touch(loadBalancerID string)
	// OnRollback has fn called if this transaction does not commit (fn
	// of Update failed, or the commit did), for state outside the store
	// that the transaction moved, such as an allocation hint.
	OnRollback(fn func())
}
