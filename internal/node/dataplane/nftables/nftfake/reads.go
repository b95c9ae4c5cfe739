package nftfake

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Reads see what the last successful Flush left, as the kernel's do, in a
// stable order (the kernel's is its own).

// ListTableOfFamily returns a table that exists.
func (c *Conn) ListTableOfFamily(name string, family nftables.TableFamily) (*nftables.Table, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &nftables.Table{Name: name, Family: family}
	if _, err := c.table(t); err != nil {
		return nil, err
	}
	return t, nil
}

// GetSets returns a table's sets, by name.
func (c *Conn) GetSets(t *nftables.Table) ([]*nftables.Set, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tb, err := c.table(t)
	if err != nil {
		return nil, err
	}
	var out []*nftables.Set
	for _, name := range slices.Sorted(maps.Keys(tb.sets)) {
		s := tb.sets[name].decl
		s.Table = t
		out = append(out, &s)
	}
	return out, nil
}

// GetSetElements returns a set's elements, sorted by key, in the form the
// library decodes the kernel's answer into: a verdict map's verdicts as
// the raw NFTA_VERDICT_* attributes in Val.
func (c *Conn) GetSetElements(s *nftables.Set) ([]nftables.SetElement, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, st, err := c.set(s)
	if err != nil {
		return nil, err
	}
	out := copyElements(slices.Collect(maps.Values(st.elems)))
	for i, e := range out {
		if e.VerdictData != nil {
			out[i].Val, out[i].VerdictData = verdictAttributes(e.VerdictData.Kind, e.VerdictData.Chain), nil
		}
	}
	slices.SortFunc(out, func(a, b nftables.SetElement) int {
		return bytes.Compare([]byte(elementID(a)), []byte(elementID(b)))
	})
	return out, nil
}

func verdictAttributes(kind expr.VerdictKind, chain string) []byte {
	attrs := []netlink.Attribute{{Type: unix.NFTA_VERDICT_CODE, Data: binary.BigEndian.AppendUint32(nil, uint32(int32(kind)))}}
	if chain != "" {
		attrs = append(attrs, netlink.Attribute{Type: unix.NFTA_VERDICT_CHAIN, Data: append([]byte(chain), 0)})
	}
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		panic(fmt.Sprintf("nftfake: encode verdict: %v", err))
	}
	return b
}

// ListChainsOfTableFamily returns the chains of every table of a family.
func (c *Conn) ListChainsOfTableFamily(family nftables.TableFamily) ([]*nftables.Chain, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*nftables.Chain
	ids := slices.SortedFunc(maps.Keys(c.tables), func(a, b tableID) int { return bytes.Compare([]byte(a.name), []byte(b.name)) })
	for _, id := range ids {
		if id.family != family {
			continue
		}
		tb := c.tables[id]
		for _, name := range slices.Sorted(maps.Keys(tb.chains)) {
			ch := tb.chains[name].decl
			ch.Table = &nftables.Table{Name: id.name, Family: id.family}
			out = append(out, &ch)
		}
	}
	return out, nil
}

// GetRules returns a chain's rules, in order.
func (c *Conn) GetRules(t *nftables.Table, ch *nftables.Chain) ([]*nftables.Rule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, cs, err := c.chain(&nftables.Chain{Name: ch.Name, Table: t})
	if err != nil {
		return nil, err
	}
	out := make([]*nftables.Rule, len(cs.rules))
	for i, r := range cs.rules {
		out[i] = &nftables.Rule{Table: t, Chain: ch, Exprs: slices.Clone(r.Exprs)}
	}
	return out, nil
}
