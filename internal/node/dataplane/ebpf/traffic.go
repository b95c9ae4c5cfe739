package ebpf

import (
	"errors"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

type (
	traffic  = socklbTraffic
	pairKey  = socklbFlowKey
	pairKey6 = socklbFlowKey6
)

// flowed is a family's traffic map (the bytes and sockets of the
// translated connections, per service and backend) and the sums last
// reported from it. Like counted, the map only grows and a read reports
// the growth; open connections are reported whole at every read.
type flowed[K comparable] struct {
	m *ebpf.Map
	reported[K, traffic]
	// split is the service and backend of a map key.
	split func(K) (flows.Key, netip.AddrPort)
	// held reports whether the backend is in its service's slots now:
	// a pair that is not gets no new sockets.
	held func(K) bool
	// uncounted reports whether the closing of a pair's sockets goes
	// uncounted now (a UDP pair while no UDP service is carried, and so
	// no sock_release program attached): its open sockets are not
	// reported, and once not held the pair goes.
	uncounted func(K) bool
}

// read adds to out what grew since the last read and the connections
// open now, and deletes the pairs that will count nothing more (no
// longer held, every socket closed).
func (f *flowed[K]) read(out map[flows.Key]flows.Stats) error {
	var k K
	var perCPU []traffic
	var done, moved []K
	var sums []traffic
	it := f.m.Iterate()
	for it.Next(&k, &perCPU) {
		sum := sumTraffic(perCPU)
		grown, open := growth(f.last[k], sum)
		if f.uncounted(k) {
			open = 0
		}
		if sum != f.last[k] {
			moved, sums = append(moved, k), append(sums, sum)
			f.last[k] = sum
		}
		if open == 0 && !f.held(k) {
			done = append(done, k)
		}
		if grown.IsZero() && open == 0 {
			continue
		}
		svc, be := f.split(k)
		s := out[svc]
		s.BytesIn += grown.BytesIn
		s.BytesOut += grown.BytesOut
		s.Active += open
		if !grown.IsZero() {
			if s.Members == nil {
				s.Members = map[netip.AddrPort]flows.Counters{}
			}
			s.Members[be] = s.Members[be].Add(grown)
		}
		out[svc] = s
	}
	if err := it.Err(); err != nil {
		return err
	}
	if err := f.save(moved, sums); err != nil {
		return err
	}
	// What the closing packets of such a pair's last sockets add between
	// the read and the delete is lost: a few acknowledgements at most.
	errs := []error{f.forget(done)}
	for _, k := range done {
		if err := f.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func sumTraffic(perCPU []traffic) traffic {
	var s traffic
	for _, v := range perCPU {
		s.BytesIn += v.BytesIn
		s.BytesOut += v.BytesOut
		s.Opened += v.Opened
		s.Closed += v.Closed
	}
	return s
}

// growth is what a pair counted between two reads, as a member's
// counters (a connection is a socket opened), and the connections open
// now. A sum below the last one is an entry made anew: all of it grew.
func growth(last, now traffic) (flows.Counters, uint64) {
	if now.BytesIn < last.BytesIn || now.BytesOut < last.BytesOut || now.Opened < last.Opened {
		last = traffic{}
	}
	var open uint64
	if now.Opened > now.Closed { // the per-CPU sums are not one snapshot
		open = now.Opened - now.Closed
	}
	return flows.Counters{Connections: now.Opened - last.Opened, BytesIn: now.BytesIn - last.BytesIn,
		BytesOut: now.BytesOut - last.BytesOut}, open
}

func splitPair(k pairKey) (flows.Key, netip.AddrPort) {
	return flowKey(k.Svc), netip.AddrPortFrom(decodeAddr(k.Be.Addr), decodePort(k.Be.Port))
}

func splitPair6(k pairKey6) (flows.Key, netip.AddrPort) {
	return flowKey6(k.Svc), netip.AddrPortFrom(decodeAddr6(k.Be.Addr), decodePort(k.Be.Port))
}

// holds reports whether a services map's value has the backend b in a slot.
func holds4(v *svcVal, b pairKey) bool {
	for _, s := range v.Slots {
		if s == b.Be {
			return true
		}
	}
	return false
}

func holds6(v *svcVal6, b pairKey6) bool {
	for _, s := range v.Slots {
		if s == b.Be {
			return true
		}
	}
	return false
}
