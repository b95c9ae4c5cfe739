package ebpf

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/flows"
)

// Slots is the length of every service's lookup table (SLOTS in
// bpf/socklb.c): the nftables data plane's, so that both spread alike.
const Slots = 61

// Service flags and algorithms, as bpf/socklb.c reads them.
const (
	flagRefuse = 1

	algRandom = 0 // a random slot per connection
	algNetns  = 1 // the client's network namespace: its address
	algSocket = 2 // the socket: its address and port
)

type (
	svcKey = socklbSvcKey
	svcVal = socklbSvcVal
)

// algs maps the flow model's algorithms to the program's. For a local
// socket the source port is not chosen yet at connect(), so
// SOURCE_IP_PORT hashes the socket (one choice per connection, as the
// port would give), and SOURCE_IP the network namespace (a pod's or the
// host's: one address).
var algs = map[flows.Algorithm]uint32{flows.RoundRobin: algRandom, flows.SourceIP: algNetns, flows.SourceIPPort: algSocket}

var protos = map[flows.Protocol]uint8{flows.TCP: unix.IPPROTO_TCP, flows.UDP: unix.IPPROTO_UDP}

// Carried reports whether the socket programs serve s. Those they do not
// are left to the nftables data plane, which runs beside them and sees
// the packets of every local socket the programs did not translate:
// node ports (no socket connects to 0.0.0.0 for them), IPv6 and SCTP
// (no programs yet), and the services whose rules need the packet's
// source address or a count of connections, which connect() does not
// know (allowed_cidrs, SOURCE_IP persistence with a timeout, connection
// limits).
func Carried(s flows.Service) bool {
	k := s.Key
	return k.VIP.Is4() && !k.NodePort() && protos[k.Protocol] != 0 &&
		len(s.AllowedCIDRs) == 0 && s.Persistence == nil && s.ConnectionLimit <= 0
}

// encodeKey is the services map key of k.
func encodeKey(k flows.Key) svcKey {
	a := k.VIP.As4()
	return svcKey{Vip: binary.NativeEndian.Uint32(a[:]), Port: netPort(k.Port), Proto: protos[k.Protocol]}
}

// encode is the services map entry of s on the node named node, in zone,
// with ok false when the programs do not carry s (Carried). The choice is
// the nftables data plane's for traffic from the node's own sockets: an
// internal-local service takes this node's backends, or refuses without
// one; any other the backends Near the node; no backend refuses.
func encode(s flows.Service, node, zone string) (k svcKey, v svcVal, ok bool) {
	if !Carried(s) {
		return k, v, false
	}
	k = encodeKey(s.Key)
	var pick []flows.Backend
	switch {
	case s.AllowNone: // no source may connect
	case s.InternalLocal:
		for _, b := range s.Backends {
			if b.Address.Is4() && b.Node != "" && b.Node == node {
				pick = append(pick, b)
			}
		}
	default:
		s.Backends = ipv4(s.Backends)
		pick, _ = s.Near(node, zone)
	}
	table := flows.Maglev(pick, Slots)
	if table == nil {
		v.Flags = flagRefuse
		return k, v, true
	}
	alg, known := algs[s.Algorithm]
	if !known {
		alg = algSocket // the compiler's default, as nftables
	}
	v.Alg = alg
	for i, idx := range table {
		a := pick[idx].Address.As4()
		v.Slots[i].Addr = binary.NativeEndian.Uint32(a[:])
		v.Slots[i].Port = netPort(pick[idx].Port)
	}
	return k, v, true
}

// ipv4 returns the IPv4 backends of bs (bs itself when all are: the
// common case allocates nothing).
func ipv4(bs []flows.Backend) []flows.Backend {
	for i, b := range bs {
		if !b.Address.Is4() {
			out := append([]flows.Backend{}, bs[:i]...)
			for _, b := range bs[i+1:] {
				if b.Address.Is4() {
					out = append(out, b)
				}
			}
			return out
		}
	}
	return bs
}

// netPort is p as the kernel keeps a port: network order in memory.
func netPort(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

// decodeAddr and decodePort undo the encoding (dumps and tests).
func decodeAddr(a uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], a)
	return netip.AddrFrom4(b)
}

func decodePort(p uint16) uint16 { return netPort(p) }
