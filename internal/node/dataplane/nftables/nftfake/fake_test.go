package nftfake

import (
	"errors"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

var (
	tab   = &nftables.Table{Name: "t", Family: nftables.TableFamilyIPv4}
	addrs = &nftables.Set{Table: tab, Name: "addrs", KeyType: nftables.TypeIPAddr}
	jumps = &nftables.Set{Table: tab, Name: "jumps", IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}
	ports = &nftables.Set{Table: tab, Name: "ports", IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeInetService}
	side  = &nftables.Chain{Table: tab, Name: "side"}
	base  = &nftables.Chain{Table: tab, Name: "base", Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter}
)

func el(a ...byte) nftables.SetElement { return nftables.SetElement{Key: a} }

// withTable is a fake holding t, its three sets and two chains, and a
// rule in base that looks up addrs and jumps to side.
func withTable(t *testing.T) *Conn {
	t.Helper()
	c := New()
	c.AddTable(tab)
	for _, s := range []*nftables.Set{addrs, jumps, ports} {
		if err := c.AddSet(s, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.AddChain(side)
	c.AddChain(base)
	c.AddRule(&nftables.Rule{Table: tab, Chain: base, Exprs: []expr.Any{
		&expr.Lookup{SourceRegister: 1, SetName: "addrs"}, &expr.Verdict{Kind: expr.VerdictJump, Chain: "side"}}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

func elements(t *testing.T, c *Conn, s *nftables.Set) int {
	t.Helper()
	els, err := c.GetSetElements(s)
	if err != nil {
		t.Fatal(err)
	}
	return len(els)
}

// TestRefusals: what the kernel refuses is refused, at Flush, and the
// whole transaction with it.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue func(c *Conn)
		want  error
	}{
		{"element added twice", func(c *Conn) {
			_ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 0, 1), el(198, 18, 0, 1)})
		}, unix.EEXIST},
		{"element deleted when absent", func(c *Conn) { _ = c.SetDeleteElements(addrs, []nftables.SetElement{el(198, 18, 0, 9)}) }, unix.ENOENT},
		{"key of the wrong length", func(c *Conn) { _ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 0)}) }, unix.EINVAL},
		{"map data of the wrong length", func(c *Conn) {
			_ = c.SetAddElements(ports, []nftables.SetElement{{Key: []byte{198, 18, 0, 1}, Val: []byte{1}}})
		}, unix.EINVAL},
		{"data in a set", func(c *Conn) {
			_ = c.SetAddElements(addrs, []nftables.SetElement{{Key: []byte{198, 18, 0, 1}, Val: []byte{0, 80}}})
		}, unix.EINVAL},
		{"verdict element jumping to no chain", func(c *Conn) {
			_ = c.SetAddElements(jumps, []nftables.SetElement{{Key: []byte{198, 18, 0, 1}, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: "nowhere"}}})
		}, unix.ENOENT},
		{"rule jumping to no chain", func(c *Conn) {
			c.AddRule(&nftables.Rule{Table: tab, Chain: base, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: "nowhere"}}})
		}, unix.ENOENT},
		{"lookup in no set", func(c *Conn) {
			c.AddRule(&nftables.Rule{Table: tab, Chain: base, Exprs: []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: "nothing"}}})
		}, unix.ENOENT},
		{"lookup past the last register", func(c *Conn) {
			c.AddRule(&nftables.Rule{Table: tab, Chain: base, Exprs: []expr.Any{&expr.Lookup{SourceRegister: 24, SetName: "addrs"}}})
		}, unix.ERANGE},
		{"map data to no register", func(c *Conn) {
			c.AddRule(&nftables.Rule{Table: tab, Chain: base, Exprs: []expr.Any{&expr.Lookup{SourceRegister: 8, SetName: "ports", DestRegister: 24, IsDestRegSet: true}}})
		}, unix.ERANGE},
		{"map updated without data", func(c *Conn) {
			c.AddRule(&nftables.Rule{Table: tab, Chain: base, Exprs: []expr.Any{&expr.Dynset{SrcRegKey: 8, SetName: "ports", Operation: unix.NFT_DYNSET_OP_UPDATE}}})
		}, unix.EINVAL},
		{"conntrack address of neither direction", func(c *Conn) {
			c.AddRule(&nftables.Rule{Table: tab, Chain: base, Exprs: []expr.Any{&expr.Ct{Register: 8, Key: expr.CtKeyDSTIP, Direction: 2}}})
		}, unix.EINVAL},
		{"chain jumped to deleted", func(c *Conn) { c.DelChain(side) }, unix.EBUSY},
		{"chain with rules deleted", func(c *Conn) { c.DelChain(base) }, unix.EBUSY},
		{"set in use deleted", func(c *Conn) { c.DelSet(addrs) }, unix.EBUSY},
		{"absent table deleted", func(c *Conn) { c.DelTable(&nftables.Table{Name: "u", Family: nftables.TableFamilyIPv4}) }, unix.ENOENT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := withTable(t)
			// Valid operations before the refused one are undone with it.
			_ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 0, 2)})
			c.AddRule(&nftables.Rule{Table: tab, Chain: side, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
			tc.queue(c)
			if err := c.Flush(); !errors.Is(err, tc.want) {
				t.Fatalf("Flush: %v, want %v", err, tc.want)
			}
			if n := elements(t, c, addrs); n != 0 {
				t.Errorf("%d elements after a refused transaction", n)
			}
			if rules, _ := c.GetRules(tab, side); len(rules) != 0 {
				t.Errorf("%d rules in side after a refused transaction, want 0", len(rules))
			}
			if applied, refused := c.Flushes(); applied != 1 || refused != 1 {
				t.Errorf("flushes applied %d refused %d, want 1 and 1", applied, refused)
			}
		})
	}
}

// TestTransactions: operations take effect at Flush, in order, so a
// transaction may delete what it added and remove a chain once it lets go.
func TestTransactions(t *testing.T) {
	c := withTable(t)
	_ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 0, 1)})
	if n := elements(t, c, addrs); n != 0 {
		t.Errorf("an element visible before Flush")
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeleteElements(addrs, []nftables.SetElement{el(198, 18, 0, 1)})
	_ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 0, 1), el(198, 18, 0, 3)})
	c.FlushChain(base)
	c.DelChain(side)
	c.DelChain(base)
	c.DelSet(jumps)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := elements(t, c, addrs); n != 2 {
		t.Errorf("%d elements, want 2", n)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil || len(chains) != 0 {
		t.Errorf("chains left %v (%v)", chains, err)
	}
	if _, err := c.GetSetElements(jumps); !errors.Is(err, unix.ENOENT) {
		t.Errorf("deleted set read: %v", err)
	}
	if err := c.Flush(); err != nil {
		t.Errorf("an empty Flush: %v", err)
	}
}

// TestVerdictElementsReadBack: a verdict map's elements come back as the
// library decodes the kernel's: the verdict as raw attributes in Val.
func TestVerdictElementsReadBack(t *testing.T) {
	c := withTable(t)
	_ = c.SetAddElements(jumps, []nftables.SetElement{{Key: []byte{198, 18, 0, 1}, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: "side"}}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	els, err := c.GetSetElements(jumps)
	if err != nil || len(els) != 1 {
		t.Fatalf("%v %v", els, err)
	}
	want := verdictAttributes(expr.VerdictJump, "side")
	if els[0].VerdictData != nil || string(els[0].Val) != string(want) {
		t.Errorf("read back %+v, want Val %x", els[0], want)
	}
	// The chain is in use by the element now.
	c.FlushChain(side)
	c.DelChain(side)
	if err := c.Flush(); !errors.Is(err, unix.EBUSY) {
		t.Errorf("deleting a chain a map jumps to: %v", err)
	}
}

// TestInjectedFailures: failed Flushes change nothing and are counted;
// empty ones cannot fail; a fraction fails reproducibly.
func TestInjectedFailures(t *testing.T) {
	c := withTable(t)
	c.FailNextFlushes(2)
	if err := c.Flush(); err != nil {
		t.Errorf("an empty Flush failed: %v", err)
	}
	for i := range 2 {
		_ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 0, 1)})
		if err := c.Flush(); !errors.Is(err, ErrInjected) {
			t.Errorf("flush %d: %v, want the injected failure", i, err)
		}
	}
	if n := elements(t, c, addrs); n != 0 {
		t.Errorf("%d elements after failed flushes", n)
	}
	_ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 0, 1)})
	if err := c.Flush(); err != nil {
		t.Errorf("after the injected failures: %v", err)
	}
	failures := func(seed uint64) (n int) {
		c := withTable(t)
		c.FailFraction(0.5, seed)
		for i := range 200 {
			_ = c.SetAddElements(addrs, []nftables.SetElement{el(198, 18, 1, byte(i))})
			if c.Flush() != nil {
				n++
			}
		}
		return n
	}
	n := failures(7)
	if n < 60 || n > 140 {
		t.Errorf("%d of 200 flushes failed at a rate of 0.5", n)
	}
	if again := failures(7); again != n {
		t.Errorf("the same seed failed %d then %d flushes", n, again)
	}
}

// TestDestroyElements: a destroy removes the elements that are there and
// is no error for those that are not, where a delete fails the whole
// transaction; a refused transaction puts the destroyed ones back.
func TestDestroyElements(t *testing.T) {
	c := withTable(t)
	if err := c.SetAddElements(addrs, []nftables.SetElement{el(10, 0, 0, 1), el(10, 0, 0, 2)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDestroyElements(addrs, []nftables.SetElement{el(10, 0, 0, 1), el(10, 0, 0, 9)})
	if err := c.Flush(); err != nil {
		t.Fatalf("destroy of a present and a missing element: %v", err)
	}
	if n := elements(t, c, addrs); n != 1 {
		t.Fatalf("%d elements after the destroy, want 1", n)
	}
	_ = c.SetDestroyElements(addrs, []nftables.SetElement{el(10, 0, 0, 2)})
	_ = c.SetDeleteElements(addrs, []nftables.SetElement{el(10, 0, 0, 9)})
	if err := c.Flush(); err == nil {
		t.Fatal("a delete of a missing element was accepted")
	}
	if n := elements(t, c, addrs); n != 1 {
		t.Errorf("%d elements after the refused transaction, want the 1 destroyed in it back", n)
	}
}
