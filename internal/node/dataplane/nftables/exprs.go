package nftables

import (
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// The expressions the rules are made of, in register terms (see the
// register plans in family.go).

func one(e ...expr.Any) []expr.Any { return e }

// svcKey loads daddr . l4proto . dport from regDaddr.
func (f *family) svcKey() []expr.Any { return f.svcKeyAt(regDaddr) }

func (f *family) svcKeyAt(reg uint32) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddrOff, Len: f.addrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg + words(f.addrLen)},
		&expr.Payload{DestRegister: reg + words(f.addrLen) + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// affKeyAt loads daddr . l4proto . dport . saddr from reg: the affinity
// map's key.
func (f *family) affKeyAt(reg uint32) []expr.Any {
	return append(f.svcKeyAt(reg), f.saddr(reg+words(f.keyLen()))...)
}

// saddr and daddr load the packet's source and destination addresses.
func (f *family) saddr(reg uint32) []expr.Any {
	return load(reg, expr.PayloadBaseNetworkHeader, f.saddrOff, f.addrLen)
}

func (f *family) daddr(reg uint32) []expr.Any {
	return load(reg, expr.PayloadBaseNetworkHeader, f.daddrOff, f.addrLen)
}

func load(reg uint32, base expr.PayloadBase, off, n uint32) []expr.Any {
	return one(&expr.Payload{DestRegister: reg, Base: base, Offset: off, Len: n})
}

func lookup(s *nftables.Set, reg uint32) []expr.Any {
	return one(&expr.Lookup{SourceRegister: reg, SetName: s.Name, SetID: s.ID})
}

// count counts the packet in the counter set s under the key at reg,
// making the key's element if it has none: update @s { key }. The
// element's counter is the set's (the kernel gives a set update without
// expressions of its own the set's, and dumps it without them).
func count(s *nftables.Set, reg uint32) []expr.Any {
	return one(&expr.Dynset{SrcRegKey: reg, SetName: s.Name, SetID: s.ID, Operation: unix.NFT_DYNSET_OP_UPDATE})
}

// mark adds the key at reg to the dynamic set s, which has no counters:
// update @s { key }.
func mark(s *nftables.Set, reg uint32) []expr.Any { return count(s, reg) }

// vmap jumps to the chain a verdict map names for the service key at
// regDaddr.
func vmap(s *nftables.Set) []expr.Any {
	return one(&expr.Lookup{SourceRegister: regDaddr, SetName: s.Name, SetID: s.ID, DestRegister: 0, IsDestRegSet: true})
}

// pickSlot computes the slot into register 11: random for ROUND_ROBIN, a
// jhash of the source address (and port) for the SOURCE_* algorithms.
func (f *family) pickSlot(alg flows.Algorithm, offset uint32) []expr.Any {
	switch alg {
	case flows.RoundRobin:
		return one(&expr.Numgen{Register: f.regSlot, Modulus: Slots, Type: unix.NFT_NG_RANDOM, Offset: offset})
	case flows.SourceIP:
		return append(f.saddr(f.regHashIn),
			&expr.Hash{SourceRegister: f.regHashIn, DestRegister: f.regSlot, Length: f.addrLen, Modulus: Slots, Seed: hashSeed, Offset: offset, Type: expr.HashTypeJenkins})
	default:
		// The port takes a register of its own, whose last two bytes
		// the load zeroes: the hash covers them too, as nft's own
		// "jhash ip saddr . th sport" does, so that nft can split its
		// input back into address and port.
		return append(f.saddr(f.regHashIn),
			&expr.Payload{DestRegister: f.regHashIn + words(f.addrLen), Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			&expr.Hash{SourceRegister: f.regHashIn, DestRegister: f.regSlot, Length: f.addrLen + 4, Modulus: Slots, Seed: hashSeed, Offset: offset, Type: expr.HashTypeJenkins})
	}
}

// dynsetOpDelete is NFT_DYNSET_OP_DELETE (Linux 5.18).
const dynsetOpDelete = 2

// connlimitOver is NFT_CONNLIMIT_F_INV: match when the count is over.
const connlimitOver = 1

// hashSeed is fixed so that every node, and every restart, hashes a
// client to the same slot.
const hashSeed = 0x5eed

// slotLookup: (daddr . l4proto . dport . slot) map @slots → the backend's
// address at regDaddr, its port after it.
func slotLookup(s *nftables.Set) []expr.Any {
	return one(&expr.Lookup{SourceRegister: regDaddr, DestRegister: regData, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
}

func (f *family) dnat(addr, port uint32) []expr.Any {
	return one(&expr.NAT{Type: expr.NATTypeDestNAT, Family: f.nfproto, RegAddrMin: addr, RegProtoMin: port, Specified: true})
}

// markBit: meta mark set meta mark | bit.
func markBit(bit uint32) []expr.Any {
	return one(
		&expr.Meta{Key: expr.MetaKeyMARK, Register: regMark},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^bit), Xor: binaryutil.NativeEndian.PutUint32(bit)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: regMark})
}

// markSet: meta mark & bit != 0.
func markSet(bit uint32) []expr.Any {
	return one(&expr.Meta{Key: expr.MetaKeyMARK, Register: regMark},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bit), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regMark, Data: make([]byte, 4)})
}

// l4proto matches the packet's transport protocol.
func l4proto(p byte) []expr.Any {
	return one(
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regMark},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: []byte{p}})
}

// csumTypeSCTP is NFT_PAYLOAD_CSUM_SCTP (Linux 5.8): the CRC32c over the
// packet, recomputed.
const csumTypeSCTP expr.PayloadCsumType = 2

// writeDst writes the backend at regDaddr into the destination address
// and port, updating the IPv4 header checksum, the
// transport checksum's pseudo-header part (skipped by the kernel where
// the protocol has none, or a UDP packet carries none) and the transport
// checksum over the port as the protocol p computes it.
func (f *family) writeDst(p byte) []expr.Any { return f.writeDstFrom(p, regDaddr) }

// writeDstFrom is writeDst of the backend at reg: its address, its port
// right after it.
func (f *family) writeDstFrom(p byte, reg uint32) []expr.Any {
	port := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg + words(f.addrLen), Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2,
		CsumType: expr.CsumTypeInet, CsumOffset: 16}
	switch p {
	case unix.IPPROTO_UDP:
		port.CsumOffset = 6
	case unix.IPPROTO_SCTP:
		port.CsumType, port.CsumOffset = csumTypeSCTP, 8
	}
	return append(f.writeDaddrFrom(reg), port)
}

// writeDaddr writes regDaddr into the destination address, updating the
// transport checksum's pseudo-header and, for IPv4, the header checksum.
// IPv6 has no header checksum, but the library sends the pseudo-header
// flag only with a checksum type: its "header checksum" is pointed at
// the destination address itself, which the kernel updates first and
// then overwrites with the new address (nft_payload_set_eval), so that
// only the pseudo-header update remains.
func (f *family) writeDaddr() []expr.Any { return f.writeDaddrFrom(regDaddr) }

func (f *family) writeDaddrFrom(reg uint32) []expr.Any {
	return one(&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddrOff, Len: f.addrLen,
		CsumType: expr.CsumTypeInet, CsumOffset: f.daddrCsum, CsumFlags: unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR})
}

// dport loads the packet's destination port.
func (f *family) dport(reg uint32) []expr.Any {
	return load(reg, expr.PayloadBaseTransportHeader, 2, 2)
}

// zeroAddr loads the unspecified address (0.0.0.0, ::).
func (f *family) zeroAddr(reg uint32) []expr.Any {
	return one(&expr.Immediate{Register: reg, Data: make([]byte, f.addrLen)})
}

// nodePortKey loads <any> . l4proto . dport from regDaddr: a node-port
// service's key. The unspecified address is the packet's destination
// masked to nothing ("ip daddr & 0.0.0.0"), not an immediate: nft can
// name a concatenation's part only by the expression that loaded it,
// and an immediate has no type.
func (f *family) nodePortKey() []expr.Any {
	return one(
		&expr.Payload{DestRegister: regDaddr, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddrOff, Len: f.addrLen},
		&expr.Bitwise{SourceRegister: regDaddr, DestRegister: regDaddr, Len: f.addrLen, Mask: make([]byte, f.addrLen), Xor: make([]byte, f.addrLen)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: f.regProto},
		&expr.Payload{DestRegister: f.regDport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
}

// fromInside matches a source inside the pod networks.
func (f *family) fromInside(podnets *nftables.Set) []expr.Any {
	return append(f.saddr(f.regScratch), &expr.Lookup{SourceRegister: f.regScratch, SetName: podnets.Name, SetID: podnets.ID})
}

// fromOutside matches a source outside the pod networks.
func (f *family) fromOutside(podnets *nftables.Set) []expr.Any {
	return append(f.saddr(f.regScratch), &expr.Lookup{SourceRegister: f.regScratch, SetName: podnets.Name, SetID: podnets.ID, Invert: true})
}

// ctBit matches a conntrack state or status bit.
func ctBit(key expr.CtKey, bit uint32) []expr.Any {
	return one(
		&expr.Ct{Register: regMark, Key: key},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bit), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regMark, Data: make([]byte, 4)})
}

// ctReply matches a packet of a connection's reply direction.
func ctReply() []expr.Any {
	return one(&expr.Ct{Register: regMark, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: []byte{ctDirReply}})
}

// notLoopback, in acl, leaves out a packet that came in on loopback: the
// node sent it, and acl_out has counted it already. (acl_out: nothing.)
func notLoopback(chain string) []expr.Any {
	if chain != aclChain {
		return nil
	}
	return one(&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: regMark},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: regMark, Data: binaryutil.NativeEndian.PutUint16(unix.ARPHRD_LOOPBACK)})
}

// ctDirReply is IP_CT_DIR_REPLY.
const ctDirReply = 1

// ctOrigKey loads the connection's original destination . l4proto .
// destination port (the service, for one this node translated) from
// regDaddr.
func (f *family) ctOrigKey() []expr.Any {
	return one(
		&expr.Ct{Register: regDaddr, Key: f.ctAddr(true), Direction: 0},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: f.regProto},
		&expr.Ct{Register: f.regDport, Key: expr.CtKeyPROTODST, Direction: 0})
}

// ctOrigService loads the connection's original destination and port
// (the service as the client addressed it) at reg: a backend's place.
func (f *family) ctOrigService(reg uint32) []expr.Any {
	return append(one(&expr.Ct{Register: reg, Key: f.ctAddr(true), Direction: 0}), f.ctOrigPort(reg+words(f.addrLen))...)
}

// ctOrigPort loads the connection's original destination port at reg.
func (f *family) ctOrigPort(reg uint32) []expr.Any {
	return one(&expr.Ct{Register: reg, Key: expr.CtKeyPROTODST, Direction: 0})
}

// memberKey loads the connection's service (ctOrigKey) . backend
// address . backend port from regDaddr from the packet: the backend is
// the destination of a packet from the client past the translation
// (reply false: the bind chains) and the source of one to it before its
// source is translated back (reply true: the acl chains).
func (f *family) memberKey(reply bool) []expr.Any {
	if reply {
		return append(f.ctOrigKey(), append(f.saddr(f.regSlot), load(f.regSlot+words(f.addrLen), expr.PayloadBaseTransportHeader, 0, 2)...)...)
	}
	return append(f.ctOrigKey(), append(f.daddr(f.regSlot), load(f.regSlot+words(f.addrLen), expr.PayloadBaseTransportHeader, 2, 2)...)...)
}

// ctMemberKey loads the connection's service (ctOrigKey) . backend
// address . backend port from regDaddr from conntrack alone, for a
// packet from the client before its destination is translated: the
// backend is the source of the reply tuple. A first packet's reply
// tuple is still the original one inverted (the service itself), so
// its key names no backend.
func (f *family) ctMemberKey() []expr.Any {
	return append(f.ctOrigKey(),
		&expr.Ct{Register: f.regSlot, Key: f.ctAddr(false), Direction: ctDirReply},
		&expr.Ct{Register: f.regSlot + words(f.addrLen), Key: expr.CtKeyPROTOSRC, Direction: ctDirReply})
}

// ctAddr is the ct key of the family's fixed-width address
// (NFT_CT_SRC_IP, NFT_CT_DST_IP and their IPv6 twins), what nft itself
// emits for "ct original ip daddr": the generic NFT_CT_SRC and
// NFT_CT_DST have a width only beside a network-layer match, so that
// nft's reader cannot split a concatenation holding one (it aborts).
func (f *family) ctAddr(dst bool) expr.CtKey {
	switch {
	case f.addrLen == 4 && dst:
		return expr.CtKeyDSTIP
	case f.addrLen == 4:
		return expr.CtKeySRCIP
	case dst:
		return expr.CtKeyDSTIP6
	default:
		return expr.CtKeySRCIP6
	}
}

// ctAddrKey reports whether a ct key loads an address of a tuple, and
// which one.
func ctAddrKey(k expr.CtKey) (addr, dst bool) {
	switch k {
	case expr.CtKeySRCIP, expr.CtKeySRCIP6, expr.CtKeySRC:
		return true, false
	case expr.CtKeyDSTIP, expr.CtKeyDSTIP6, expr.CtKeyDST:
		return true, true
	}
	return false, false
}

// accept ends a base chain, here after a counter's lookup hit, so
// that the fallback after it is not counted too.
func accept() []expr.Any { return one(&expr.Verdict{Kind: expr.VerdictAccept}) }

// ctOriginal matches a packet of a connection's original direction.
func ctOriginal() []expr.Any {
	return one(&expr.Ct{Register: regMark, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: []byte{0}})
}

func goTo(ch string) []expr.Any { return one(&expr.Verdict{Kind: expr.VerdictGoto, Chain: ch}) }

func tcpOnly() []expr.Any {
	return one(
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regMark},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: []byte{unix.IPPROTO_TCP}})
}

func rejectTCP() []expr.Any {
	return one(&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
}

// rejectICMP answers ICMP (ICMPv6) port unreachable.
func (f *family) rejectICMP() []expr.Any {
	return one(&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: f.portUnreach})
}

// localMarkClear: meta mark & localMark == 0.
func localMarkClear() []expr.Any { return markClear(localMark) }

// markClear: meta mark & bit == 0.
func markClear(bit uint32) []expr.Any {
	return one(&expr.Meta{Key: expr.MetaKeyMARK, Register: regMark},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bit), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: make([]byte, 4)})
}
