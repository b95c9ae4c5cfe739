package nftables

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestDiffStructure: a table's structure as read against what was
// programmed; rebuilds are for what cannot be changed in place.
func TestDiffStructure(t *testing.T) {
	tab := &nftables.Table{Name: tableName, Family: nftables.TableFamilyIPv4}
	hook, prio := nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest
	base := nftables.Chain{Name: "prerouting", Table: tab, Type: nftables.ChainTypeNAT, Hooknum: hook, Priority: prio}
	lb := nftables.Chain{Name: "lb", Table: tab}
	slots := &nftables.Set{Table: tab, Name: slotsMap, IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeIPAddr}
	pick := &nftables.Set{Table: tab, Name: rrSet, KeyType: nftables.TypeIPAddr}
	want := wantStructure{
		sets:   []*nftables.Set{slots, pick},
		chains: []chainSpec{{chain: base, rules: make([]ruleSpec, 3)}, {chain: lb, rules: make([]ruleSpec, 2)}},
	}
	asProgrammed := func() structure {
		b, l := base, lb
		return structure{table: true, sets: map[string]*nftables.Set{slotsMap: slots, rrSet: pick},
			chains: map[string]*nftables.Chain{"prerouting": &b, "lb": &l}, rules: map[string]int{"prerouting": 3, "lb": 2}}
	}
	otherHook := func(s structure) structure {
		c := *s.chains["prerouting"]
		c.Hooknum = nftables.ChainHookOutput
		s.chains["prerouting"] = &c
		return s
	}
	for _, tc := range []struct {
		name   string
		got    func(structure) structure
		forced map[string]bool
		want   structureDiff
	}{
		{"as programmed", func(s structure) structure { return s }, nil, structureDiff{}},
		{"table deleted", func(structure) structure { return structure{} }, nil, structureDiff{rebuild: "table missing"}},
		{"set deleted", func(s structure) structure { delete(s.sets, rrSet); return s }, nil, structureDiff{addSets: []string{rrSet}}},
		{"set of another kind", func(s structure) structure {
			s.sets[rrSet] = &nftables.Set{Table: tab, Name: rrSet, KeyType: nftables.TypeIP6Addr}
			return s
		}, nil, structureDiff{rebuild: "set pick_random of another kind"}},
		{"another's set", func(s structure) structure {
			s.sets["x"] = &nftables.Set{Name: "x"}
			return s
		}, nil, structureDiff{dropSets: []string{"x"}}},
		{"chain flushed", func(s structure) structure { s.rules["lb"] = 0; return s }, nil, structureDiff{rewriteChains: []string{"lb"}}},
		{"a rule added", func(s structure) structure { s.rules["prerouting"] = 4; return s }, nil, structureDiff{rewriteChains: []string{"prerouting"}}},
		{"a rule replaced in place", func(s structure) structure { return s }, map[string]bool{"lb": true}, structureDiff{rewriteChains: []string{"lb"}}},
		{"chain deleted", func(s structure) structure { delete(s.chains, "prerouting"); delete(s.rules, "prerouting"); return s },
			nil, structureDiff{newChains: []string{"prerouting"}}},
		{"chain hooked elsewhere", otherHook, nil, structureDiff{rebuild: "chain prerouting of another kind"}},
		{"another's chains", func(s structure) structure {
			s.chains["b"], s.chains["a"] = &nftables.Chain{Name: "b"}, &nftables.Chain{Name: "a"}
			return s
		}, nil, structureDiff{dropChains: []string{"a", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := diffStructure(want, tc.got(asProgrammed()), tc.forced); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("diff %+v, want %+v", got, tc.want)
			}
		})
	}
}

func el(key string, rest ...string) rawElem {
	e := rawElem{key: []byte(key)}
	for _, r := range rest {
		switch r[0] {
		case '=':
			e.val = []byte(r[1:])
		case '>':
			e.jump = r[1:]
		case '-':
			e.keyEnd = []byte(r[1:])
		case '|':
			e.end = true
		}
	}
	return e
}

func ids(els []rawElem) []string {
	var out []string
	for _, e := range els {
		out = append(out, fmt.Sprintf("%s=%s>%s-%s|%v", e.key, e.val, e.jump, e.keyEnd, e.end))
	}
	return out
}

// TestDiffElements: a set read whole against what was programmed:
// another's elements and those of other data go, the missing ones and
// those of other data come; an interval's end is another element than
// a start at the same address.
func TestDiffElements(t *testing.T) {
	byID := func(els ...rawElem) map[string]rawElem {
		m := map[string]rawElem{}
		for _, e := range els {
			m[e.id()] = e
		}
		return m
	}
	for _, tc := range []struct {
		name          string
		want          map[string]rawElem
		got           []rawElem
		wantDel, wAdd []rawElem
	}{
		{"same", byID(el("a", "=1"), el("b", ">persist_60")), []rawElem{el("b", ">persist_60"), el("a", "=1")}, nil, nil},
		{"removed", byID(el("a"), el("b"), el("c")), []rawElem{el("b")}, nil, []rawElem{el("a"), el("c")}},
		{"another's", byID(el("a")), []rawElem{el("a"), el("z")}, []rawElem{el("z")}, nil},
		{"data changed", byID(el("a", "=1")), []rawElem{el("a", "=2")}, []rawElem{el("a", "=2")}, []rawElem{el("a", "=1")}},
		{"jump changed", byID(el("a", ">persist_60")), []rawElem{el("a", ">persist_30")}, []rawElem{el("a", ">persist_30")}, []rawElem{el("a", ">persist_60")}},
		{"range end changed", byID(el("a", "-f")), []rawElem{el("a", "-g")}, []rawElem{el("a", "-g")}, []rawElem{el("a", "-f")}},
		{"interval end", byID(el("a"), el("b", "|")), []rawElem{el("a"), el("b")}, []rawElem{el("b")}, []rawElem{el("b", "|")}},
		{"emptied", byID(), []rawElem{el("b"), el("a")}, []rawElem{el("a"), el("b")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			del, add := diffElements(tc.want, tc.got)
			if !slices.Equal(ids(del), ids(tc.wantDel)) || !slices.Equal(ids(add), ids(tc.wAdd)) {
				t.Errorf("delete %v add %v, want delete %v add %v", ids(del), ids(add), ids(tc.wantDel), ids(tc.wAdd))
			}
		})
	}
}

// TestSettle: one element a notification named, as programmed and as the
// kernel holds it now.
func TestSettle(t *testing.T) {
	a1, a2 := el("a", "=1"), el("a", "=2")
	for _, tc := range []struct {
		name             string
		want, got        *rawElem
		wantDel, wantAdd *rawElem
	}{
		{name: "neither"},
		{name: "removed by another", want: &a1, wantAdd: &a1},
		{name: "added by another", got: &a2, wantDel: &a2},
		{name: "changed by another", want: &a1, got: &a2, wantDel: &a2, wantAdd: &a1},
		{name: "as programmed (put back already)", want: &a1, got: &a1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			del, add := settle(tc.want, tc.got)
			if !reflect.DeepEqual(del, tc.wantDel) || !reflect.DeepEqual(add, tc.wantAdd) {
				t.Errorf("settle = %v, %v; want %v, %v", del, add, tc.wantDel, tc.wantAdd)
			}
		})
	}
}

// nftMessage builds an nf_tables message of family fam from port pid.
func nftMessage(t *testing.T, typ int, pid uint32, fam byte, encode func(*netlink.AttributeEncoder)) netlink.Message {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	encode(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return netlink.Message{Header: netlink.Header{Type: nftMsg(typ), PID: pid}, Data: append([]byte{fam, 0, 0, 0}, b...)}
}

// TestParseEvent: the notifications' table, chain, set and elements
// (keys, ranges, data, verdicts, interval ends); other subsystems'
// messages are not events.
func TestParseEvent(t *testing.T) {
	verdict := func(ae *netlink.AttributeEncoder) error {
		ae.Nested(unix.NFTA_DATA_VERDICT, func(ae *netlink.AttributeEncoder) error {
			ae.ByteOrder = binary.BigEndian
			ae.Int32(unix.NFTA_VERDICT_CODE, unix.NFT_JUMP)
			ae.String(unix.NFTA_VERDICT_CHAIN, "persist_60")
			return nil
		})
		return nil
	}
	value := func(v string) func(*netlink.AttributeEncoder) error {
		return func(ae *netlink.AttributeEncoder) error { ae.Bytes(unix.NFTA_DATA_VALUE, []byte(v)); return nil }
	}
	elems := nftMessage(t, unix.NFT_MSG_DELSETELEM, 42, unix.NFPROTO_IPV4, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, "flowlb")
		ae.String(unix.NFTA_SET_ELEM_LIST_SET, "persist")
		ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(ae *netlink.AttributeEncoder) error {
			ae.Nested(unix.NFTA_LIST_ELEM, func(ae *netlink.AttributeEncoder) error {
				ae.Nested(unix.NFTA_SET_ELEM_KEY, value("k1"))
				ae.Nested(unix.NFTA_SET_ELEM_DATA, verdict)
				return nil
			})
			ae.Nested(unix.NFTA_LIST_ELEM, func(ae *netlink.AttributeEncoder) error {
				ae.Nested(unix.NFTA_SET_ELEM_KEY, value("k2"))
				ae.Nested(nftables.NFTA_SET_ELEM_KEY_END, value("k3"))
				ae.Nested(unix.NFTA_SET_ELEM_DATA, value("v"))
				return nil
			})
			ae.Nested(unix.NFTA_LIST_ELEM, func(ae *netlink.AttributeEncoder) error {
				ae.Nested(unix.NFTA_SET_ELEM_KEY, value("k4"))
				ae.ByteOrder = binary.BigEndian
				ae.Uint32(unix.NFTA_SET_ELEM_FLAGS, unix.NFT_SET_ELEM_INTERVAL_END)
				return nil
			})
			return nil
		})
	})
	for _, tc := range []struct {
		name string
		m    netlink.Message
		want event
		ok   bool
	}{
		{"table deleted", nftMessage(t, unix.NFT_MSG_DELTABLE, 7, unix.NFPROTO_IPV6, func(ae *netlink.AttributeEncoder) {
			ae.String(unix.NFTA_TABLE_NAME, "flowlb")
		}), event{typ: unix.NFT_MSG_DELTABLE, pid: 7, family: unix.NFPROTO_IPV6, table: "flowlb"}, true},
		{"rule added", nftMessage(t, unix.NFT_MSG_NEWRULE, 7, unix.NFPROTO_IPV4, func(ae *netlink.AttributeEncoder) {
			ae.String(unix.NFTA_RULE_TABLE, "flowlb")
			ae.String(unix.NFTA_RULE_CHAIN, "lb")
			ae.ByteOrder = binary.BigEndian
			ae.Uint64(unix.NFTA_RULE_HANDLE, 42)
		}), event{typ: unix.NFT_MSG_NEWRULE, pid: 7, family: unix.NFPROTO_IPV4, table: "flowlb", chain: "lb", handle: 42}, true},
		{"chain deleted", nftMessage(t, unix.NFT_MSG_DELCHAIN, 7, unix.NFPROTO_IPV4, func(ae *netlink.AttributeEncoder) {
			ae.String(unix.NFTA_CHAIN_TABLE, "other")
			ae.String(unix.NFTA_CHAIN_NAME, "acl")
		}), event{typ: unix.NFT_MSG_DELCHAIN, pid: 7, family: unix.NFPROTO_IPV4, table: "other", chain: "acl"}, true},
		{"set added", nftMessage(t, unix.NFT_MSG_NEWSET, 7, unix.NFPROTO_IPV4, func(ae *netlink.AttributeEncoder) {
			ae.String(unix.NFTA_SET_TABLE, "flowlb")
			ae.String(unix.NFTA_SET_NAME, "x")
		}), event{typ: unix.NFT_MSG_NEWSET, pid: 7, family: unix.NFPROTO_IPV4, table: "flowlb", set: "x"}, true},
		{"elements deleted", elems, event{typ: unix.NFT_MSG_DELSETELEM, pid: 42, family: unix.NFPROTO_IPV4, table: "flowlb", set: "persist",
			elems: []rawElem{el("k1", ">persist_60"), el("k2", "-k3", "=v"), el("k4", "|")}}, true},
		{"another subsystem", netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_CTNETLINK << 8)}, Data: []byte{2, 0, 0, 0}}, event{}, false},
		{"too short", netlink.Message{Header: netlink.Header{Type: nftMsg(unix.NFT_MSG_NEWTABLE)}, Data: []byte{2}}, event{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseEvent(tc.m)
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseEvent = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestSuspects: what notifications leave to check; past maxSuspectElems
// a set is read whole; a chain is written again whatever its count only
// while it still holds a rule another added.
func TestSuspects(t *testing.T) {
	s := newSuspects()
	if s.note(event{typ: unix.NFT_MSG_NEWGEN}) || !s.empty() {
		t.Fatal("a generation is something to check")
	}
	s.note(event{typ: unix.NFT_MSG_DELSETELEM, set: rrSet, elems: []rawElem{el("a")}})
	if s.structure || len(s.elems[rrSet]) != 1 {
		t.Fatalf("an element deleted: %+v", s)
	}
	s.note(event{typ: unix.NFT_MSG_DELRULE, chain: "lb", handle: 4})
	s.note(event{typ: unix.NFT_MSG_NEWRULE, chain: "prerouting", handle: 7})
	s.note(event{typ: unix.NFT_MSG_NEWSETELEM, set: slotsMap, elems: make([]rawElem, maxSuspectElems)})
	if !s.structure || !s.sets[slotsMap] || len(s.elems[slotsMap]) != 0 || len(s.elems[rrSet]) != 1 {
		t.Fatalf("after rules deleted and added, and too many elements: %+v", s)
	}
	for _, tc := range []struct {
		rules map[string][]uint64
		want  map[string]bool
	}{
		{map[string][]uint64{"prerouting": {1, 7, 9}, "lb": {2, 3}}, map[string]bool{"prerouting": true}},
		// The rule another added is gone (a repair came first): nothing.
		{map[string][]uint64{"prerouting": {11, 12}, "lb": {4}}, map[string]bool{}},
	} {
		if got := s.forced(tc.rules); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("forced(%v) = %v, want %v", tc.rules, got, tc.want)
		}
	}
	o := newSuspects()
	o.merge(s)
	if !reflect.DeepEqual(o, s) {
		t.Errorf("merged into an empty one: %+v, want %+v", o, s)
	}
}

// TestDropPort: the monitor's socket filter drops the messages of its
// own socket's port and keeps everyone else's.
func TestDropPort(t *testing.T) {
	const self = 0x01020304
	raw, err := dropPort(self)
	if err != nil {
		t.Fatal(err)
	}
	var ins []bpf.Instruction
	for _, r := range raw {
		ins = append(ins, r.Disassemble())
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	header := func(pid uint32) []byte {
		b := make([]byte, 20)
		binary.NativeEndian.PutUint32(b[12:], pid)
		return b
	}
	for pid, keep := range map[uint32]bool{self: false, 0x04030201: true, 0: true, 1234: true} {
		n, err := vm.Run(header(pid))
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) != keep {
			t.Errorf("port %#x: filter returned %d, want kept %v", pid, n, keep)
		}
	}
}
