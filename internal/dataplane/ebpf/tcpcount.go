package ebpf

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Counting a translated TCP connection's bytes from TCP's own counts
// (bpf/socktcp.c): a sock_ops program on the cgroup counts a socket's
// connection opened when TCP starts it and gives its pair's traffic
// entry what the socket carried when TCP closes it; an iterator over the
// sockets' sk_lb storage, run before each read, gives the open
// connections' bytes so far. No program runs per TCP packet: a
// connection costs a few sock_ops calls (its connect and state changes),
// and a read costs a walk of the translated sockets.

// tcpCounter is socktcp.c's programs, loaded against the socket
// programs' maps.
type tcpCounter struct {
	objs socktcpObjects
	iter *link.Iter
}

// newTCPCounter loads the programs. It fails on a kernel without BTF or
// BPF iterators, where the socket programs still balance and count
// connections, but no TCP bytes.
func newTCPCounter(m *socklbMaps) (_ *tcpCounter, err error) {
	spec, err := loadSocktcp()
	if err != nil {
		return nil, err
	}
	c := &tcpCounter{}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		socktcpMapSkLb: m.SkLb, socktcpMapTraffic: m.Traffic, socktcpMapTraffic6: m.Traffic6}}
	if err := spec.LoadAndAssign(&c.objs, &opts); err != nil {
		return nil, fmt.Errorf("load the TCP counting programs: %w", err)
	}
	if c.iter, err = link.AttachIter(link.IterOptions{Program: c.objs.ReportTcp, Map: m.SkLb}); err != nil {
		c.objs.Close()
		return nil, fmt.Errorf("attach the TCP counting iterator: %w", err)
	}
	return c, nil
}

func (c *tcpCounter) close() {
	c.iter.Close()
	c.objs.Close()
}

// giveTCP has the open TCP connections give their pairs what they
// carried since they last did. What a failed walk leaves stays in the
// sockets, given at the next walk or when TCP closes them.
func (d *Dataplane) giveTCP() {
	if d.tcp == nil {
		return
	}
	if err := drain(d.tcp.iter); err != nil {
		d.log.Warn("the bytes of open TCP connections wait for the next read", "err", err)
	}
}

// TCPCounting is nil when the translated TCP connections' bytes are
// counted, and otherwise why the kernel refused the programs that count
// them (connections are counted all the same).
func (d *Dataplane) TCPCounting() error { return d.tcpErr }
