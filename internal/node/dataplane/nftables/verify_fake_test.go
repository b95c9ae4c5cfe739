package nftables

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables/nftfake"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// kernelState renders what a connection's flowlb tables hold: each set's
// elements and each chain's rule count.
func kernelState(t *testing.T, c Conn) string {
	t.Helper()
	var b strings.Builder
	for _, f := range families {
		tab, err := c.ListTableOfFamily(tableName, f.table)
		if err != nil {
			fmt.Fprintf(&b, "%s: no table\n", f.name)
			continue
		}
		sets, err := c.GetSets(tab)
		if err != nil {
			t.Fatal(err)
		}
		p := &plane{schema: schema{fam: f, table: tab}}
		for _, s := range sets {
			els, err := c.GetSetElements(p.declared(s.Name))
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range rawElems(p.declared(s.Name), els) {
				ids = append(ids, fmt.Sprintf("%x=%x>%s", e.id(), e.val, e.jump))
			}
			slices.Sort(ids)
			fmt.Fprintf(&b, "%s set %s: %s\n", f.name, s.Name, strings.Join(ids, " "))
		}
		rules, err := connProbe{c: c}.rules(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range slices.Sorted(maps.Keys(rules)) {
			fmt.Fprintf(&b, "%s chain %s: %d rules\n", f.name, name, len(rules[name]))
		}
	}
	return b.String()
}

// TestVerifyRepairsFake: on the in-memory kernel (no notifications: every
// check after a change reads everything), each change another process
// could make to flowlb's tables is found and repaired, the kernel then
// holds exactly what it held before, the repair is counted under its
// kind, and a check with nothing changed since reads nothing.
func TestVerifyRepairsFake(t *testing.T) {
	ctx := context.Background()
	c := nftfake.New()
	dp, err := NewWithConn(c, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := dp.SetPodNetworks([]netip.Prefix{netip.MustParsePrefix("198.18.16.0/20")}); err != nil {
		t.Fatal(err)
	}
	if err := dp.SetNodeAddresses([]netip.Addr{netip.MustParseAddr("198.18.0.1")}); err != nil {
		t.Fatal(err)
	}
	tab := steps()[1] // persistence, both families, shared backends
	if err := dp.Sync(ctx, tab); err != nil {
		t.Fatal(err)
	}
	check, err := dp.Verify(ctx)
	if err != nil || check.Scope != scopeFull || check.Repairs() != 0 {
		t.Fatalf("first check: %+v, %v; want a full read that repairs nothing", check, err)
	}
	if check, err := dp.Verify(ctx); err != nil || check.Scope != scopeGeneration {
		t.Fatalf("check with nothing changed: %+v, %v; want the generation alone", check, err)
	}
	want := kernelState(t, c)
	v4 := dp.planes[0]
	webKey := key(web(flows.SourceIP, b1, b2).Key)
	do := func(ops func()) {
		ops()
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ip := v4.table
	ip6 := dp.planes[1].table
	for _, tc := range []struct {
		name   string
		change func()
		want   map[string]int
	}{
		{"pick element deleted", func() {
			do(func() { _ = c.SetDeleteElements(v4.sets[srcSet], []nftables.SetElement{{Key: webKey}}) })
		}, map[string]int{dataplane.Element: 1}},
		{"slot changed", func() {
			do(func() {
				_ = c.SetDeleteElements(v4.sets[slotsMap], []nftables.SetElement{{Key: slotKey(web(flows.SourceIP).Key, 3)}})
				_ = c.SetAddElements(v4.sets[slotsMap], []nftables.SetElement{
					{Key: slotKey(web(flows.SourceIP).Key, 3), Val: backendVal(backend{netip.MustParseAddr("198.18.99.1"), 80})}})
			})
		}, map[string]int{dataplane.Element: 1}},
		{"another's service published", func() {
			// (Another's slots under a key no pick set publishes are never
			// looked up: a full check reads the slots by flowlb's keys.)
			do(func() {
				_ = c.SetAddElements(v4.sets[rrSet], []nftables.SetElement{{Key: key(flows.Key{VIP: netip.MustParseAddr("198.19.9.9"), Protocol: flows.TCP, Port: 1})}})
			})
		}, map[string]int{dataplane.Element: 1}},
		{"persistence jump changed", func() {
			do(func() {
				_ = c.SetDeleteElements(v4.sets[persistMap], []nftables.SetElement{{Key: webKey}})
				_ = c.SetAddElements(v4.sets[persistMap], []nftables.SetElement{(elem{key: webKey, jump: lbChain}).element()})
			})
		}, map[string]int{dataplane.Element: 1}},
		{"own element deleted", func() {
			do(func() { _ = c.SetDeleteElements(v4.sets[ownSet], []nftables.SetElement{{Key: webKey}}) })
		}, map[string]int{dataplane.Element: 1}},
		{"VIP deleted", func() {
			do(func() {
				_ = c.SetDeleteElements(v4.sets[vipsSet], []nftables.SetElement{{Key: netip.MustParseAddr("198.19.0.11").AsSlice()}})
			})
		}, map[string]int{dataplane.Element: 1}},
		{"another's VIP", func() {
			do(func() {
				_ = c.SetAddElements(v4.sets[vipsSet], []nftables.SetElement{{Key: netip.MustParseAddr("198.19.9.9").AsSlice()}})
			})
		}, map[string]int{dataplane.Element: 1}},
		{"pod networks flushed", func() { do(func() { c.FlushSet(v4.sets[podNetsSet]) }) }, map[string]int{dataplane.Set: 1}},
		{"slots flushed", func() { do(func() { c.FlushSet(v4.sets[slotsMap]) }) }, map[string]int{dataplane.Set: 1}},
		{"a counter set deleted", func() {
			// (The kernel deletes no set a rule refers to.)
			do(func() {
				c.FlushChain(&nftables.Chain{Name: aclChain, Table: ip})
				c.FlushChain(&nftables.Chain{Name: aclOutChain, Table: ip})
				c.DelSet(&nftables.Set{Table: ip, Name: statsNewSet})
			})
		}, map[string]int{dataplane.Set: 1, dataplane.Chain: 2}},
		{"chain flushed", func() { do(func() { c.FlushChain(&nftables.Chain{Name: lbChain, Table: ip}) }) }, map[string]int{dataplane.Chain: 1}},
		{"class chain flushed", func() { do(func() { c.FlushChain(&nftables.Chain{Name: "persist_60", Table: ip6}) }) }, map[string]int{dataplane.Chain: 1}},
		{"unreferenced set deleted", func() { do(func() { c.DelSet(&nftables.Set{Table: ip, Name: zoneOnSet}) }) }, map[string]int{dataplane.Set: 1}},
		{"another's set and chain", func() {
			do(func() {
				_ = c.AddSet(&nftables.Set{Table: ip, Name: "foreign", KeyType: nftables.TypeIPAddr}, nil)
				c.AddChain(&nftables.Chain{Name: "foreign", Table: ip})
			})
		}, map[string]int{dataplane.Set: 1, dataplane.Chain: 1}},
		{"table deleted", func() { do(func() { c.DelTable(ip) }) }, map[string]int{dataplane.Table: 1}},
		{"both tables deleted", func() { do(func() { c.DelTable(ip); c.DelTable(ip6) }) }, map[string]int{dataplane.Table: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			tc.change()
			check, err := dp.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(check.Repaired, tc.want) {
				t.Errorf("repaired %v (%s), want %v", check.Repaired, check.What, tc.want)
			}
			if check.Detected.Before(before) {
				t.Errorf("detected at %s, before the change at %s", check.Detected, before)
			}
			if got := kernelState(t, c); got != want {
				t.Errorf("kernel after the repair:\n%s\nwant:\n%s", got, want)
			}
			// The repair's own transaction moved the generation: read
			// again, nothing more to repair.
			if check, err := dp.Verify(ctx); err != nil || check.Repairs() != 0 {
				t.Errorf("check after the repair: %+v, %v", check, err)
			}
		})
	}

	// A counter element is the packet path's: no foreign change, and
	// left as it is.
	made := nftables.SetElement{Key: webKey}
	do(func() { _ = c.SetAddElements(v4.sets[statsNewSet], []nftables.SetElement{made}) })
	if check, err := dp.Verify(ctx); err != nil || check.Repairs() != 0 {
		t.Errorf("check after a counter element was made: %+v, %v", check, err)
	}
	if els, err := c.GetSetElements(v4.sets[statsNewSet]); err != nil || len(els) != 1 {
		t.Errorf("counter elements after the check: %v, %v; want the one made", els, err)
	}
	do(func() { _ = c.SetDeleteElements(v4.sets[statsNewSet], []nftables.SetElement{made}) })

	// Refused: the repair and the rebuild it falls back to; the next
	// check repairs.
	do(func() { _ = c.SetDeleteElements(v4.sets[srcSet], []nftables.SetElement{{Key: webKey}}) })
	c.FailNextFlushes(2)
	if _, err := dp.Verify(ctx); err == nil {
		t.Fatal("a check whose repair was refused reported no error")
	}
	check, err = dp.Verify(ctx)
	if err != nil || check.Repaired[dataplane.Element] != 1 {
		t.Fatalf("check after the refusals: %+v, %v", check, err)
	}
	if got := kernelState(t, c); got != want {
		t.Errorf("kernel after the refused repair:\n%s\nwant:\n%s", got, want)
	}
	// Changes and checks go on as before.
	if err := dp.Sync(ctx, steps()[2]); err != nil {
		t.Fatal(err)
	}
	if check, err := dp.Verify(ctx); err != nil || check.Repairs() != 0 {
		t.Errorf("check after a change of flowlb's own: %+v, %v", check, err)
	}
}
