package ebpf

import (
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

func TestSlotsAreNftables(t *testing.T) {
	if Slots != nftables.Slots {
		t.Fatalf("Slots = %d, nftables.Slots = %d: both data planes must spread alike", Slots, nftables.Slots)
	}
}

func be(addr string, port uint16, weight int, node string) flows.Backend {
	return flows.Backend{Address: netip.MustParseAddr(addr), Port: port, Weight: weight, Node: node}
}

// spread decodes a value into backend "addr:port" → slots.
func spread(v svcVal) map[string]int {
	out := map[string]int{}
	for _, s := range v.Slots {
		out[netip.AddrPortFrom(decodeAddr(s.Addr), decodePort(s.Port)).String()]++
	}
	return out
}

func TestEncode(t *testing.T) {
	vip := netip.MustParseAddr("198.19.0.1")
	key := flows.Key{VIP: vip, Protocol: flows.TCP, Port: 80}
	two := []flows.Backend{be("198.18.17.2", 8080, 1, "n1"), be("198.18.18.2", 8080, 1, "n2")}
	zoned := []flows.Backend{be("198.18.17.2", 8080, 1, "n1"), be("198.18.18.2", 8080, 1, "n2")}
	zoned[0].Zones, zoned[1].Zones = []string{"a"}, []string{"b"}
	for _, tc := range []struct {
		name    string
		svc     flows.Service
		notOurs bool
		refuse  bool
		alg     uint32
		persist time.Duration
		spread  map[string]int // slots per backend
	}{
		{name: "even", svc: flows.Service{Key: key, Algorithm: flows.RoundRobin, Backends: two}, alg: algRandom,
			spread: map[string]int{"198.18.17.2:8080": 31, "198.18.18.2:8080": 30}},
		{name: "weighted 3:1", svc: flows.Service{Key: key, Algorithm: flows.SourceIP,
			Backends: []flows.Backend{be("198.18.17.2", 8080, 3, ""), be("198.18.18.2", 8080, 1, "")}}, alg: algNetns,
			spread: map[string]int{"198.18.17.2:8080": 46, "198.18.18.2:8080": 15}},
		{name: "source ip port", svc: flows.Service{Key: key, Algorithm: flows.SourceIPPort, Backends: two[:1]}, alg: algSocket,
			spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "unknown algorithm is the compiler's default", svc: flows.Service{Key: key, Algorithm: "LEAST_CONNECTIONS", Backends: two[:1]}, alg: algSocket,
			spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "no backend refuses", svc: flows.Service{Key: key}, refuse: true},
		{name: "allow none refuses", svc: flows.Service{Key: key, AllowNone: true, Backends: two}, refuse: true},
		{name: "internal local takes this node's", svc: flows.Service{Key: key, InternalLocal: true, Algorithm: flows.RoundRobin, Backends: two},
			spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "internal local without one here refuses", svc: flows.Service{Key: key, InternalLocal: true, Backends: two[1:]}, refuse: true},
		{name: "local only is for traffic from outside", svc: flows.Service{Key: key, LocalOnly: true, Algorithm: flows.RoundRobin, Backends: two},
			spread: map[string]int{"198.18.17.2:8080": 31, "198.18.18.2:8080": 30}},
		{name: "prefer close takes the zone's", svc: flows.Service{Key: key, PreferClose: true, Algorithm: flows.RoundRobin, Backends: zoned},
			spread: map[string]int{"198.18.18.2:8080": 61}},
		{name: "IPv6 backends are left out", svc: flows.Service{Key: key, Algorithm: flows.RoundRobin,
			Backends: []flows.Backend{be("198.18.17.2", 8080, 1, ""), be("2001:2::1", 8080, 1, "")}},
			spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "UDP", svc: flows.Service{Key: flows.Key{VIP: vip, Protocol: flows.UDP, Port: 53}, Algorithm: flows.RoundRobin, Backends: two[:1]},
			spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "allowed cidrs are nftables'", svc: flows.Service{Key: key, AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}, Backends: two}, notOurs: true},
		{name: "persistence", svc: flows.Service{Key: key, Algorithm: flows.RoundRobin, Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Minute}, Backends: two},
			alg: algRandom, persist: time.Minute, spread: map[string]int{"198.18.17.2:8080": 31, "198.18.18.2:8080": 30}},
		{name: "persistence of a second", svc: flows.Service{Key: key, Algorithm: flows.SourceIP, Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Second}, Backends: two[:1]},
			alg: algNetns, persist: time.Second, spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "persistence under a second is none, as in nftables", svc: flows.Service{Key: key, Algorithm: flows.RoundRobin,
			Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: 999 * time.Millisecond}, Backends: two[:1]},
			spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "internal local keeps persistence among this node's", svc: flows.Service{Key: key, InternalLocal: true, Algorithm: flows.RoundRobin,
			Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Hour}, Backends: two}, persist: time.Hour, spread: map[string]int{"198.18.17.2:8080": 61}},
		{name: "persistent without backend refuses", svc: flows.Service{Key: key, Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Minute}}, refuse: true},
		{name: "connection limit is nftables'", svc: flows.Service{Key: key, ConnectionLimit: 10, Backends: two}, notOurs: true},
		{name: "node port is nftables'", svc: flows.Service{Key: flows.Key{VIP: flows.NodePortVIP, Protocol: flows.TCP, Port: 30080}, Backends: two}, notOurs: true},
		{name: "IPv6 VIP is encode6's", svc: flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("2001:2::80"), Protocol: flows.TCP, Port: 80}, Backends: two}, notOurs: true},
		{name: "SCTP is nftables'", svc: flows.Service{Key: flows.Key{VIP: vip, Protocol: flows.SCTP, Port: 80}, Backends: two}, notOurs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, v, ok := encode(tc.svc, "n1", "b")
			if ok != !tc.notOurs {
				t.Fatalf("carried = %v, want %v", ok, !tc.notOurs)
			}
			if !ok {
				return
			}
			if got := decodeAddr(k.Vip); got != tc.svc.Key.VIP || decodePort(k.Port) != tc.svc.Key.Port || k.Proto != protos[tc.svc.Key.Protocol] {
				t.Fatalf("key = %v:%d/%d", got, decodePort(k.Port), k.Proto)
			}
			if got := v.Flags&flagRefuse != 0; got != tc.refuse {
				t.Fatalf("refuse = %v, want %v", got, tc.refuse)
			}
			if tc.refuse {
				if v.Slots != (svcVal{}).Slots || v.Persist != 0 {
					t.Fatalf("a refusing service has slots or persistence (%d ns)", v.Persist)
				}
				return
			}
			if v.Alg != tc.alg {
				t.Errorf("alg = %d, want %d", v.Alg, tc.alg)
			}
			if v.Persist != uint64(tc.persist) {
				t.Errorf("persist = %d ns, want %d", v.Persist, tc.persist)
			}
			got := spread(v)
			if len(got) != len(tc.spread) {
				t.Fatalf("spread = %v, want %v", got, tc.spread)
			}
			for b, n := range tc.spread {
				if got[b] != n {
					t.Fatalf("spread = %v, want %v", got, tc.spread)
				}
			}
		})
	}
}

// The slots are the Maglev table of the same backends, in order: the
// same choice per slot as the nftables data plane's.
func TestEncodeIsMaglev(t *testing.T) {
	var bs []flows.Backend
	for i := range 10 {
		bs = append(bs, be(netip.AddrFrom4([4]byte{198, 18, 17, byte(2 + i)}).String(), 8080, 1+i%3, ""))
	}
	_, v, _ := encode(flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("198.19.0.1"), Protocol: flows.TCP, Port: 80}, Backends: bs}, "n1", "")
	for i, idx := range flows.Maglev(bs, Slots) {
		if got := decodeAddr(v.Slots[i].Addr); got != bs[idx].Address || decodePort(v.Slots[i].Port) != 8080 {
			t.Fatalf("slot %d = %v, want %v", i, got, bs[idx].Address)
		}
	}
}

func TestPortIsNetworkOrderInMemory(t *testing.T) {
	k := encodeKey(flows.Key{VIP: netip.MustParseAddr("198.19.0.1"), Protocol: flows.TCP, Port: 0x1f90})
	b := (*[8]byte)(unsafe.Pointer(&k))
	if want := [8]byte{198, 19, 0, 1, 0x1f, 0x90, 6, 0}; *b != want {
		t.Fatalf("key bytes = % x, want % x", *b, want)
	}
}

func TestEncode6(t *testing.T) {
	key := flows.Key{VIP: netip.MustParseAddr("2001:2:0:1::10"), Protocol: flows.UDP, Port: 53}
	mixed := []flows.Backend{be("198.18.17.2", 8080, 1, "n1"), be("2001:2:0:2::2", 8053, 1, "n1"), be("2001:2:0:2::3", 8053, 2, "n2")}
	for _, tc := range []struct {
		name    string
		svc     flows.Service
		notOurs bool
		persist time.Duration
		spread  map[string]int // nil: refuse
	}{
		{name: "IPv6 backends only, by weight", svc: flows.Service{Key: key, Algorithm: flows.RoundRobin, Backends: mixed},
			spread: map[string]int{"[2001:2:0:2::2]:8053": 20, "[2001:2:0:2::3]:8053": 41}},
		{name: "internal local", svc: flows.Service{Key: key, InternalLocal: true, Backends: mixed},
			spread: map[string]int{"[2001:2:0:2::2]:8053": 61}},
		{name: "IPv4 backends only refuse", svc: flows.Service{Key: key, Backends: mixed[:1]}},
		{name: "persistence", svc: flows.Service{Key: key, Algorithm: flows.RoundRobin, Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: 90 * time.Second}, Backends: mixed[1:2]},
			persist: 90 * time.Second, spread: map[string]int{"[2001:2:0:2::2]:8053": 61}},
		{name: "IPv4 VIP is encode's", svc: flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("198.19.0.1"), Protocol: flows.TCP, Port: 80}, Backends: mixed}, notOurs: true},
		{name: "IPv4-mapped VIP is nftables'", svc: flows.Service{Key: flows.Key{VIP: netip.MustParseAddr("::ffff:198.19.0.1"), Protocol: flows.TCP, Port: 80}, Backends: mixed}, notOurs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, v, ok := encode6(tc.svc, "n1", "")
			if ok != !tc.notOurs {
				t.Fatalf("carried = %v, want %v", ok, !tc.notOurs)
			}
			if !ok {
				return
			}
			if decodeAddr6(k.Vip) != key.VIP || decodePort(k.Port) != 53 || k.Proto != protos[flows.UDP] {
				t.Fatalf("key = %v:%d/%d", decodeAddr6(k.Vip), decodePort(k.Port), k.Proto)
			}
			if got := v.Flags&flagRefuse != 0; got != (tc.spread == nil) {
				t.Fatalf("refuse = %v", got)
			}
			if v.Persist != uint64(tc.persist) {
				t.Errorf("persist = %d ns, want %d", v.Persist, tc.persist)
			}
			got := map[string]int{}
			for _, s := range v.Slots {
				if tc.spread != nil {
					got[netip.AddrPortFrom(decodeAddr6(s.Addr), decodePort(s.Port)).String()]++
				}
			}
			if len(got) != len(tc.spread) {
				t.Fatalf("spread = %v, want %v", got, tc.spread)
			}
			for b, n := range tc.spread {
				if got[b] != n {
					t.Fatalf("spread = %v, want %v", got, tc.spread)
				}
			}
		})
	}
}
