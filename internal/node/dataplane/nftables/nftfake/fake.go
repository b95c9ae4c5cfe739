// Package nftfake is an in-memory nftables for tests: tables with sets,
// elements, chains and rules behind the methods of a netlink connection
// (it satisfies nftables.Conn of the flowlb data plane). Like the kernel,
// it applies the operations queued since the last Flush at Flush, all or
// none, and refuses what the kernel refuses that a data plane could get
// wrong: an element added twice or deleted when absent, a key or value of
// the wrong length, a jump to a chain that does not exist, a lookup in a
// set that does not exist, a chain or set deleted while in use. Flushes
// can be made to fail on purpose, to test convergence after failures.
package nftfake

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/google/nftables"
)

// ErrInjected is the error of a Flush made to fail.
var ErrInjected = errors.New("nftfake: injected flush failure")

// Conn is an in-memory nftables. The zero value is not usable: use New.
type Conn struct {
	mu     sync.Mutex
	tables map[tableID]*table
	queue  []operation
	// failNext counts the Flushes to fail; failRate fails each with that
	// probability, drawn from rng.
	failNext         int
	failRate         float64
	rng              *rand.Rand
	applied, refused int
}

// operation applies one queued change, returning how to undo it.
type operation func() (undo func(), err error)

type tableID struct {
	family nftables.TableFamily
	name   string
}

type table struct {
	id     tableID
	sets   map[string]*set
	chains map[string]*chain
}

type set struct {
	decl  nftables.Set
	elems map[string]nftables.SetElement
}

type chain struct {
	decl  nftables.Chain
	rules []*nftables.Rule
}

// New returns an empty nftables.
func New() *Conn { return &Conn{tables: map[tableID]*table{}} }

// FailNextFlushes makes the next n Flushes that carry operations fail:
// their operations are discarded, as the kernel discards a transaction it
// refuses.
func (c *Conn) FailNextFlushes(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failNext += n
}

// FailFraction makes each Flush that carries operations fail with
// probability p, drawn from a generator seeded with seed so that a run
// repeats.
func (c *Conn) FailFraction(p float64, seed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The second word spreads small seeds over the generator's state.
	c.failRate, c.rng = p, rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
}

// Flushes counts the Flushes that carried operations: those applied, and
// those refused (by a check or on purpose).
func (c *Conn) Flushes() (applied, refused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied, c.refused
}

// Generation moves with every Flush applied, as the kernel's ruleset
// generation moves with every transaction that commits.
func (c *Conn) Generation() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return uint32(c.applied)
}

// Flush applies the queued operations in order, or none of them.
func (c *Conn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	queue := c.queue
	c.queue = nil
	if len(queue) == 0 {
		return nil // nothing is sent, nothing can fail
	}
	if c.injectFailure() {
		c.refused++
		return ErrInjected
	}
	var undos []func()
	for _, op := range queue {
		undo, err := op()
		if err != nil {
			for i := len(undos) - 1; i >= 0; i-- {
				undos[i]()
			}
			c.refused++
			return err
		}
		undos = append(undos, undo)
	}
	c.applied++
	return nil
}

func (c *Conn) injectFailure() bool {
	if c.failNext > 0 {
		c.failNext--
		return true
	}
	return c.rng != nil && c.rng.Float64() < c.failRate
}

// CloseLasting does nothing: there is no socket.
func (c *Conn) CloseLasting() error { return nil }

func (c *Conn) enqueue(op operation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, op)
}

func idOf(t *nftables.Table) tableID { return tableID{family: t.Family, name: t.Name} }

// table finds a table, with the errno the kernel gives when it is absent.
func (c *Conn) table(t *nftables.Table) (*table, error) {
	if t == nil {
		return nil, fmt.Errorf("nftfake: no table given: %w", errInvalid)
	}
	tb, ok := c.tables[idOf(t)]
	if !ok {
		return nil, fmt.Errorf("nftfake: table %s: %w", t.Name, errNotFound)
	}
	return tb, nil
}

func (c *Conn) set(s *nftables.Set) (*table, *set, error) {
	tb, err := c.table(s.Table)
	if err != nil {
		return nil, nil, err
	}
	st, ok := tb.sets[s.Name]
	if !ok {
		return nil, nil, fmt.Errorf("nftfake: set %s: %w", s.Name, errNotFound)
	}
	return tb, st, nil
}

func (c *Conn) chain(ch *nftables.Chain) (*table, *chain, error) {
	tb, err := c.table(ch.Table)
	if err != nil {
		return nil, nil, err
	}
	cs, ok := tb.chains[ch.Name]
	if !ok {
		return nil, nil, fmt.Errorf("nftfake: chain %s: %w", ch.Name, errNotFound)
	}
	return tb, cs, nil
}
