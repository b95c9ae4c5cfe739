package nftables

import (
	"net/netip"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// family is what differs between the IPv4 table (ip flowlb) and its IPv6
// twin (ip6 flowlb): the header offsets and widths of addresses, the
// sets' address type, and the register plan, since an IPv6 address takes
// four 32-bit registers where an IPv4 one takes one. The rules, sets and
// footprints are otherwise the same, generated from the same code.
type family struct {
	name  string // as nft names the table's family
	table nftables.TableFamily
	// addrLen is an address's width in bytes (and in keys); saddrOff and
	// daddrOff are the addresses' offsets in the network header.
	addrLen            uint32
	saddrOff, daddrOff uint32
	addrType           nftables.SetDatatype
	// nfproto is the NAT expressions' family; af, conntrack's.
	nfproto uint32
	af      uint8
	// any is the unspecified address: node ports' VIP, and the whole
	// address space (podnets before SetPodNetworks).
	any netip.Addr
	// portUnreach is the ICMP (ICMPv6) destination-unreachable code a
	// refused connection that is not TCP gets.
	portUnreach uint8
	// daddrCsum is the header checksum a destination rewrite updates
	// (writeDaddr; IPv6 has none: its destination address itself).
	daddrCsum uint32
	// Registers (NFT_REG32_00 = 8 … 23; the 16-byte register 1 overlaps
	// 8–11 and receives a slot's address . port): the service key
	// daddr . l4proto . dport from regDaddr, the slot (or a source
	// address) right after it at regSlot, jhash's input at regHashIn,
	// and regScratch for a single address looked up at once.
	regProto, regDport, regSlot, regHashIn, regScratch uint32
}

const regDaddr, regData, regMark = 8, 1, 20

var (
	ipv4 = &family{name: "ip", table: nftables.TableFamilyIPv4, addrLen: 4, saddrOff: 12, daddrOff: 16, addrType: nftables.TypeIPAddr,
		nfproto: unix.NFPROTO_IPV4, af: unix.AF_INET, any: netip.IPv4Unspecified(), portUnreach: 3 /* ICMP_PORT_UNREACH */, daddrCsum: 10,
		regProto: 9, regDport: 10, regSlot: 11, regHashIn: 12, regScratch: 21}
	ipv6 = &family{name: "ip6", table: nftables.TableFamilyIPv6, addrLen: 16, saddrOff: 8, daddrOff: 24, addrType: nftables.TypeIP6Addr,
		nfproto: unix.NFPROTO_IPV6, af: unix.AF_INET6, any: netip.IPv6Unspecified(), portUnreach: 4 /* ICMPV6_PORT_UNREACH */, daddrCsum: 24,
		regProto: 12, regDport: 13, regSlot: 14, regHashIn: 15, regScratch: 16}
	// families are the tables, in the order they are programmed.
	families = []*family{ipv4, ipv6}
)

// familyOf is the family whose table carries address a (nil: none).
func familyOf(a netip.Addr) *family {
	switch {
	case a.Is4():
		return ipv4
	case a.Is6() && !a.Is4In6():
		return ipv6
	}
	return nil
}

// carries reports whether the table of f carries address a.
func (f *family) carries(a netip.Addr) bool {
	g := familyOf(a)
	return g != nil && g.addrLen == f.addrLen
}

// words is how many 32-bit registers n bytes take.
func words(n uint32) uint32 { return (n + 3) / 4 }

// keyLen is a service key's width: daddr . l4proto . dport.
func (f *family) keyLen() uint32 { return f.addrLen + 8 }

// backendLen is a backend's width: address . port.
func (f *family) backendLen() uint32 { return f.addrLen + 4 }

// regBackendPort is where a backend's port lies once the backend is at
// regDaddr (after a slot lookup into regData).
func (f *family) regBackendPort() uint32 { return regDaddr + words(f.addrLen) }

// prefix is the whole address space of the family.
func (f *family) prefix() netip.Prefix { return netip.PrefixFrom(f.any, 0) }
