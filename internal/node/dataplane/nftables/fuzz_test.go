package nftables

import (
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// fuzzServices reads a change from bytes, six per service, on a few
// addresses, ports and backends so that services collide and share
// backends and class chains: the high bit of the first byte makes it a
// delete of the key.
func fuzzServices(b []byte) (upserts []flows.Service, deletes []flows.Key) {
	protos := []flows.Protocol{flows.TCP, flows.UDP, flows.SCTP, "ICMP"}
	algs := []flows.Algorithm{flows.RoundRobin, flows.SourceIP, flows.SourceIPPort}
	for ; len(b) >= 6; b = b[6:] {
		// The bit 8 makes an IPv6 service, with IPv6 backends and sources
		// (and an IPv4 backend that the ip6 table leaves out).
		v6 := b[0]&8 != 0
		vip := netip.AddrFrom4([4]byte{198, 19, 0, b[0] & 7})
		if v6 {
			vip = netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, 1, 0, 15: b[0] & 7})
		}
		k := flows.Key{VIP: vip, Protocol: protos[b[1]&3], Port: 80 + uint16(b[1]>>2&3)}
		if b[0]&0x80 != 0 {
			deletes = append(deletes, k)
			continue
		}
		s := flows.Service{Key: k, Algorithm: algs[int(b[2]&3)%len(algs)], ConnectionLimit: -1, LocalOnly: b[2]&0x10 != 0, PreferClose: b[2]&0x20 != 0}
		if b[2]&4 != 0 {
			s.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Duration(b[3]) * time.Second}
		}
		if b[2]&8 != 0 {
			s.ConnectionLimit = int(b[3])
		}
		if b[2]&0x40 != 0 {
			s.AllowedCIDRs = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, b[3], 0}), int(b[3]%33))}
			if v6 {
				s.AllowedCIDRs = append(s.AllowedCIDRs, netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, b[3]}), int(b[3]%129)))
			}
		}
		for i := range int(b[4] & 7) {
			node := []string{"n1", "n2", ""}[i%3]
			addr := netip.AddrFrom4([4]byte{198, 18, 17, b[5]&7 + byte(i)})
			if v6 && i > 0 {
				addr = netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, 0, 0x11, 15: b[5]&7 + byte(i)})
			}
			s.Backends = append(s.Backends, flows.Backend{Address: addr, Port: 8080 + uint16(i&1),
				Weight: 1 + int(b[5]>>3), Node: node, Zones: []string{"zone-a", "zone-b"}[:i%3%2+1]})
		}
		upserts = append(upserts, s)
	}
	return upserts, deletes
}

// FuzzPlan plans random changes in sequence, as the agent does, with the
// pure planner of each table: it never fails or panics on what the flow model can
// carry; every plan's elements carry their service's key; a change made
// again plans nothing; and removing every service leaves nothing behind
// (no element, chain or reference count).
func FuzzPlan(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0}, []byte{0x81, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 4, 0x15, 30, 3, 9, 2, 1, 0x2e, 5, 1, 2}, []byte{1, 4, 0x05, 60, 2, 9, 2, 1, 0x48, 16, 0, 0})
	f.Add([]byte{9, 0, 0, 0, 1, 0, 3, 2, 0x40, 24, 4, 1}, []byte{3, 2, 0x44, 24, 4, 2})
	f.Add([]byte{8, 4, 0x55, 40, 3, 1}, []byte{0x88, 4, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		for _, fam := range families {
			fuzzFamily(t, fam, first, second)
		}
	})
}

func fuzzFamily(t *testing.T, fam *family, first, second []byte) {
	st := newState("n1")
	st.zone = "zone-a"
	sc := testSchema(fam)
	for _, batch := range [][]byte{first, second} {
		upserts, deletes := fuzzServices(batch)
		p, err := st.plan(sc, upserts, deletes)
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		checkKeys(t, p)
		st.commit(p)
		if len(deletes) > 0 {
			continue
		}
		// The last of equal keys wins, as in the plan itself.
		again, err := st.plan(sc, upserts, nil)
		if err != nil || !again.Empty() {
			t.Fatalf("the same change again plans %v %v", again, err)
		}
	}
	var all []flows.Key
	for k := range st.programmed {
		all = append(all, k)
	}
	p, err := st.plan(sc, nil, all)
	if err != nil {
		t.Fatalf("remove all: %v", err)
	}
	st.commit(p)
	if len(st.programmed)+len(st.refs)+len(st.chainRefs)+len(st.chains) != 0 {
		t.Fatalf("%s: left behind: %d services, refs %v, chain refs %v, chains %v", fam.name, len(st.programmed), st.refs, st.chainRefs, st.chains)
	}
}
