package nftables

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// asEarlierLayout makes the tables conn holds look as an agent of layout
// marker from left them: the marker renamed, and the rules of chains
// emptied, as the earlier layout's rules differ from this one's.
func asEarlierLayout(t *testing.T, conn Conn, marker string, chains ...string) {
	t.Helper()
	for _, f := range families {
		tab := &nftables.Table{Name: tableName, Family: f.table}
		conn.DelSet(&nftables.Set{Table: tab, Name: layoutMarker})
		if err := conn.AddSet(&nftables.Set{Table: tab, Name: marker, KeyType: nftables.TypeInteger}, nil); err != nil {
			t.Fatal(err)
		}
		have, err := conn.ListChainsOfTableFamily(f.table)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range have {
			if c.Table.Name == tableName && slices.Contains(chains, c.Name) {
				conn.FlushChain(&nftables.Chain{Name: c.Name, Table: tab})
			}
		}
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
}

// sortedLines sorts a dump's lines: a set deleted and added again comes
// last in a listing.
func sortedLines(s string) string {
	l := strings.Split(s, "\n")
	slices.Sort(l)
	return strings.Join(l, "\n")
}

// rulesOnlyFrom makes marker, for the test, an earlier layout whose sets
// are this one's: no such layout is there now (layout_13's counter sets
// were not dynamic), but the mechanism stays for the next one.
func rulesOnlyFrom(t *testing.T, marker string) {
	saved := rulesOnlyUpgrades
	rulesOnlyUpgrades = []string{marker}
	t.Cleanup(func() { rulesOnlyUpgrades = saved })
}

// TestUpgradeFromEarlierLayoutOnFake: a table of an earlier layout whose
// sets are this layout's is adopted with its elements, and its rules are
// replaced: the tables end as this layout builds them, and the same flows
// then cost nothing. A table of an older layout is rebuilt.
func TestUpgradeFromEarlierLayoutOnFake(t *testing.T) {
	tab := tableOf(edit(web(flows.SourceIPPort, b1, b2), persistent(time.Minute)), edit(web6(flows.SourceIP, b6a, b6b), persistent(time.Minute)),
		edit(service("198.19.0.53", flows.UDP, 53, flows.RoundRobin, b1), limited(10)), nodePort(flows.TCP, 30080, flows.RoundRobin, b1))
	rulesOnlyFrom(t, "layout_12")
	for _, uncounted := range []bool{false, true} {
		var opts []Option
		if uncounted {
			opts = append(opts, WithoutCounters())
		}
		dp, conn := fakeDataplane(t, opts...)
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		want := tableDump(t, conn)
		asEarlierLayout(t, conn, "layout_12", aclChain, preChain, persistChain(time.Minute))
		if tableDump(t, conn) == want {
			t.Fatal("the earlier layout's tables are this one's")
		}
		up, err := NewWithConn(conn, "n1", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := up.Programmed(); len(got) != len(tab.Services) {
			t.Errorf("uncounted %v: adopted %v, want the %d services", uncounted, got, len(tab.Services))
		}
		if got := tableDump(t, conn); sortedLines(got) != sortedLines(want) {
			t.Errorf("uncounted %v: after the upgrade:\n%s", uncounted, lineDiff(want, got))
		}
		if err := up.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		if up.lastOps != 0 {
			t.Errorf("uncounted %v: the same flows after the upgrade cost %d element operations", uncounted, up.lastOps)
		}
	}
	dp, conn := fakeDataplane(t)
	if err := dp.Sync(context.Background(), tab); err != nil {
		t.Fatal(err)
	}
	asEarlierLayout(t, conn, "layout_11")
	again, err := NewWithConn(conn, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Programmed(); len(got) != 0 {
		t.Errorf("a table of layout_11 was adopted: %v", got)
	}
}

// TestLayout13Rebuilt: a table of layout_13, whose counter sets are not
// dynamic (the agent wrote their elements), is rebuilt, not adopted, even
// were layout_13 taken for a rules-only upgrade: a set's flags cannot
// change in place, and the new rules' set updates need the dynamic flag.
func TestLayout13Rebuilt(t *testing.T) {
	tab := tableOf(web(flows.SourceIPPort, b1, b2), web6(flows.SourceIP, b6a, b6b))
	// keepBound: the counter sets' flag alone differs from this layout's.
	for _, c := range []struct{ listed, keepBound bool }{{false, false}, {true, false}, {true, true}} {
		listed := c.listed
		if listed {
			rulesOnlyFrom(t, "layout_13")
		}
		dp, conn := fakeDataplane(t)
		if err := dp.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		want := tableDump(t, conn)
		asLayout13(t, conn, c.keepBound)
		again, err := NewWithConn(conn, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if got := again.Programmed(); len(got) != 0 {
			t.Errorf("%+v: a table of layout_13 was adopted: %v", c, got)
		}
		if err := again.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		if got := tableDump(t, conn); sortedLines(got) != sortedLines(want) {
			t.Errorf("%+v: after the rebuild:\n%s", c, lineDiff(want, got))
		}
	}
}

// asLayout13 makes the tables conn holds look as layout_13 left them:
// the counter sets without the dynamic flag, no bound set (unless
// keepBound), and the marker renamed (the rules, which refer to the
// sets, emptied first).
func asLayout13(t *testing.T, conn Conn, keepBound bool) {
	t.Helper()
	for _, f := range families {
		tab := &nftables.Table{Name: tableName, Family: f.table}
		have, err := conn.ListChainsOfTableFamily(f.table)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range have {
			if c.Table.Name == tableName {
				conn.FlushChain(&nftables.Chain{Name: c.Name, Table: tab})
			}
		}
		for _, s := range setSpecs(tab) {
			if !isLazySet(s.Name) || (keepBound && s.Name == boundSet) {
				continue
			}
			conn.DelSet(&nftables.Set{Table: tab, Name: s.Name})
			if s.Name == boundSet {
				continue
			}
			old := *s
			old.Dynamic = false
			if err := conn.AddSet(&old, nil); err != nil {
				t.Fatal(err)
			}
		}
		conn.DelSet(&nftables.Set{Table: tab, Name: layoutMarker})
		if err := conn.AddSet(&nftables.Set{Table: tab, Name: "layout_13", KeyType: nftables.TypeInteger}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
}

// echo answers each line of a connection with the same line.
func echo(t *testing.T, addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln
}

// TestUpgradeFromEarlierLayout: an agent starting on the kernel's table
// of an earlier layout whose sets are this one's (rulesOnlyFrom)
// replaces its rules in one transaction and keeps its
// elements: a connection open through a VIP goes on across the upgrade,
// a client's affinity stays, the counters counted before it are read
// after it, and the rules are this layout's.
func TestUpgradeFromEarlierLayout(t *testing.T) {
	rulesOnlyFrom(t, "layout_12")
	inNetns(t, func(ns netns.NsHandle) {
		setup(t)
		ln := echo(t, backendAddrs[0]+":8081")
		defer ln.Close()
		k := flows.Key{VIP: netip.MustParseAddr("198.19.0.20"), Protocol: flows.TCP, Port: 80}
		s := flows.Service{Key: k, Algorithm: flows.RoundRobin, ConnectionLimit: -1, Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Minute},
			Backends: []flows.Backend{{Address: netip.MustParseAddr(backendAddrs[0]), Port: 8081, Weight: 1}}}
		tab := flows.Table{Services: map[flows.Key]flows.Service{k: s}}
		first, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Sync(context.Background(), tab); err != nil {
			t.Fatal(err)
		}
		c, err := net.DialTimeout("tcp", "198.19.0.20:80", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		roundTrip := func(line string) {
			t.Helper()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.WriteString(c, line+"\n"); err != nil {
				t.Fatalf("write %s: %v", line, err)
			}
			if got, err := r.ReadString('\n'); err != nil || got != line+"\n" {
				t.Fatalf("answer to %s: %q, %v", line, got, err)
			}
		}
		roundTrip("before")
		_ = first.Close()
		conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
		if err != nil {
			t.Fatal(err)
		}
		asEarlierLayout(t, conn, "layout_12", aclChain, persistChain(time.Minute))
		up, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer up.Remove()
		roundTrip("after")
		if got := up.Programmed(); len(got) != 1 {
			t.Fatalf("adopted %v, want the one service", got)
		}
		p := up.plane(ipv4)
		want, err := p.traceChains(false)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{aclChain, persistChain(time.Minute)} {
			rules, err := up.conn.GetRules(p.table, &nftables.Chain{Name: name, Table: p.table})
			if err != nil {
				t.Fatal(err)
			}
			if len(rules) != len(want[name].rules) {
				t.Errorf("chain %s: %d rules after the upgrade, want %d", name, len(rules), len(want[name].rules))
			}
		}
		sets, err := up.conn.GetSets(p.table)
		if err != nil {
			t.Fatal(err)
		}
		if !hasSet(sets, layoutMarker) || hasSet(sets, "layout_12") {
			t.Errorf("markers after the upgrade: %v", setNames(sets))
		}
		aff, err := up.conn.GetSetElements(p.sets[affinityMap])
		if err != nil {
			t.Fatal(err)
		}
		if len(aff) != 1 {
			t.Errorf("%d affinities after the upgrade, want the client's one", len(aff))
		}
		st, err := up.ReadStats()
		if err != nil {
			t.Fatal(err)
		}
		if got := st[k].Connections; got != 1 {
			t.Errorf("%d connections read after the upgrade, want the 1 counted before it", got)
		}
	})
}

func setNames(sets []*nftables.Set) []string {
	var out []string
	for _, s := range sets {
		out = append(out, s.Name)
	}
	return out
}
