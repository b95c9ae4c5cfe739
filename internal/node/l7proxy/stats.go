package l7proxy

import (
	"io"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// memberCounters are what the proxy counted for one member of one
// listener since the last read: requests it forwarded, and the bytes of
// their bodies each way.
type memberCounters struct {
	requests, bytesIn, bytesOut atomic.Uint64
}

type counterKey struct {
	listener, member netip.AddrPort
}

// countersFor are the counters of member behind listener, made on first
// use; they outlive a configuration, so that a Set loses nothing
// counted.
func (p *Proxy) countersFor(listener, member netip.AddrPort) *memberCounters {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	k := counterKey{listener, member}
	c := p.counters[k]
	if c == nil {
		c = &memberCounters{}
		p.counters[k] = c
	}
	return c
}

// attach gives every backend of r its counters, and every pool that
// speaks TLS to its members its transport.
func (p *Proxy) attach(r *router) {
	for _, pl := range r.pools {
		if pl.tls != nil {
			pl.transport = p.memberTransport(pl.tls)
		}
		for _, b := range pl.backends {
			b.counters = p.countersFor(r.vip, netip.AddrPortFrom(b.Address, b.Port))
			if pl.tls == nil && pl.proxyVersion == 0 {
				b.idle = p.memberIdleFor(b.hostPort)
			}
		}
	}
}

// ReadStats returns what the proxy counted since the previous read, by
// listener (its VIP and port, as a TCP service) and member: requests as
// the members' connections, and their bodies' bytes. A member of a
// listener no longer served is forgotten once read.
func (p *Proxy) ReadStats() (map[flows.Key]flows.Stats, error) {
	routes := *p.routes.Load()
	served := map[netip.AddrPort]bool{}
	for _, r := range routes {
		served[r.vip] = true
	}
	p.cmu.Lock()
	defer p.cmu.Unlock()
	out := map[flows.Key]flows.Stats{}
	for k, c := range p.counters {
		got := flows.Counters{Connections: c.requests.Swap(0), BytesIn: c.bytesIn.Swap(0), BytesOut: c.bytesOut.Swap(0)}
		if !served[k.listener] {
			delete(p.counters, k)
		}
		if got.IsZero() {
			continue
		}
		key := flows.Key{VIP: k.listener.Addr(), Protocol: flows.TCP, Port: k.listener.Port()}
		st := out[key]
		if st.Members == nil {
			st.Members = map[netip.AddrPort]flows.Counters{}
		}
		st.Members[k.member] = st.Members[k.member].Add(got)
		out[key] = st
	}
	return out, nil
}

// countingWriter counts the bytes of an answer's body.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Uint64
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(uint64(n))
	return n, err
}

// Unwrap lets http.ResponseController (flushes, upgrades) reach the
// server's writer.
func (w countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingBody counts the bytes of a request's body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Uint64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(uint64(n))
	return n, err
}
