package ebpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

type counters = socklbCounters

// counted is a family's counters map and the sums last reported from it
// (reported.go): the map only grows, so a read reports the growth since
// the previous one.
type counted[K comparable] struct {
	m *ebpf.Map
	reported[K, counters]
	// flowKey is the service of a map key.
	flowKey func(K) flows.Key
}

// read adds to out what grew since the last read.
func (c *counted[K]) read(out map[flows.Key]flows.Stats) error {
	var k K
	var perCPU []counters
	var moved []K
	var sums []counters
	it := c.m.Iterate()
	for it.Next(&k, &perCPU) {
		var sum counters
		for _, v := range perCPU {
			sum.Connections += v.Connections
			sum.Refused += v.Refused
		}
		last := c.last[k]
		if sum == last {
			continue
		}
		moved, sums = append(moved, k), append(sums, sum)
		if sum.Connections < last.Connections || sum.Refused < last.Refused {
			last = counters{} // the entry was made anew
		}
		c.last[k] = sum
		grown := flows.Counters{Connections: sum.Connections - last.Connections, Refused: sum.Refused - last.Refused}
		if grown.IsZero() {
			continue
		}
		fk := c.flowKey(k)
		s := out[fk]
		s.Counters = s.Counters.Add(grown)
		out[fk] = s
	}
	if err := it.Err(); err != nil {
		return err
	}
	return c.save(moved, sums)
}

// forget drops the counters of deleted services.
func (c *counted[K]) forget(keys []K) error {
	errs := []error{c.reported.forget(keys)}
	for _, k := range keys {
		if err := c.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ReadStats reports, per service, the connect()s the programs translated
// and the connect()s and sendmsg()s they refused since the previous read
// (the first read after New reports what grew since New), the payload
// bytes of the translated connections in each direction since then, in
// all and per backend (with the connections sent to each), and the
// connections open now. The open TCP connections give their bytes so far
// first (giveTCP). A datagram of an unconnected UDP socket is neither a
// connection nor counted in bytes. Like Sync and Apply, it must not run
// concurrently with them (the agent holds one lock around all three).
func (d *Dataplane) ReadStats() (map[flows.Key]flows.Stats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.giveTCP()
	out := map[flows.Key]flows.Stats{}
	if err := d.c4.read(out); err != nil {
		return out, fmt.Errorf("read the IPv4 counters: %w", err)
	}
	if err := d.c6.read(out); err != nil {
		return out, fmt.Errorf("read the IPv6 counters: %w", err)
	}
	if err := d.f4.read(out); err != nil {
		return out, fmt.Errorf("read the IPv4 traffic: %w", err)
	}
	if err := d.f6.read(out); err != nil {
		return out, fmt.Errorf("read the IPv6 traffic: %w", err)
	}
	return out, nil
}

func flowKey(k svcKey) flows.Key {
	return flows.Key{VIP: decodeAddr(k.Vip), Protocol: protoNames[k.Proto], Port: decodePort(k.Port)}
}

func flowKey6(k svcKey6) flows.Key {
	return flows.Key{VIP: decodeAddr6(k.Vip), Protocol: protoNames[k.Proto], Port: decodePort(k.Port)}
}
