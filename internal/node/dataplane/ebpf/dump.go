package ebpf

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Service is one services map entry as the programs read it.
type Service struct {
	Key flows.Key
	// Refuse: connect() and sendmsg() fail with ECONNREFUSED.
	Refuse    bool
	Algorithm flows.Algorithm
	// Persistence is the SOURCE_IP persistence timeout, 0 for none.
	Persistence time.Duration
	// Slots per backend address:port, of Slots.
	Backends map[netip.AddrPort]int
}

var algNames = map[uint32]flows.Algorithm{algRandom: flows.RoundRobin, algNetns: flows.SourceIP, algSocket: flows.SourceIPPort}

var protoNames = map[uint8]flows.Protocol{}

func init() {
	for p, n := range protos {
		protoNames[n] = p
	}
}

// decode is encode's entry read back.
func decode(k svcKey, v svcVal) Service {
	s := Service{Key: flows.Key{VIP: decodeAddr(k.Vip), Protocol: protoNames[k.Proto], Port: decodePort(k.Port)},
		Refuse: v.Flags&flagRefuse != 0, Algorithm: algNames[v.Alg], Persistence: time.Duration(v.Persist), Backends: map[netip.AddrPort]int{}}
	if !s.Refuse {
		for _, b := range v.Slots {
			s.Backends[netip.AddrPortFrom(decodeAddr(b.Addr), decodePort(b.Port))]++
		}
	}
	return s
}

// decode6 is encode6's entry read back.
func decode6(k svcKey6, v svcVal6) Service {
	s := Service{Key: flows.Key{VIP: decodeAddr6(k.Vip), Protocol: protoNames[k.Proto], Port: decodePort(k.Port)},
		Refuse: v.Flags&flagRefuse != 0, Algorithm: algNames[v.Alg], Persistence: time.Duration(v.Persist), Backends: map[netip.AddrPort]int{}}
	if !s.Refuse {
		for _, b := range v.Slots {
			s.Backends[netip.AddrPortFrom(decodeAddr6(b.Addr), decodePort(b.Port))]++
		}
	}
	return s
}

// Dump reads the services maps pinned in pinDir, in key order.
func Dump(pinDir string) ([]Service, error) {
	var out []Service
	if err := each(filepath.Join(pinDir, socklbMapServices), func(k svcKey, v svcVal) { out = append(out, decode(k, v)) }); err != nil {
		return nil, err
	}
	if err := each(filepath.Join(pinDir, socklbMapServices6), func(k svcKey6, v svcVal6) { out = append(out, decode6(k, v)) }); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Service) int { return flows.CompareKeys(a.Key, b.Key) })
	return out, nil
}

func each[K, V any](pin string, fn func(K, V)) error {
	m, err := ebpf.LoadPinnedMap(pin, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("open the pinned map: %w", err)
	}
	defer m.Close()
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(k, v)
	}
	return it.Err()
}

// WriteDump prints services, one line each and a line per backend.
func WriteDump(w io.Writer, services []Service) {
	for _, s := range services {
		head := fmt.Sprintf("%s %s", netip.AddrPortFrom(s.Key.VIP, s.Key.Port), s.Key.Protocol)
		if s.Refuse {
			fmt.Fprintf(w, "%s: refused (no usable backend)\n", head)
			continue
		}
		if s.Persistence > 0 {
			fmt.Fprintf(w, "%s: %s, SOURCE_IP persistence %s\n", head, s.Algorithm, s.Persistence)
		} else {
			fmt.Fprintf(w, "%s: %s\n", head, s.Algorithm)
		}
		for _, b := range sortedBackends(&s) {
			fmt.Fprintf(w, "  %s %d/%d slots\n", b, s.Backends[b], Slots)
		}
	}
	if len(services) == 0 {
		fmt.Fprintln(w, "no services")
	}
}

// sortedBackends is s's backends, most slots first.
func sortedBackends(s *Service) []netip.AddrPort {
	bs := make([]netip.AddrPort, 0, len(s.Backends))
	for b := range s.Backends {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b netip.AddrPort) int {
		return cmp.Or(s.Backends[b]-s.Backends[a], a.Compare(b))
	})
	return bs
}
