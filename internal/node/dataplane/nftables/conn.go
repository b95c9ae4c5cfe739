package nftables

import "github.com/google/nftables"

// Conn is the part of a netlink nftables connection the data plane uses:
// queued table, set, chain and rule operations that take effect together
// at Flush (all or nothing), and reads of what the kernel holds.
// *nftables.Conn satisfies it; nftfake.Conn is an in-memory one for tests.
type Conn interface {
	AddTable(t *nftables.Table) *nftables.Table
	DelTable(t *nftables.Table)
	AddSet(s *nftables.Set, elements []nftables.SetElement) error
	DelSet(s *nftables.Set)
	SetAddElements(s *nftables.Set, elements []nftables.SetElement) error
	SetDeleteElements(s *nftables.Set, elements []nftables.SetElement) error
	// SetDestroyElements deletes those of the elements that are there.
	SetDestroyElements(s *nftables.Set, elements []nftables.SetElement) error
	FlushSet(s *nftables.Set)
	AddChain(c *nftables.Chain) *nftables.Chain
	DelChain(c *nftables.Chain)
	FlushChain(c *nftables.Chain)
	AddRule(r *nftables.Rule) *nftables.Rule
	// Flush sends the queued operations as one transaction.
	Flush() error

	GetSets(t *nftables.Table) ([]*nftables.Set, error)
	GetSetElements(s *nftables.Set) ([]nftables.SetElement, error)
	ListTableOfFamily(name string, family nftables.TableFamily) (*nftables.Table, error)
	ListChainsOfTableFamily(family nftables.TableFamily) ([]*nftables.Chain, error)
	GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error)

	// CloseLasting closes the connection's socket.
	CloseLasting() error
}

var _ Conn = (*nftables.Conn)(nil)
