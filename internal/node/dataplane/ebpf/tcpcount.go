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
//
// The two halves load apart: an iterator is a tracing program, which a
// kernel's BPF policy may refuse (EPERM) where it takes sock_ops. Then
// the connections are still counted opened and closed (per backend, and
// the open ones), and each one's bytes when TCP closes it; only the
// bytes of connections still open wait for their close.

// tcpCounter is socktcp.c's programs, loaded against the socket
// programs' maps. iter is nil where the kernel refused the iterator
// (iterErr says why).
type tcpCounter struct {
	sockops struct {
		CountTcp *ebpf.Program `ebpf:"count_tcp"`
	}
	report struct {
		ReportTcp *ebpf.Program `ebpf:"report_tcp"`
	}
	iter    *link.Iter
	iterErr error
}

// newTCPCounter loads the programs. It fails on a kernel that refuses
// the sock_ops program (no BTF), where the socket programs still balance
// and count connect()s, but neither the connections' ends nor their
// bytes.
func newTCPCounter(m *socklbMaps) (_ *tcpCounter, err error) {
	spec, err := loadSocktcp()
	if err != nil {
		return nil, err
	}
	c := &tcpCounter{}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		socktcpMapSkLb: m.SkLb, socktcpMapTraffic: m.Traffic, socktcpMapTraffic6: m.Traffic6}}
	if err := spec.LoadAndAssign(&c.sockops, &opts); err != nil {
		return nil, fmt.Errorf("load the TCP counting programs: %w", err)
	}
	if err := spec.LoadAndAssign(&c.report, &opts); err != nil {
		c.iterErr = fmt.Errorf("load the TCP counting iterator: %w", err)
		return c, nil
	}
	if c.iter, err = link.AttachIter(link.IterOptions{Program: c.report.ReportTcp, Map: m.SkLb}); err != nil {
		c.report.ReportTcp.Close()
		c.report.ReportTcp = nil
		c.iterErr = fmt.Errorf("attach the TCP counting iterator: %w", err)
	}
	return c, nil
}

func (c *tcpCounter) close() {
	if c.iter != nil {
		c.iter.Close()
	}
	if c.report.ReportTcp != nil {
		c.report.ReportTcp.Close()
	}
	c.sockops.CountTcp.Close()
}

// giveTCP has the open TCP connections give their pairs what they
// carried since they last did. What a failed walk leaves stays in the
// sockets, given at the next walk or when TCP closes them.
func (d *Dataplane) giveTCP() {
	if d.tcp == nil || d.tcp.iter == nil {
		return
	}
	if err := drain(d.tcp.iter); err != nil {
		d.log.Warn("the bytes of open TCP connections wait for the next read", "err", err)
	}
}

// TCPCounting is nil when the translated TCP connections' bytes are
// counted as they flow, and otherwise why the kernel refused what counts
// them: the iterator alone (then TCPConnectionsCounted is nil, and a
// connection's bytes are counted when it closes), or the sock_ops
// program too (then connect()s are counted, and nothing of TCP's).
func (d *Dataplane) TCPCounting() error {
	if d.tcpErr != nil {
		return d.tcpErr
	}
	return d.tcp.iterErr
}

// TCPConnectionsCounted is nil when the translated TCP connections are
// counted opened and closed, with their bytes when they close: per
// backend, and the ones open now.
func (d *Dataplane) TCPConnectionsCounted() error { return d.tcpErr }
