package nftables

import (
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/flows"
)

// The expressions the rules are made of, in register terms (see the
// register plan in schema.go).

func one(e ...expr.Any) []expr.Any { return e }

// svcKey loads daddr . l4proto . dport into registers 8–10.
func svcKey() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: regDaddr, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regProto},
		&expr.Payload{DestRegister: regDport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
}

// affKey loads daddr . l4proto . dport . saddr into registers 16–19.
func affKey() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: regAffKey, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regAffKey + 1},
		&expr.Payload{DestRegister: regAffKey + 2, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Payload{DestRegister: regAffKey + 3, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
	}
}

func load(reg uint32, base expr.PayloadBase, off, n uint32) []expr.Any {
	return one(&expr.Payload{DestRegister: reg, Base: base, Offset: off, Len: n})
}

func lookup(s *nftables.Set, reg uint32) []expr.Any {
	return one(&expr.Lookup{SourceRegister: reg, SetName: s.Name, SetID: s.ID})
}

// vmap jumps to the chain a verdict map names for the service in 8–10.
func vmap(s *nftables.Set) []expr.Any {
	return one(&expr.Lookup{SourceRegister: regDaddr, SetName: s.Name, SetID: s.ID, DestRegister: 0, IsDestRegSet: true})
}

// pickSlot computes the slot into register 11: random for ROUND_ROBIN, a
// jhash of the source address (and port) for the SOURCE_* algorithms.
func pickSlot(alg flows.Algorithm, offset uint32) []expr.Any {
	switch alg {
	case flows.RoundRobin:
		return one(&expr.Numgen{Register: regSlot, Modulus: Slots, Type: unix.NFT_NG_RANDOM, Offset: offset})
	case flows.SourceIP:
		return one(
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Hash{SourceRegister: regHashIn, DestRegister: regSlot, Length: 4, Modulus: Slots, Seed: hashSeed, Offset: offset, Type: expr.HashTypeJenkins})
	default:
		return one(
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Payload{DestRegister: regHashIn + 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			&expr.Hash{SourceRegister: regHashIn, DestRegister: regSlot, Length: 6, Modulus: Slots, Seed: hashSeed, Offset: offset, Type: expr.HashTypeJenkins})
	}
}

// dynsetOpDelete is NFT_DYNSET_OP_DELETE (Linux 5.18).
const dynsetOpDelete = 2

// connlimitOver is NFT_CONNLIMIT_F_INV: match when the count is over.
const connlimitOver = 1

// icmpPortUnreach is ICMP destination unreachable code 3.
const icmpPortUnreach = 3

// hashSeed is fixed so that every node, and every restart, hashes a
// client to the same slot.
const hashSeed = 0x5eed

// slotLookup: (daddr . l4proto . dport . slot) map @slots → registers 8, 9.
func slotLookup(s *nftables.Set) []expr.Any {
	return one(&expr.Lookup{SourceRegister: regDaddr, DestRegister: regData, IsDestRegSet: true, SetName: s.Name, SetID: s.ID})
}

func dnat(addr, port uint32) []expr.Any {
	return one(&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: addr, RegProtoMin: port, Specified: true})
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

// copyReg copies n bytes from register src to register dst.
func copyReg(dst, src, n uint32) []expr.Any {
	mask := make([]byte, n)
	for i := range mask {
		mask[i] = 0xff
	}
	return one(&expr.Bitwise{SourceRegister: src, DestRegister: dst, Len: n, Mask: mask, Xor: make([]byte, n)})
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

// writeDst writes register 8 into the destination address and register
// 9 into the destination port, updating the IPv4 header checksum, the
// transport checksum's pseudo-header part (skipped by the kernel where
// the protocol has none, or a UDP packet carries none) and the transport
// checksum over the port as the protocol p computes it.
func writeDst(p byte) []expr.Any {
	port := &expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: regProto, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2,
		CsumType: expr.CsumTypeInet, CsumOffset: 16}
	switch p {
	case unix.IPPROTO_UDP:
		port.CsumOffset = 6
	case unix.IPPROTO_SCTP:
		port.CsumType, port.CsumOffset = csumTypeSCTP, 8
	}
	return append(writeDaddr(), port)
}

// writeDaddr writes register 8 into the destination address, updating
// the IPv4 header checksum and the transport checksum's pseudo-header.
func writeDaddr() []expr.Any {
	return one(&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: regDaddr, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4,
		CsumType: expr.CsumTypeInet, CsumOffset: 10, CsumFlags: unix.NFT_PAYLOAD_L4CSUM_PSEUDOHDR})
}

// nodePortKey loads 0.0.0.0 . l4proto . dport into registers 8–10: a
// node-port service's key.
func nodePortKey() []expr.Any {
	return one(
		&expr.Immediate{Register: regDaddr, Data: make([]byte, 4)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regProto},
		&expr.Payload{DestRegister: regDport, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
}

// fromInside matches a source inside the pod networks.
func fromInside(podnets *nftables.Set) []expr.Any {
	return one(
		&expr.Payload{DestRegister: regMark + 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: regMark + 1, SetName: podnets.Name, SetID: podnets.ID})
}

// fromOutside matches a source outside the pod networks.
func fromOutside(podnets *nftables.Set) []expr.Any {
	return one(
		&expr.Payload{DestRegister: regMark + 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: regMark + 1, SetName: podnets.Name, SetID: podnets.ID, Invert: true})
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
// destination port (the service, for one this node translated) into
// registers 8–10.
func ctOrigKey() []expr.Any {
	return one(
		&expr.Ct{Register: regDaddr, Key: expr.CtKeyDST, Direction: 0},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: regProto},
		&expr.Ct{Register: regDport, Key: expr.CtKeyPROTODST, Direction: 0})
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

func rejectICMP() []expr.Any {
	return one(&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: icmpPortUnreach})
}

// localMarkClear: meta mark & localMark == 0.
func localMarkClear() []expr.Any {
	return one(&expr.Meta{Key: expr.MetaKeyMARK, Register: regMark},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(localMark), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regMark, Data: make([]byte, 4)})
}
