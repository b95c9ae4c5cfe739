package nftables

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Text renderings of plans, elements and rules, for tests that compare
// whole expected dumps and for people reading them.

// String renders the plan one operation a line, table by table: the IPv4
// table's plain, each other's under a "# table" line when it changes
// anything.
func (p Plan) String() string {
	var b strings.Builder
	for _, t := range p.tables {
		s := t.String()
		if t.fam != ipv4 && s != "" {
			fmt.Fprintf(&b, "# table %s %s\n", t.fam.name, tableName)
		}
		b.WriteString(s)
	}
	return b.String()
}

// String renders the table's part one operation a line, in the order
// they are sent (elements of one set sorted, as their order within a
// message does not matter), then the bookkeeping it commits.
func (p tablePlan) String() string {
	var b strings.Builder
	for _, c := range p.newChains {
		for _, s := range classChainSets(nil, c.chain.Name) {
			fmt.Fprintf(&b, "add set %s\n", s.Name)
		}
		fmt.Fprintf(&b, "add chain %s\n", c.chain.Name)
		for _, r := range c.rules {
			fmt.Fprintf(&b, "add rule %s %s\n", c.chain.Name, ruleString(r.exprs))
		}
	}
	for _, c := range p.deletes {
		for _, e := range sortedElements(c) {
			fmt.Fprintf(&b, "delete element %s { %s }\n", c.set, p.fam.elementString(c.set, e))
		}
	}
	for _, c := range p.destroys {
		for _, e := range sortedElements(c) {
			fmt.Fprintf(&b, "destroy element %s { %s }\n", c.set, p.fam.elementString(c.set, e))
		}
	}
	for _, c := range p.adds {
		for _, e := range sortedElements(c) {
			fmt.Fprintf(&b, "add element %s { %s }\n", c.set, p.fam.elementString(c.set, e))
		}
	}
	for _, name := range p.goneChains {
		fmt.Fprintf(&b, "flush chain %s\ndelete chain %s\n", name, name)
		for _, s := range classChainSets(nil, name) {
			fmt.Fprintf(&b, "delete set %s\n", s.Name)
		}
	}
	p.writeBookkeeping(&b)
	return b.String()
}

// writeRefs renders the changed reference counts of addresses, sorted.
func writeRefs(b *strings.Builder, what string, delta, before map[netip.Addr]int) {
	addrs := make([]netip.Addr, 0, len(delta))
	for a, d := range delta {
		if d != 0 {
			addrs = append(addrs, a)
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, a := range addrs {
		fmt.Fprintf(b, "# %s %s: %d -> %d services\n", what, a, before[a], before[a]+delta[a])
	}
}

// writeBookkeeping renders the reference counts the plan changes, and the
// conntrack entries it forgets, as comments.
func (p tablePlan) writeBookkeeping(b *strings.Builder) {
	writeRefs(b, "backend", p.refs, p.refsBefore)
	writeRefs(b, "vip", p.vipRefs, p.vipRefsBefore)
	var chains []string
	for c, delta := range p.chainRefs {
		if delta != 0 {
			chains = append(chains, c)
		}
	}
	slices.Sort(chains)
	for _, c := range chains {
		before := p.chainRefsBefore[c]
		fmt.Fprintf(b, "# chain %s: %d -> %d services\n", c, before, before+p.chainRefs[c])
	}
	for _, l := range p.lost {
		fmt.Fprintf(b, "# conntrack: forget %s %s:%d -> %s\n", l.key.Protocol, l.key.VIP, l.key.Port, l.addr)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sortedElements(c setChange) []nftables.SetElement {
	els := slices.Clone(c.elements)
	// By key bytes: numeric order, as every field is big-endian but the
	// slot, whose values fit in its first byte.
	slices.SortFunc(els, func(a, b nftables.SetElement) int {
		return cmp.Or(bytes.Compare(a.Key, b.Key), bytes.Compare(a.KeyEnd, b.KeyEnd), cmp.Compare(btoi(a.IntervalEnd), btoi(b.IntervalEnd)))
	})
	return els
}

// field is how a 4-byte field of a key or of data reads.
type field int

const (
	fieldAddr field = iota
	fieldProto
	fieldPort
	fieldSlot // host byte order, as numgen and jhash write it
)

var svcFields = []field{fieldAddr, fieldProto, fieldPort}

// setFields are the key and data fields of each set.
var setFields = map[string]struct{ key, data []field }{
	slotsMap:      {key: []field{fieldAddr, fieldProto, fieldPort, fieldSlot}, data: []field{fieldAddr, fieldPort}},
	aclAllowSet:   {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr}},
	membersSet:    {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr, fieldPort}},
	keepClientSet: {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr, fieldPort}},
	memberNewSet:  {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr, fieldPort}},
	memberInSet:   {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr, fieldPort}},
	memberOutSet:  {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr, fieldPort}},
	boundSet:      {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr, fieldPort}},
	affinityMap:   {key: []field{fieldAddr, fieldProto, fieldPort, fieldAddr}, data: []field{fieldAddr, fieldPort}},
	hairpinSet:    {key: []field{fieldAddr, fieldAddr}},
	podNetsSet:    {key: []field{fieldAddr}},
	nodeAddrsSet:  {key: []field{fieldAddr}},
	vipsSet:       {key: []field{fieldAddr}},
}

// elementString renders an element as nft writes it: fields joined by
// " . ", ranges as start-end, map data after " : ".
func (fam *family) elementString(set string, e nftables.SetElement) string {
	f, ok := setFields[set]
	if !ok {
		f.key = svcFields
	}
	s := fam.fieldsString(f.key, e.Key, e.KeyEnd)
	if e.IntervalEnd {
		s += " (interval end)"
	}
	switch {
	case e.VerdictData != nil:
		s += " : " + verdictString(e.VerdictData.Kind, e.VerdictData.Chain)
	case len(e.Val) > 0 && f.data != nil:
		s += " : " + fam.fieldsString(f.data, e.Val, nil)
	case len(e.Val) > 0:
		kind, chain := decodeVerdict(e.Val)
		s += " : " + verdictString(expr.VerdictKind(kind), chain)
	}
	return s
}

// fieldsString renders fields of fam's table: addresses of its width,
// every other field 4 bytes.
func (fam *family) fieldsString(fields []field, b, end []byte) string {
	parts := make([]string, 0, len(fields))
	at := 0
	for _, f := range fields {
		n := 4
		if f == fieldAddr {
			n = int(fam.addrLen)
		}
		if len(b) < at+n {
			return fmt.Sprintf("%x (short)", b)
		}
		s := fieldString(f, b[at:at+n])
		if len(end) >= at+n {
			if e := fieldString(f, end[at:at+n]); e != s {
				s += "-" + e
			}
		}
		parts = append(parts, s)
		at += n
	}
	return strings.Join(parts, " . ")
}

func fieldString(f field, b []byte) string {
	switch f {
	case fieldAddr:
		a, _ := netip.AddrFromSlice(b)
		return a.String()
	case fieldProto:
		for p, n := range protoNum {
			if n == b[0] {
				return strings.ToLower(string(p))
			}
		}
		return fmt.Sprint(b[0])
	case fieldPort:
		return fmt.Sprint(binary.BigEndian.Uint16(b))
	}
	return fmt.Sprint(binaryutil.NativeEndian.Uint32(b))
}

func verdictString(kind expr.VerdictKind, chain string) string {
	switch kind {
	case expr.VerdictJump:
		return "jump " + chain
	case expr.VerdictGoto:
		return "goto " + chain
	case expr.VerdictDrop:
		return "drop"
	case expr.VerdictAccept:
		return "accept"
	case expr.VerdictReturn:
		return "return"
	}
	return fmt.Sprintf("verdict %d %s", kind, chain)
}

// chainsString renders chains and their rules, one rule a line.
func chainsString(chains []chainSpec) string {
	var b strings.Builder
	for _, c := range chains {
		fmt.Fprintf(&b, "chain %s", c.chain.Name)
		if c.chain.Hooknum != nil {
			fmt.Fprintf(&b, " (%s hook %d priority %d)", c.chain.Type, *c.chain.Hooknum, *c.chain.Priority)
		}
		b.WriteString("\n")
		for _, r := range c.rules {
			fmt.Fprintf(&b, "  %s\n", ruleString(r.exprs))
		}
	}
	return b.String()
}

// ruleString renders a rule's expressions in register terms, "rN" being
// register N, so that a rule reads as the kernel runs it.
func ruleString(exprs []expr.Any) string {
	parts := make([]string, len(exprs))
	for i, e := range exprs {
		parts[i] = exprString(e)
	}
	return strings.Join(parts, " ; ")
}

func exprString(e expr.Any) string {
	switch e := e.(type) {
	case *expr.Payload:
		if e.OperationType == expr.PayloadWrite {
			return fmt.Sprintf("%s set r%d csum %d at %d flags %d", payloadName(e), e.SourceRegister, e.CsumType, e.CsumOffset, e.CsumFlags)
		}
		return fmt.Sprintf("%s > r%d", payloadName(e), e.DestRegister)
	case *expr.Meta:
		if e.SourceRegister {
			return fmt.Sprintf("meta %s set r%d", metaName(e.Key), e.Register)
		}
		return fmt.Sprintf("meta %s > r%d", metaName(e.Key), e.Register)
	case *expr.Bitwise:
		return fmt.Sprintf("r%d = r%d & 0x%x ^ 0x%x", e.DestRegister, e.SourceRegister, e.Mask, e.Xor)
	case *expr.Cmp:
		return fmt.Sprintf("r%d %s 0x%x", e.Register, map[expr.CmpOp]string{expr.CmpOpEq: "==", expr.CmpOpNeq: "!=", expr.CmpOpLt: "<",
			expr.CmpOpLte: "<=", expr.CmpOpGt: ">", expr.CmpOpGte: ">="}[e.Op], e.Data)
	case *expr.Ct:
		name := map[expr.CtKey]string{expr.CtKeySTATE: "state", expr.CtKeySTATUS: "status", expr.CtKeyDIRECTION: "direction",
			expr.CtKeySRC: "saddr", expr.CtKeyDST: "daddr", expr.CtKeySRCIP: "ip saddr", expr.CtKeyDSTIP: "ip daddr",
			expr.CtKeySRCIP6: "ip6 saddr", expr.CtKeyDSTIP6: "ip6 daddr", expr.CtKeyPROTOSRC: "proto-src", expr.CtKeyPROTODST: "proto-dst"}[e.Key]
		if addr, _ := ctAddrKey(e.Key); addr || e.Key == expr.CtKeyPROTOSRC || e.Key == expr.CtKeyPROTODST {
			name = map[uint32]string{0: "original ", ctDirReply: "reply "}[e.Direction] + name
		}
		return fmt.Sprintf("ct %s > r%d", name, e.Register)
	case *expr.Immediate:
		return fmt.Sprintf("0x%x > r%d", e.Data, e.Register)
	case *expr.Numgen:
		return fmt.Sprintf("numgen random mod %d + %d > r%d", e.Modulus, e.Offset, e.Register)
	case *expr.Hash:
		return fmt.Sprintf("jhash r%d len %d mod %d seed 0x%x + %d > r%d", e.SourceRegister, e.Length, e.Modulus, e.Seed, e.Offset, e.DestRegister)
	case *expr.Lookup:
		return lookupString(e)
	case *expr.Dynset:
		return dynsetString(e)
	case *expr.NAT:
		return fmt.Sprintf("dnat to r%d : r%d", e.RegAddrMin, e.RegProtoMin)
	case *expr.Masq:
		return "masquerade"
	case *expr.Reject:
		if e.Type == unix.NFT_REJECT_TCP_RST {
			return "reject with tcp reset"
		}
		return fmt.Sprintf("reject with icmp code %d", e.Code)
	case *expr.Verdict:
		return verdictString(e.Kind, e.Chain)
	case *expr.Connlimit:
		if e.Flags&connlimitOver != 0 {
			return fmt.Sprintf("ct count over %d", e.Count)
		}
		return fmt.Sprintf("ct count %d", e.Count)
	}
	return fmt.Sprintf("%T%+v", e, e)
}

func payloadName(e *expr.Payload) string {
	switch {
	case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 12 && e.Len == 4:
		return "ip saddr"
	case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 16 && e.Len == 4:
		return "ip daddr"
	case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 8 && e.Len == 16:
		return "ip6 saddr"
	case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 24 && e.Len == 16:
		return "ip6 daddr"
	case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 0 && e.Len == 2:
		return "th sport"
	case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 && e.Len == 2:
		return "th dport"
	}
	return fmt.Sprintf("payload base %d offset %d length %d", e.Base, e.Offset, e.Len)
}

func metaName(k expr.MetaKey) string {
	switch k {
	case expr.MetaKeyL4PROTO:
		return "l4proto"
	case expr.MetaKeyMARK:
		return "mark"
	case expr.MetaKeyIIFTYPE:
		return "iiftype"
	}
	return fmt.Sprintf("key %d", k)
}

func lookupString(e *expr.Lookup) string {
	op := "@"
	if e.Invert {
		op = "!= @"
	}
	s := fmt.Sprintf("r%d %s%s", e.SourceRegister, op, e.SetName)
	switch {
	case e.IsDestRegSet && e.DestRegister == 0:
		s = fmt.Sprintf("r%d vmap @%s", e.SourceRegister, e.SetName)
	case e.IsDestRegSet:
		s += fmt.Sprintf(" > r%d", e.DestRegister)
	}
	return s
}

func dynsetString(e *expr.Dynset) string {
	op := map[uint32]string{unix.NFT_DYNSET_OP_ADD: "add", unix.NFT_DYNSET_OP_UPDATE: "update", dynsetOpDelete: "delete"}[e.Operation]
	s := fmt.Sprintf("%s @%s r%d", op, e.SetName, e.SrcRegKey)
	if e.SrcRegData != 0 {
		s += fmt.Sprintf(" : r%d", e.SrcRegData)
	}
	if e.Timeout != 0 {
		s += " timeout " + e.Timeout.String()
	}
	for _, x := range e.Exprs {
		s += " { " + exprString(x) + " }"
	}
	return s
}
