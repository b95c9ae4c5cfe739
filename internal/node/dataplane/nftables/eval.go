package nftables

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The evaluator runs the generated rules over one packet as the kernel
// does: registers of the kernel's layout, expressions in order, a rule
// ending at the first expression that does not match, jumps and gotos,
// and NAT as a terminal verdict of its chain.

// verdictKind is how a chain, rule or expression ends.
type verdictKind int

const (
	verdictNone   verdictKind = iota // ran to its end: next rule, or the chain's policy (accept)
	verdictReturn                    // back to the chain that jumped here
	verdictAccept
	verdictDrop
	verdictRefuse // reject: TCP reset or ICMP port unreachable
	verdictDNAT
	verdictMasq
)

func (k verdictKind) terminal() bool { return k >= verdictAccept }

// result is a verdict and the reason of the rule that gave it.
type result struct {
	kind   verdictKind
	reason string
}

// packetState is what the rules read and write of a connection's first
// packet.
type packetState struct {
	saddr, daddr    netip.Addr
	sport, dport    uint16
	proto           byte
	mark            uint32
	ctState, status uint32
	// rewritten: a rule wrote the destination; origDaddr and origDport
	// are the connection's original destination, which a translation is
	// told from.
	rewritten bool
	origDaddr netip.Addr
	origDport uint16
}

// run is one packet's way through the rules.
type run struct {
	fam    *family
	chains map[string]chainSpec
	sets   *setReader
	pkt    packetState
	// regs is the kernel's register file: the verdict register, then
	// four 16-byte registers that the sixteen 32-bit ones overlap.
	regs [80]byte
	// numgen picks the value of a random number generator; modulus is
	// the last one's range, 0 when none ran.
	numgen  func(modulus uint32) uint32
	modulus uint32
	depth   int
	// What the rules did on the way.
	limit       int
	persistence time.Duration
}

const maxJumpDepth = 16

func regOffset(reg uint32) (int, error) {
	switch {
	case reg >= 1 && reg <= 4:
		return int(reg) * 16, nil
	case reg >= 8 && reg <= 23:
		return 16 + int(reg-8)*4, nil
	}
	return 0, fmt.Errorf("register %d", reg)
}

// reg is the n bytes at register r.
func (r *run) reg(reg uint32, n int) ([]byte, error) {
	off, err := regOffset(reg)
	if err != nil || off+n > len(r.regs) {
		return nil, fmt.Errorf("register %d length %d out of range", reg, n)
	}
	return r.regs[off : off+n], nil
}

// store writes b to register r, zeroing the rest of its last 32-bit word
// as the kernel does.
func (r *run) store(reg uint32, b []byte) error {
	dst, err := r.reg(reg, (len(b)+3)/4*4)
	if err != nil {
		return err
	}
	clear(dst)
	copy(dst, b)
	return nil
}

func (r *run) store32(reg uint32, v uint32) error {
	return r.store(reg, binaryutil.NativeEndian.PutUint32(v))
}

// evalChain runs a chain's rules until one gives a verdict.
func (r *run) evalChain(name string) (result, error) {
	spec, ok := r.chains[name]
	if !ok {
		return result{}, fmt.Errorf("no chain %s", name)
	}
	if r.depth++; r.depth > maxJumpDepth {
		return result{}, fmt.Errorf("jumps nest deeper than %d at chain %s", maxJumpDepth, name)
	}
	defer func() { r.depth-- }()
	for _, rl := range spec.rules {
		res, err := r.evalRule(rl)
		if err != nil {
			return result{}, fmt.Errorf("chain %s: %w", name, err)
		}
		if res.kind == verdictReturn {
			return result{}, nil
		}
		if res.kind.terminal() {
			if res.reason == "" {
				res.reason = rl.reason
			}
			return res, nil
		}
	}
	return result{}, nil
}

// evalRule runs a rule's expressions until one does not match or gives a
// verdict.
func (r *run) evalRule(rl ruleSpec) (result, error) {
	for _, e := range rl.exprs {
		next, res, err := r.eval(e)
		if err != nil || !next {
			return res, err
		}
	}
	return result{}, nil
}

// eval runs one expression: next says whether the rule goes on; res is
// the verdict when it does not.
func (r *run) eval(e expr.Any) (next bool, res result, err error) {
	switch e := e.(type) {
	case *expr.Payload:
		return r.payload(e)
	case *expr.Meta:
		return r.meta(e)
	case *expr.Bitwise:
		return r.bitwise(e)
	case *expr.Cmp:
		return r.cmp(e)
	case *expr.Ct:
		return r.ct(e)
	case *expr.Immediate:
		return true, result{}, r.store(e.Register, e.Data)
	case *expr.Numgen:
		return r.numgenExpr(e)
	case *expr.Hash:
		return r.hash(e)
	case *expr.Lookup:
		return r.lookup(e)
	case *expr.Dynset:
		return r.dynset(e)
	case *expr.NAT:
		return r.nat(e)
	case *expr.Masq:
		return false, result{kind: verdictMasq}, nil
	case *expr.Reject:
		return false, result{kind: verdictRefuse}, nil
	case *expr.Verdict:
		res, err := r.verdict(e.Kind, e.Chain)
		return false, res, err
	}
	return false, result{}, fmt.Errorf("cannot evaluate %T", e)
}

// headers are the packet's IP (IPv6) and transport headers, as far as
// rules read them.
func (r *run) headers() (network, transport []byte) {
	network = make([]byte, r.fam.daddrOff+r.fam.addrLen)
	if r.fam.addrLen == 4 {
		network[0], network[9] = 0x45, r.pkt.proto
	} else {
		network[0], network[6] = 0x60, r.pkt.proto
	}
	copy(network[r.fam.saddrOff:], r.pkt.saddr.AsSlice())
	copy(network[r.fam.daddrOff:], r.pkt.daddr.AsSlice())
	transport = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, r.pkt.sport), r.pkt.dport)
	return network, transport
}

func (r *run) payload(e *expr.Payload) (bool, result, error) {
	if e.OperationType == expr.PayloadWrite {
		return r.payloadWrite(e)
	}
	network, transport := r.headers()
	h := map[expr.PayloadBase][]byte{expr.PayloadBaseNetworkHeader: network, expr.PayloadBaseTransportHeader: transport}[e.Base]
	if e.OperationType != expr.PayloadLoad || int(e.Offset+e.Len) > len(h) {
		return false, result{}, fmt.Errorf("cannot evaluate payload %+v", *e)
	}
	return true, result{}, r.store(e.DestRegister, h[e.Offset:e.Offset+e.Len])
}

// payloadWrite writes the destination address or port; the checksums
// are the kernel's business.
func (r *run) payloadWrite(e *expr.Payload) (bool, result, error) {
	b, err := r.reg(e.SourceRegister, int(e.Len))
	if err != nil {
		return false, result{}, err
	}
	switch {
	case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == r.fam.daddrOff && e.Len == r.fam.addrLen:
		r.pkt.daddr, _ = netip.AddrFromSlice(b)
	case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 && e.Len == 2:
		r.pkt.dport = binary.BigEndian.Uint16(b)
	default:
		return false, result{}, fmt.Errorf("cannot evaluate payload write %+v", *e)
	}
	r.pkt.rewritten = true
	return true, result{}, nil
}

func (r *run) meta(e *expr.Meta) (bool, result, error) {
	switch {
	case e.Key == expr.MetaKeyL4PROTO && !e.SourceRegister:
		return true, result{}, r.store(e.Register, []byte{r.pkt.proto})
	case e.Key == expr.MetaKeyMARK && !e.SourceRegister:
		return true, result{}, r.store32(e.Register, r.pkt.mark)
	case e.Key == expr.MetaKeyIIFTYPE && !e.SourceRegister:
		// A traced packet comes from a network, not loopback.
		return true, result{}, r.store(e.Register, binaryutil.NativeEndian.PutUint16(unix.ARPHRD_ETHER))
	case e.Key == expr.MetaKeyMARK:
		b, err := r.reg(e.Register, 4)
		if err == nil {
			r.pkt.mark = binaryutil.NativeEndian.Uint32(b)
		}
		return true, result{}, err
	}
	return false, result{}, fmt.Errorf("cannot evaluate meta key %d", e.Key)
}

func (r *run) bitwise(e *expr.Bitwise) (bool, result, error) {
	src, err := r.reg(e.SourceRegister, int(e.Len))
	if err != nil || len(e.Mask) != int(e.Len) || len(e.Xor) != int(e.Len) {
		return false, result{}, fmt.Errorf("bitwise %+v: %v", *e, err)
	}
	out := make([]byte, e.Len)
	for i := range out {
		out[i] = src[i]&e.Mask[i] ^ e.Xor[i]
	}
	return true, result{}, r.store(e.DestRegister, out)
}

func (r *run) cmp(e *expr.Cmp) (bool, result, error) {
	b, err := r.reg(e.Register, len(e.Data))
	if err != nil {
		return false, result{}, err
	}
	c := bytes.Compare(b, e.Data)
	match := map[expr.CmpOp]bool{expr.CmpOpEq: c == 0, expr.CmpOpNeq: c != 0, expr.CmpOpLt: c < 0,
		expr.CmpOpLte: c <= 0, expr.CmpOpGt: c > 0, expr.CmpOpGte: c >= 0}[e.Op]
	return match, result{}, nil
}

func (r *run) ct(e *expr.Ct) (bool, result, error) {
	switch {
	case e.SourceRegister:
	case e.Key == expr.CtKeySTATE:
		return true, result{}, r.store32(e.Register, r.pkt.ctState)
	case e.Key == expr.CtKeySTATUS:
		return true, result{}, r.store32(e.Register, r.pkt.status)
	case e.Key == expr.CtKeyDIRECTION:
		// A trace follows a first packet: the original direction.
		return true, result{}, r.store(e.Register, []byte{0})
	}
	addr, dst := ctAddrKey(e.Key)
	switch {
	case e.SourceRegister:
	// The original tuple: as the client sent it.
	case addr && dst && e.Direction == 0:
		return true, result{}, r.store(e.Register, r.pkt.origDaddr.AsSlice())
	case e.Key == expr.CtKeyPROTODST && e.Direction == 0:
		return true, result{}, r.store(e.Register, binary.BigEndian.AppendUint16(nil, r.pkt.origDport))
	// The reply tuple of a first packet's connection, not yet
	// translated: the original one inverted, from the service.
	case addr && !dst && e.Direction == ctDirReply:
		return true, result{}, r.store(e.Register, r.pkt.origDaddr.AsSlice())
	case e.Key == expr.CtKeyPROTOSRC && e.Direction == ctDirReply:
		return true, result{}, r.store(e.Register, binary.BigEndian.AppendUint16(nil, r.pkt.origDport))
	}
	return false, result{}, fmt.Errorf("cannot evaluate ct key %d", e.Key)
}

func (r *run) numgenExpr(e *expr.Numgen) (bool, result, error) {
	if e.Type != unix.NFT_NG_RANDOM || e.Modulus == 0 {
		return false, result{}, fmt.Errorf("cannot evaluate numgen type %d modulus %d", e.Type, e.Modulus)
	}
	r.modulus = e.Modulus
	return true, result{}, r.store32(e.Register, r.numgen(e.Modulus)%e.Modulus+e.Offset)
}

// hash is nft's jhash: the kernel's jhash over the source registers'
// bytes, scaled to the modulus as reciprocal_scale does.
func (r *run) hash(e *expr.Hash) (bool, result, error) {
	if e.Type != expr.HashTypeJenkins || e.Modulus == 0 {
		return false, result{}, fmt.Errorf("cannot evaluate hash type %d modulus %d", e.Type, e.Modulus)
	}
	in, err := r.reg(e.SourceRegister, int(e.Length))
	if err != nil {
		return false, result{}, err
	}
	h := uint32(uint64(jhash(in, e.Seed)) * uint64(e.Modulus) >> 32)
	return true, result{}, r.store32(e.DestRegister, h+e.Offset)
}

func (r *run) lookup(e *expr.Lookup) (bool, result, error) {
	idx, err := r.sets.index(e.SetName)
	if err != nil {
		return false, result{}, err
	}
	key, err := r.reg(e.SourceRegister, int(idx.decl.KeyType.Bytes))
	if err != nil {
		return false, result{}, err
	}
	el, found := idx.find(key)
	if e.Invert || !found || !e.IsDestRegSet {
		return found != e.Invert, result{}, nil
	}
	if e.DestRegister == 0 {
		kind, chain := decodeVerdict(el.Val)
		if el.VerdictData != nil {
			kind, chain = int32(el.VerdictData.Kind), el.VerdictData.Chain
		}
		res, err := r.verdict(expr.VerdictKind(kind), chain)
		return false, res, err
	}
	n := int(idx.decl.DataType.Bytes)
	if len(el.Val) < n {
		return false, result{}, fmt.Errorf("%s element %x: %d bytes of data, want %d", e.SetName, el.Key, len(el.Val), n)
	}
	return true, result{}, r.store(e.DestRegister, el.Val[:n])
}

// dynset notes what a trace can tell of a set update: a persistence
// timeout, a connection limit (assumed not reached: a trace cannot count
// connections). It writes nothing.
func (r *run) dynset(e *expr.Dynset) (bool, result, error) {
	if e.Operation == unix.NFT_DYNSET_OP_UPDATE && e.Timeout > 0 {
		r.persistence = e.Timeout
	}
	for _, x := range e.Exprs {
		if _, ok := x.(*expr.Counter); ok {
			continue // a counter counts; it always matches
		}
		c, ok := x.(*expr.Connlimit)
		if !ok {
			return false, result{}, fmt.Errorf("cannot evaluate %T in a set update", x)
		}
		r.limit = int(c.Count)
		// Under the limit, "ct count over N" does not match.
		if c.Flags&connlimitOver != 0 {
			return false, result{}, nil
		}
	}
	return true, result{}, nil
}

func (r *run) nat(e *expr.NAT) (bool, result, error) {
	if e.Type != expr.NATTypeDestNAT || e.Family != r.fam.nfproto {
		return false, result{}, fmt.Errorf("cannot evaluate NAT %+v", *e)
	}
	addr, err := r.reg(e.RegAddrMin, int(r.fam.addrLen))
	if err != nil {
		return false, result{}, err
	}
	port, err := r.reg(e.RegProtoMin, 2)
	if err != nil {
		return false, result{}, err
	}
	a, _ := netip.AddrFromSlice(addr)
	to := netip.AddrPortFrom(a, binary.BigEndian.Uint16(port))
	if to.Addr() != r.pkt.origDaddr || to.Port() != r.pkt.origDport {
		r.pkt.status |= ipsDstNAT
	}
	r.pkt.daddr, r.pkt.dport = to.Addr(), to.Port()
	return false, result{kind: verdictDNAT}, nil
}

// verdict applies a verdict: a jump returns to the next rule when its
// chain ends, a goto to the chain before.
func (r *run) verdict(kind expr.VerdictKind, chain string) (result, error) {
	switch kind {
	case expr.VerdictAccept:
		return result{kind: verdictAccept}, nil
	case expr.VerdictDrop:
		return result{kind: verdictDrop}, nil
	case expr.VerdictReturn:
		return result{kind: verdictReturn}, nil
	case expr.VerdictJump, expr.VerdictGoto:
		res, err := r.evalChain(chain)
		if err != nil || res.kind.terminal() {
			return res, err
		}
		if kind == expr.VerdictGoto {
			return result{kind: verdictReturn}, nil
		}
		return result{}, nil
	}
	return result{}, fmt.Errorf("cannot evaluate verdict %d", kind)
}
