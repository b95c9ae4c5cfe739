package nftfake

import (
	"fmt"
	"maps"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The kernel's answers to what it refuses.
var (
	errNotFound = unix.ENOENT
	errExists   = unix.EEXIST
	errBusy     = unix.EBUSY
	errInvalid  = unix.EINVAL
)

// AddTable queues the creation of a table; one that exists stays as it is.
func (c *Conn) AddTable(t *nftables.Table) *nftables.Table {
	id := idOf(t)
	c.enqueue(func() (func(), error) {
		if _, ok := c.tables[id]; ok {
			return func() {}, nil
		}
		c.tables[id] = &table{id: id, sets: map[string]*set{}, chains: map[string]*chain{}}
		return func() { delete(c.tables, id) }, nil
	})
	return t
}

// DelTable queues the removal of a table and everything in it.
func (c *Conn) DelTable(t *nftables.Table) {
	c.enqueue(func() (func(), error) {
		tb, err := c.table(t)
		if err != nil {
			return nil, err
		}
		delete(c.tables, tb.id)
		return func() { c.tables[tb.id] = tb }, nil
	})
}

// AddSet queues the creation of a set (one that exists stays as it is)
// and the addition of elements to it.
func (c *Conn) AddSet(s *nftables.Set, elements []nftables.SetElement) error {
	decl := *s
	decl.Table = nil
	c.enqueue(func() (func(), error) {
		tb, err := c.table(s.Table)
		if err != nil {
			return nil, err
		}
		if _, ok := tb.sets[s.Name]; ok {
			return func() {}, nil
		}
		tb.sets[s.Name] = &set{decl: decl, elems: map[string]nftables.SetElement{}}
		return func() { delete(tb.sets, s.Name) }, nil
	})
	if len(elements) > 0 {
		return c.SetAddElements(s, elements)
	}
	return nil
}

// DelSet queues the removal of a set no rule refers to.
func (c *Conn) DelSet(s *nftables.Set) {
	c.enqueue(func() (func(), error) {
		tb, st, err := c.set(s)
		if err != nil {
			return nil, err
		}
		if user := tb.setUser(s.Name); user != "" {
			return nil, fmt.Errorf("nftfake: delete set %s used by chain %s: %w", s.Name, user, errBusy)
		}
		delete(tb.sets, s.Name)
		return func() { tb.sets[s.Name] = st }, nil
	})
}

// FlushSet queues the removal of every element of a set.
func (c *Conn) FlushSet(s *nftables.Set) {
	c.enqueue(func() (func(), error) {
		_, st, err := c.set(s)
		if err != nil {
			return nil, err
		}
		old := st.elems
		st.elems = map[string]nftables.SetElement{}
		return func() { st.elems = old }, nil
	})
}

// SetAddElements queues the addition of elements that are not in the set.
func (c *Conn) SetAddElements(s *nftables.Set, elements []nftables.SetElement) error {
	elements = copyElements(elements)
	c.enqueue(func() (func(), error) {
		tb, st, err := c.set(s)
		if err != nil {
			return nil, err
		}
		var added []string
		undo := func() {
			for _, id := range added {
				delete(st.elems, id)
			}
		}
		for _, e := range elements {
			if err := tb.checkElement(st, e); err != nil {
				undo()
				return nil, err
			}
			id := elementID(e)
			if _, ok := st.elems[id]; ok {
				undo()
				return nil, fmt.Errorf("nftfake: add element %x to %s: %w", e.Key, s.Name, errExists)
			}
			st.elems[id] = e
			added = append(added, id)
		}
		return undo, nil
	})
	return nil
}

// SetDeleteElements queues the removal of elements that are in the set:
// one that is not fails the transaction.
func (c *Conn) SetDeleteElements(s *nftables.Set, elements []nftables.SetElement) error {
	c.removeElements(s, elements, false)
	return nil
}

// SetDestroyElements queues the removal of those of the elements that
// are in the set (NFT_MSG_DESTROYSETELEM).
func (c *Conn) SetDestroyElements(s *nftables.Set, elements []nftables.SetElement) error {
	c.removeElements(s, elements, true)
	return nil
}

// removeElements queues the removal of elements from the set; a missing
// one is passed over if absentOK, else it fails the transaction.
func (c *Conn) removeElements(s *nftables.Set, elements []nftables.SetElement, absentOK bool) {
	elements = copyElements(elements)
	c.enqueue(func() (func(), error) {
		_, st, err := c.set(s)
		if err != nil {
			return nil, err
		}
		var removed []nftables.SetElement
		undo := func() {
			for _, e := range removed {
				st.elems[elementID(e)] = e
			}
		}
		for _, e := range elements {
			old, ok := st.elems[elementID(e)]
			switch {
			case !ok && absentOK:
				continue
			case !ok:
				undo()
				return nil, fmt.Errorf("nftfake: delete element %x from %s: %w", e.Key, s.Name, errNotFound)
			}
			delete(st.elems, elementID(e))
			removed = append(removed, old)
		}
		return undo, nil
	})
}

// AddChain queues the creation of a chain; one that exists stays as it is.
func (c *Conn) AddChain(ch *nftables.Chain) *nftables.Chain {
	decl := *ch
	decl.Table = nil
	c.enqueue(func() (func(), error) {
		tb, err := c.table(ch.Table)
		if err != nil {
			return nil, err
		}
		if _, ok := tb.chains[ch.Name]; ok {
			return func() {}, nil
		}
		tb.chains[ch.Name] = &chain{decl: decl}
		return func() { delete(tb.chains, ch.Name) }, nil
	})
	return ch
}

// DelChain queues the removal of a chain without rules that nothing
// jumps to.
func (c *Conn) DelChain(ch *nftables.Chain) {
	c.enqueue(func() (func(), error) {
		tb, cs, err := c.chain(ch)
		if err != nil {
			return nil, err
		}
		if len(cs.rules) > 0 {
			return nil, fmt.Errorf("nftfake: delete chain %s with %d rules: %w", ch.Name, len(cs.rules), errBusy)
		}
		if user := tb.chainUser(ch.Name); user != "" {
			return nil, fmt.Errorf("nftfake: delete chain %s that %s jumps to: %w", ch.Name, user, errBusy)
		}
		delete(tb.chains, ch.Name)
		return func() { tb.chains[ch.Name] = cs }, nil
	})
}

// FlushChain queues the removal of a chain's rules.
func (c *Conn) FlushChain(ch *nftables.Chain) {
	c.enqueue(func() (func(), error) {
		_, cs, err := c.chain(ch)
		if err != nil {
			return nil, err
		}
		old := cs.rules
		cs.rules = nil
		return func() { cs.rules = old }, nil
	})
}

// AddRule queues the addition of a rule at the end of its chain.
func (c *Conn) AddRule(r *nftables.Rule) *nftables.Rule {
	stored := &nftables.Rule{Exprs: slices.Clone(r.Exprs)}
	c.enqueue(func() (func(), error) {
		tb, cs, err := c.chain(r.Chain)
		if err != nil {
			return nil, err
		}
		if err := tb.checkRule(stored.Exprs); err != nil {
			return nil, fmt.Errorf("nftfake: rule in %s: %w", r.Chain.Name, err)
		}
		old := cs.rules
		cs.rules = append(slices.Clip(cs.rules), stored)
		return func() { cs.rules = old }, nil
	})
	return r
}

// checkElement refuses an element the kernel would not take into st.
func (tb *table) checkElement(st *set, e nftables.SetElement) error {
	d := st.decl
	if n := int(d.KeyType.Bytes); n > 0 && (len(e.Key) != n || len(e.KeyEnd) > 0 && len(e.KeyEnd) != n) {
		return fmt.Errorf("nftfake: element %x of %s: key of %d bytes, want %d: %w", e.Key, d.Name, len(e.Key), n, errInvalid)
	}
	switch {
	case !d.IsMap:
		if len(e.Val) > 0 || e.VerdictData != nil {
			return fmt.Errorf("nftfake: element %x of set %s has data: %w", e.Key, d.Name, errInvalid)
		}
	case d.DataType == nftables.TypeVerdict:
		v := e.VerdictData
		if v == nil {
			return fmt.Errorf("nftfake: element %x of verdict map %s has no verdict: %w", e.Key, d.Name, errInvalid)
		}
		if (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) && tb.chains[v.Chain] == nil {
			return fmt.Errorf("nftfake: element %x of %s jumps to chain %s: %w", e.Key, d.Name, v.Chain, errNotFound)
		}
	case len(e.Val) != int(d.DataType.Bytes) && !e.IntervalEnd:
		return fmt.Errorf("nftfake: element %x of %s: data of %d bytes, want %d: %w", e.Key, d.Name, len(e.Val), d.DataType.Bytes, errInvalid)
	}
	return nil
}

// checkRule refuses a rule that refers to a set or chain that does not
// exist.
func (tb *table) checkRule(exprs []expr.Any) error {
	for _, e := range exprs {
		var setName, chainName string
		switch e := e.(type) {
		case *expr.Lookup:
			setName = e.SetName
		case *expr.Dynset:
			setName = e.SetName
		case *expr.Verdict:
			if e.Kind == expr.VerdictJump || e.Kind == expr.VerdictGoto {
				chainName = e.Chain
			}
		}
		if setName != "" && tb.sets[setName] == nil {
			return fmt.Errorf("set %s: %w", setName, errNotFound)
		}
		if err := tb.checkRegisters(e); err != nil {
			return err
		}
		if chainName != "" && tb.chains[chainName] == nil {
			return fmt.Errorf("jump to chain %s: %w", chainName, errNotFound)
		}
	}
	return nil
}

// checkRegisters refuses what the kernel refuses of an expression's
// registers and conntrack keys: a key or data reaching past the last
// register (ERANGE), a set update of a map without data, and a
// conntrack tuple's address or port of a direction other than original
// or reply (EINVAL).
func (tb *table) checkRegisters(e expr.Any) error {
	// The register file: the verdict's 16 bytes, then 64 bytes that
	// registers 1–4 (16 bytes each) and 8–23 (4 bytes each) name.
	within := func(reg, n uint32) error {
		var off uint32
		switch {
		case reg >= 1 && reg <= 4:
			off = 16 * reg
		case reg >= 8 && reg <= 23:
			off = 16 + (reg-8)*4
		default:
			return fmt.Errorf("register %d: %w", reg, unix.ERANGE)
		}
		if off+n > 80 {
			return fmt.Errorf("register %d length %d: %w", reg, n, unix.ERANGE)
		}
		return nil
	}
	switch e := e.(type) {
	case *expr.Lookup:
		d := tb.sets[e.SetName].decl
		if err := within(e.SourceRegister, d.KeyType.Bytes); err != nil {
			return err
		}
		if e.IsDestRegSet && e.DestRegister != 0 {
			return within(e.DestRegister, d.DataType.Bytes)
		}
	case *expr.Dynset:
		d := tb.sets[e.SetName].decl
		if err := within(e.SrcRegKey, d.KeyType.Bytes); err != nil {
			return err
		}
		if d.IsMap && e.SrcRegData == 0 {
			return fmt.Errorf("update of map %s without data: %w", e.SetName, errInvalid)
		}
		if e.SrcRegData != 0 {
			return within(e.SrcRegData, d.DataType.Bytes)
		}
	case *expr.Ct:
		switch e.Key {
		case expr.CtKeySRC, expr.CtKeyDST, expr.CtKeySRCIP, expr.CtKeyDSTIP, expr.CtKeySRCIP6, expr.CtKeyDSTIP6, expr.CtKeyPROTOSRC, expr.CtKeyPROTODST:
			if e.Direction > 1 {
				return fmt.Errorf("ct key %d direction %d: %w", e.Key, e.Direction, errInvalid)
			}
		}
	}
	return nil
}

// setUser names a chain with a rule that refers to the set, if any.
func (tb *table) setUser(name string) string {
	for _, cn := range slices.Sorted(maps.Keys(tb.chains)) {
		for _, r := range tb.chains[cn].rules {
			for _, e := range r.Exprs {
				if l, ok := e.(*expr.Lookup); ok && l.SetName == name {
					return cn
				}
				if d, ok := e.(*expr.Dynset); ok && d.SetName == name {
					return cn
				}
			}
		}
	}
	return ""
}

// chainUser names a chain or verdict map that jumps to the chain, if any.
func (tb *table) chainUser(name string) string {
	for _, cn := range slices.Sorted(maps.Keys(tb.chains)) {
		for _, r := range tb.chains[cn].rules {
			for _, e := range r.Exprs {
				if v, ok := e.(*expr.Verdict); ok && v.Chain == name {
					return "chain " + cn
				}
			}
		}
	}
	for _, sn := range slices.Sorted(maps.Keys(tb.sets)) {
		for _, e := range tb.sets[sn].elems {
			if e.VerdictData != nil && e.VerdictData.Chain == name {
				return "map " + sn
			}
		}
	}
	return ""
}

// elementID identifies an element in its set: its key, whether it ends an
// interval, and the end of its range.
func elementID(e nftables.SetElement) string {
	end := "s"
	if e.IntervalEnd {
		end = "e"
	}
	return string(e.Key) + "\x00" + end + string(e.KeyEnd)
}

func copyElements(els []nftables.SetElement) []nftables.SetElement {
	out := make([]nftables.SetElement, len(els))
	for i, e := range els {
		e.Key, e.KeyEnd, e.Val = slices.Clone(e.Key), slices.Clone(e.KeyEnd), slices.Clone(e.Val)
		if e.VerdictData != nil {
			v := *e.VerdictData
			e.VerdictData = &v
		}
		out[i] = e
	}
	return out
}
