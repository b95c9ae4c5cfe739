package ebpf

import (
	"encoding/binary"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
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
	svcKey  = socklbSvcKey
	svcVal  = socklbSvcVal
	svcKey6 = socklbSvcKey6
	svcVal6 = socklbSvcVal6
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
// node ports (no socket connects to 0.0.0.0 for them), SCTP (no
// programs yet), and the services whose rules need the packet's
// source address or a count of connections, which connect() does not
// know (allowed_cidrs: an unbound socket has no source address yet at
// connect(), see docs/dataplane.md; connection limits).
func Carried(s flows.Service) bool {
	k := s.Key
	return (k.VIP.Is4() || k.VIP.Is6() && !k.VIP.Is4In6()) && !k.NodePort() && protos[k.Protocol] != 0 &&
		len(s.AllowedCIDRs) == 0 && s.ConnectionLimit <= 0
}

// persistence is the affinity timeout the programs keep for s, 0 for
// none: as in nftables, whose affinity timeouts are whole seconds, a
// SOURCE_IP persistence shorter than a second keeps none.
func persistence(s flows.Service) uint64 {
	if s.Persistence == nil || s.Persistence.Timeout < time.Second {
		return 0
	}
	return uint64(s.Persistence.Timeout)
}

// encodeKey is the services map key of k.
func encodeKey(k flows.Key) svcKey {
	a := k.VIP.As4()
	return svcKey{Vip: binary.NativeEndian.Uint32(a[:]), Port: netPort(k.Port), Proto: protos[k.Protocol]}
}

// encodeKey6 is the services6 map key of k.
func encodeKey6(k flows.Key) svcKey6 {
	return svcKey6{Vip: words(k.VIP), Port: netPort(k.Port), Proto: protos[k.Protocol]}
}

// encode is the services map entry of IPv4 service s on the node named
// node, in zone, with ok false when the programs do not carry s (Carried,
// or not IPv4).
func encode(s flows.Service, node, zone string) (k svcKey, v svcVal, ok bool) {
	if !Carried(s) || !s.Key.VIP.Is4() {
		return k, v, false
	}
	k = encodeKey(s.Key)
	pick, alg := choose(s, node, zone, backend4)
	if pick == nil {
		v.Flags = flagRefuse
		return k, v, true
	}
	v.Alg, v.Persist = alg, persistence(s)
	for i, idx := range flows.Maglev(pick, Slots) {
		a := pick[idx].Address.As4()
		v.Slots[i].Addr = binary.NativeEndian.Uint32(a[:])
		v.Slots[i].Port = netPort(pick[idx].Port)
	}
	return k, v, true
}

// encode6 is encode for an IPv6 service and the services6 map.
func encode6(s flows.Service, node, zone string) (k svcKey6, v svcVal6, ok bool) {
	if !Carried(s) || s.Key.VIP.Is4() {
		return k, v, false
	}
	k = encodeKey6(s.Key)
	pick, alg := choose(s, node, zone, backend6)
	if pick == nil {
		v.Flags = flagRefuse
		return k, v, true
	}
	v.Alg, v.Persist = alg, persistence(s)
	for i, idx := range flows.Maglev(pick, Slots) {
		v.Slots[i].Addr = words(pick[idx].Address)
		v.Slots[i].Port = netPort(pick[idx].Port)
	}
	return k, v, true
}

// choose is the choice of the nftables data plane for traffic from the
// node's own sockets, among the backends of the VIP's family: an
// internal-local service takes this node's backends; any other the
// backends Near the node. nil: refuse (none, or AllowNone).
func choose(s flows.Service, node, zone string, family func(flows.Backend) bool) ([]flows.Backend, uint32) {
	var pick []flows.Backend
	switch {
	case s.AllowNone: // no source may connect
	case s.InternalLocal:
		for _, b := range s.Backends {
			if family(b) && b.Node != "" && b.Node == node {
				pick = append(pick, b)
			}
		}
	default:
		s.Backends = only(s.Backends, family)
		pick, _ = s.Near(node, zone)
	}
	if len(pick) == 0 {
		return nil, 0
	}
	alg, known := algs[s.Algorithm]
	if !known {
		alg = algSocket // the compiler's default, as nftables
	}
	return pick, alg
}

// words is a as four 32-bit words holding its bytes in order.
func words(a netip.Addr) [4]uint32 {
	b := a.As16()
	var w [4]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

// only returns the backends of bs that keep holds (bs itself when all
// do: the common case allocates nothing).
func only(bs []flows.Backend, keep func(flows.Backend) bool) []flows.Backend {
	for i, b := range bs {
		if !keep(b) {
			out := append([]flows.Backend{}, bs[:i]...)
			for _, b := range bs[i+1:] {
				if keep(b) {
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

// decodeAddr, decodeAddr6 and decodePort undo the encoding (dumps and tests).
func decodeAddr(a uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], a)
	return netip.AddrFrom4(b)
}

func decodePort(p uint16) uint16 { return netPort(p) }

func decodeAddr6(w [4]uint32) netip.Addr {
	var b [16]byte
	for i, x := range w {
		binary.NativeEndian.PutUint32(b[4*i:], x)
	}
	return netip.AddrFrom16(b)
}

// backend4 and backend6 tell a backend's family.
func backend4(b flows.Backend) bool { return b.Address.Is4() }
func backend6(b flows.Backend) bool { return b.Address.Is6() && !b.Address.Is4In6() }
