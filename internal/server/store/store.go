// Package store persists flowlb's objects in SQL: SQLite (embedded, the
// default) or PostgreSQL (for several server replicas). It is a small
// document store: each object is a JSON document plus the few columns that
// queries and locking need.
//
// Every write transaction appends to a change log one entry per load
// balancer it touched. The entries get their revisions after commit, from
// a sequencer that numbers committed entries in the order it finds them
// (log.go): revisions follow commit order, every replica reads the same
// sequence, and no write locks a row every other write locks too. The
// fan-out of every replica follows the log. The store also keeps what the
// replicas of a cluster share: their leases, their agents' acknowledged
// revisions, and which replica drives each pending change (cluster.go).
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
	// KindFloatingIP records carry the load balancer whose VIP port the
	// floating IP is associated with as LoadBalancerID (empty otherwise),
	// so that the load balancer's tree loads them.
	KindFloatingIP Kind = "floatingip"
	// KindSecurityGroup and KindSecurityGroupRule are Neutron's; a rule's
	// ParentID is its group. A port record whose security groups apply
	// to a load balancer's VIP carries that load balancer as
	// LoadBalancerID, so that the tree's loader finds it.
	KindSecurityGroup     Kind = "security_group"
	KindSecurityGroupRule Kind = "security_group_rule"
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
	// LoadBalancerIDs selects the records of any of these load balancers.
	LoadBalancerIDs []string
	ParentID        string
	Name            string
}

// ErrUnavailable wraps the errors of a database that cannot be reached
// (connection refused or lost, shutting down): the request may succeed
// later, and nothing of it was committed unless the commit itself is what
// failed.
var ErrUnavailable = errors.New("database unavailable")

// Store opens transactions and keeps the change log.
type Store interface {
	// Update runs fn in a read-write transaction. If fn returns nil the
	// transaction commits with a change-log entry for each load balancer
	// it touched. Serialization failures are retried, so fn must have no
	// side effects outside tx.
	Update(ctx context.Context, fn func(tx Tx) error) (Commit, error)
	// View runs fn in a read-only transaction with a consistent snapshot.
	View(ctx context.Context, fn func(tx ReadTx) error) error
	Log
	Cluster
	Nodes
	Stats
	Close() error
}

// Nodes binds each node name to the identity last issued for it, so that
// whoever holds the bootstrap token cannot get an identity for a name in
// use: the replicas share the bindings.
type Nodes interface {
	// EnrollNode binds id.Node to id, an identity issued against the
	// bootstrap token, unless the name is bound to an identity of
	// another key, from the same CA, that is still valid (by the
	// database's clock): then ErrConflict, with that binding.
	EnrollNode(ctx context.Context, id NodeIdentity) (NodeIdentity, error)
	// RenewNode binds id.Node to id, issued to a node that presented an
	// identity of key presented, if that is the key the name is bound
	// to or the one before it (whose renewal's answer may have been
	// lost), or if the name was never bound (an identity from before
	// bindings); else ErrConflict, with the binding.
	RenewNode(ctx context.Context, id NodeIdentity, presented string) (NodeIdentity, error)
	// ForgetNode releases a name: the token may enroll it again at once,
	// and no identity issued for it before may renew it. It returns the
	// binding the name had, if it had one.
	ForgetNode(ctx context.Context, node string) (NodeIdentity, bool, error)
	// NodeIdentities lists the bindings, released names included, by
	// name.
	NodeIdentities(ctx context.Context) ([]NodeIdentity, error)
}

// NodeIdentity is the identity a node name is bound to.
type NodeIdentity struct {
	Node string
	// Key is the identity's public key, hashed (pki.KeyID); empty once
	// the name is released.
	Key string
	// CA is the issuing CA's public key, hashed: a binding to an
	// identity of another CA (rotated since) does not hold.
	CA string
	// NotAfter is when the identity expires (zero once released).
	NotAfter time.Time
	// Issued is when it was issued, or the name released.
	Issued time.Time
}

// Released reports whether the name was released (ForgetNode) and not
// enrolled since.
func (n NodeIdentity) Released() bool { return n.Key == "" }

// Stats keeps what the agents count, per listener and per member, summed
// over nodes.
type Stats interface {
	// AddStats adds what node counted since its previous report to each
	// listener's and member's counters and replaces the node's open
	// connections (a listener it does not list has none there), valid
	// for ttl, in one transaction. Counts of listeners or members that
	// do not exist are dropped.
	AddStats(ctx context.Context, node string, counts []ListenerCounts, ttl time.Duration) error
	// ListenerStats sums a listener's statistics (zeros for one without).
	ListenerStats(ctx context.Context, listenerID string) (Counts, error)
	// LoadBalancerStats sums those of a load balancer's existing
	// listeners, as Octavia does.
	LoadBalancerStats(ctx context.Context, lbID string) (Counts, error)
	// AllStats lists every listener's statistics (for metrics).
	AllStats(ctx context.Context) ([]ListenerCounts, error)
	// MemberStats lists the statistics of a load balancer's existing
	// members with any, by member id; AllMemberStats, every load
	// balancer's (for metrics).
	MemberStats(ctx context.Context, lbID string) ([]MemberCounts, error)
	AllMemberStats(ctx context.Context) ([]MemberCounts, error)
}

// Counts are Octavia's statistics of a listener or load balancer.
type Counts struct {
	BytesIn, BytesOut, TotalConnections, RequestErrors, ActiveConnections int64
}

// ListenerCounts is what one node counted for one listener, and for the
// members its connections went to.
type ListenerCounts struct {
	ListenerID, LoadBalancerID string
	Counts
	Members []MemberCounts
}

// MemberCounts are a member's counters: connections sent to it, IP bytes
// from clients to it and from it to clients.
type MemberCounts struct {
	MemberID, LoadBalancerID            string
	BytesIn, BytesOut, TotalConnections int64
}

// Commit is what a committed transaction logged.
type Commit struct {
	// Changes maps each load balancer the transaction touched to the id of
	// its change-log entry; the entry's revision comes later (Log).
	Changes map[string]int64
}

// ReadTx reads documents.
type ReadTx interface {
	Get(kind Kind, id string) (Record, error)
	// List returns matching records ordered by (created_at, id).
	List(kind Kind, f Filter) ([]Record, error)
	// ListKinds is List over several kinds in one query (a load
	// balancer's tree is one round trip, not one per kind), ordered by
	// (created_at, id) across them.
	ListKinds(kinds []Kind, f Filter) ([]Record, error)
	Count(kind Kind, f Filter) (int, error)
	// CountGrouped counts the records of the kinds by kind and by the
	// values of the documents' top-level fields named (a field absent or
	// null counts as "", a number as its text): a count of every object
	// by status reads no document into the process.
	CountGrouped(kinds []Kind, fields []string) ([]GroupCount, error)
	// Claimed returns the keys held in a claim space from `from` on, in
	// bytewise order, at most limit of them.
	Claimed(space, from string, limit int) ([]string, error)
	// CountClaimed counts the keys held in a claim space from `from` to
	// `to`, both included.
	CountClaimed(space, from, to string) (int, error)
}

// GroupCount is one group of CountGrouped: the records of Kind whose
// fields have Values (in the order asked), N of them.
type GroupCount struct {
	Kind   Kind
	Values []string
	N      int
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
	// Lock serialises the transactions that lock the same key: it waits
	// for the one holding it, on any server replica, to end, and holds it
	// until this one ends. A check that counts rows before inserting
	// (quotas) holds under concurrency when it locks first. Take it last,
	// after row locks and claims, so that a holder never waits for them.
	Lock(key string) error
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
	// InsertMany adds records in few statements; ErrConflict if any
	// exists, and then the caller abandons the transaction (returns an
	// error), which undoes what went in: on PostgreSQL a conflict in a
	// large batch fails the transaction.
	InsertMany(rs []Record) error
	// Update replaces Data (and ParentID, LoadBalancerID) of an existing
	// record; ErrNotFound if it does not exist.
	Update(r Record) error
	// UpdateMany replaces Data and Name of existing records in few
	// statements; ErrNotFound if any is missing. A record's placement
	// (ProjectID, LoadBalancerID, ParentID) stays as inserted, so that
	// the indexes over it are not rewritten (an LBaaS object never
	// moves); the memstore refuses records that would move.
	UpdateMany(rs []Record) error
	// Delete removes a record; ErrNotFound if it does not exist.
	Delete(kind Kind, id string) error
	// DeleteMany removes the records of kind with these ids, in few
	// statements; ids that do not exist are no error.
	DeleteMany(kind Kind, ids []string) error
	// Touch records that this transaction changed a load balancer's tree:
	// it gets a change-log entry.
	Touch(loadBalancerID string)
	// Pend records that the transaction leaves the load balancer's change
	// pending, to be completed by replica owner once realized: the pending
	// change is the load balancer's entry of this transaction (Pend
	// touches it).
	Pend(loadBalancerID, owner string)
	// Pending returns the load balancer's pending change, if any.
	Pending(loadBalancerID string) (Pending, bool, error)
	// Settle ends the load balancer's pending change p; ErrConflict when
	// it is no longer p (another replica took it over).
	Settle(p Pending) error
	// OnRollback has fn called if this transaction does not commit (fn
	// of Update failed, or the commit did), for state outside the store
	// that the transaction moved, such as an allocation hint.
	OnRollback(fn func())
}

// LogEntry is one change-log entry: a committed transaction touched a
// load balancer's tree.
type LogEntry struct {
	// ID is given at insert, in no particular order of commit.
	ID int64
	// Revision is given by the sequencer after commit: revisions are
	// dense and follow the order in which entries became visible.
	Revision       int64
	LoadBalancerID string
	// At is when the entry was written.
	At time.Time
}

// Log is the change log every replica's fan-out follows.
type Log interface {
	// Log returns up to limit sequenced entries with revisions above
	// after, in revision order.
	Log(ctx context.Context, after int64, limit int) ([]LogEntry, error)
	// LogBounds returns the log's oldest held revision (entries up to it
	// are compacted away) and its head, the newest revision given.
	LogBounds(ctx context.Context) (oldest, head int64, err error)
	// EntryRevision returns the revision of entry id; 0 if it is not
	// sequenced yet.
	EntryRevision(ctx context.Context, id int64) (int64, error)
	// Sequence gives revisions to the committed entries that have none,
	// unless another replica is doing so at that moment, and returns how
	// many it numbered.
	Sequence(ctx context.Context) (int, error)
	// Compact drops the entries at or below revision upTo.
	Compact(ctx context.Context, upTo int64) error
	// Epoch names the database: revisions are comparable only within one.
	Epoch(ctx context.Context) (string, error)
	// Watch returns a channel that is signalled (without blocking, so
	// signals coalesce) when topic may have news, from this process or,
	// on PostgreSQL, from another replica; Notify spreads the news.
	Watch(topic Topic) <-chan struct{}
	Notify(ctx context.Context, topic Topic)
}

// Topic is a kind of news replicas tell each other.
type Topic string

const (
	// TopicPending: committed entries wait for a revision.
	TopicPending Topic = "flowlb_pending"
	// TopicLog: the log has new revisions.
	TopicLog Topic = "flowlb_log"
	// TopicAgents: agents' acknowledged revisions or connections changed.
	TopicAgents Topic = "flowlb_agents"
)

// Cluster is what the replicas share besides the objects and the log.
type Cluster interface {
	// Renew records that replica is alive for ttl more, at log position
	// tail (its fan-out's revision), registering it if new.
	Renew(ctx context.Context, r Replica, ttl time.Duration) error
	// Retire removes a replica that stops: its agents' rows and its
	// pending changes' ownership go at once.
	Retire(ctx context.Context, replica string) error
	// Replicas lists the replicas whose lease has not expired.
	Replicas(ctx context.Context) ([]Replica, error)
	// RecordAgents stores, for replica, the acknowledged revisions of its
	// connected agents and forgets those that left it.
	RecordAgents(ctx context.Context, replica string, acks []AgentAck, gone []string) error
	// Agents lists the agents connected to live replicas.
	Agents(ctx context.Context) ([]AgentAck, error)
	// AgentsSince reads the agents' rows, of every replica, live or not,
	// that changed after sequence value since (an AgentChanges' Seq), and
	// the live replicas. Since 0, or since older than the oldest change
	// kept, it reads every row (Full).
	AgentsSince(ctx context.Context, since int64) (AgentChanges, error)
	// TakeOver gives replica the pending changes whose owners are not
	// live replicas and returns them.
	TakeOver(ctx context.Context, replica string) ([]Pending, error)
	// Owned counts the pending changes replica drives.
	Owned(ctx context.Context, replica string) (int, error)
}

// Replica is one server process of a cluster.
type Replica struct {
	ID      string
	Address string
	// Tail is the revision its fan-out has reached.
	Tail int64
}

// AgentAck is an agent's acknowledged revision, as the replica it is
// connected to last recorded it.
type AgentAck struct {
	Node     string
	Replica  string
	Revision int64
	// NoProbes: the agent takes no health probes and answers for no VIP
	// (its Hello said so).
	NoProbes bool
}

// AgentChanges are the agents' rows changed after a sequence value.
type AgentChanges struct {
	// Full: Acks are every agent's row, and an agent not among them is
	// gone; else Acks and Gone are only the rows that changed.
	Full bool
	// Seq is the sequence value read up to: the next read's since.
	Seq int64
	// Acks are agents' rows as they are now, Gone the agents that left
	// the replica named (Revision: the last recorded).
	Acks []AgentAck
	Gone []AgentAck
	// Live are the live replicas, sorted: the agents of the others are
	// not live agents of the cluster.
	Live []string
}

// Pending is a load balancer's change waiting to be realized, and the
// replica that completes it.
type Pending struct {
	LoadBalancerID string
	Owner          string
	// Change is the change-log entry of the pending change (0 for a change
	// from before the log).
	Change int64
}
