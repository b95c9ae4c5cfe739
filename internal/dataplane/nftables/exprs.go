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

// markLocal: meta mark set meta mark | localMark.
func markLocal() []expr.Any {
	return one(
		&expr.Meta{Key: expr.MetaKeyMARK, Register: regMark},
		&expr.Bitwise{SourceRegister: regMark, DestRegister: regMark, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^uint32(localMark)), Xor: binaryutil.NativeEndian.PutUint32(localMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: regMark})
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
