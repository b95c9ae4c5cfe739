package compiler

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"net/netip"
	"time"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Output is what the agents get of one load balancer: its services and
// the probes of its monitored members.
type Output struct {
	Services []flows.Service
	Probes   []flows.Probe
}

// Of compiles a tree: Compile and Probes.
func Of(t *lbaas.Tree) Output { return OfWith(t, nil) }

// OfWith compiles a tree whose TLS listeners' certificates come from
// certs (nil: such listeners are not served).
func OfWith(t *lbaas.Tree, certs Certificates) Output {
	return Output{Services: CompileWith(t, certs), Probes: Probes(t)}
}

// Digest names an Output: two outputs have one digest when every field of
// every service and probe is equal, in the order compiled (nil and empty
// lists are equal, as in flows.Service.Equal). A SHA-256 over a framing
// in which no two outputs encode alike, so that "the same digest" can
// stand for "the same flows": the fan-out keeps a load balancer's digest
// and a completion compares the digest of its settled tree with it
// instead of compiling the tree before and after.
type Digest [sha256.Size]byte

// Digest returns o's digest.
func (o Output) Digest() Digest {
	e := encoder{h: sha256.New(), buf: make([]byte, 0, 4096)}
	e.int(len(o.Services))
	for i := range o.Services {
		e.service(&o.Services[i])
	}
	e.int(len(o.Probes))
	for i := range o.Probes {
		e.probe(&o.Probes[i])
	}
	var d Digest
	e.flush()
	e.h.Sum(d[:0])
	return d
}

// encoder writes fields into a hash through a buffer: lengths before
// every variable part, so that no two sequences of fields encode alike.
type encoder struct {
	h   hash.Hash
	buf []byte
}

func (e *encoder) flush() {
	e.h.Write(e.buf)
	e.buf = e.buf[:0]
}

func (e *encoder) grow() {
	if len(e.buf) > 3072 {
		e.flush()
	}
}

func (e *encoder) uint(v uint64) {
	e.grow()
	e.buf = binary.AppendUvarint(e.buf, v)
}

func (e *encoder) int(v int) {
	e.grow()
	e.buf = binary.AppendVarint(e.buf, int64(v))
}

func (e *encoder) bool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	e.buf = append(e.buf, b)
}

func (e *encoder) str(s string) {
	e.uint(uint64(len(s)))
	if len(s) > 1024 {
		e.flush()
		e.h.Write([]byte(s))
		return
	}
	e.buf = append(e.buf, s...)
}

func (e *encoder) strs(ss []string) {
	e.int(len(ss))
	for _, s := range ss {
		e.str(s)
	}
}

func (e *encoder) duration(d time.Duration) { e.int(int(d)) }

func (e *encoder) suites(ids []uint16) {
	e.int(len(ids))
	for _, id := range ids {
		e.uint(uint64(id))
	}
}

// addr writes an address as its bytes (none when invalid) and zone.
func (e *encoder) addr(a netip.Addr) {
	b := a.AsSlice()
	e.uint(uint64(len(b)))
	e.buf = append(e.buf, b...)
	e.str(a.Zone())
}

func (e *encoder) service(s *flows.Service) {
	e.addr(s.Key.VIP)
	e.str(string(s.Key.Protocol))
	e.uint(uint64(s.Key.Port))
	e.str(s.LoadBalancerID)
	e.str(s.ListenerID)
	e.str(s.PoolID)
	e.str(string(s.Algorithm))
	e.bool(s.Persistence != nil)
	if p := s.Persistence; p != nil {
		e.str(p.Type)
		e.duration(p.Timeout)
	}
	e.int(len(s.AllowedCIDRs))
	for _, p := range s.AllowedCIDRs {
		e.addr(p.Addr())
		e.int(p.Bits())
	}
	e.bool(s.AllowNone)
	e.int(s.ConnectionLimit)
	e.int(len(s.Backends))
	for i := range s.Backends {
		e.backend(&s.Backends[i])
	}
	e.bool(s.LocalOnly)
	e.bool(s.InternalLocal)
	e.bool(s.PreferClose)
	e.uint(uint64(s.HealthCheckNodePort))
	e.str(s.HealthCheckService)
	e.bool(s.OwnVIP)
	e.bool(s.L7 != nil)
	if s.L7 != nil {
		e.l7(s.L7)
	}
}

func (e *encoder) l7(l *flows.L7) {
	e.int(len(l.Policies))
	for _, p := range l.Policies {
		e.str(p.ID)
		e.str(string(p.Action))
		e.str(p.Pool)
		e.str(p.URL)
		e.int(p.Code)
		e.int(len(p.Rules))
		for _, r := range p.Rules {
			e.str(string(r.Type))
			e.str(string(r.Compare))
			e.str(r.Key)
			e.str(r.Value)
			e.bool(r.Invert)
		}
	}
	e.str(l.DefaultPool)
	e.int(len(l.Pools))
	for _, p := range l.Pools {
		e.str(p.ID)
		e.str(string(p.Algorithm))
		e.bool(p.Persistence != nil)
		if sp := p.Persistence; sp != nil {
			e.str(sp.Type)
			e.str(sp.CookieName)
			e.duration(sp.Timeout)
		}
		e.int(len(p.Backends))
		for i := range p.Backends {
			e.backend(&p.Backends[i])
		}
		e.int(p.ProxyProtocol)
		e.bool(p.TLS != nil)
		if t := p.TLS; t != nil {
			e.str(string(t.CA))
			e.str(string(t.CRL))
			e.bool(t.Certificate != nil)
			if c := t.Certificate; c != nil {
				e.str(string(c.Chain))
				e.str(string(c.Key))
			}
			e.strs(t.ALPN)
			e.strs(t.Versions)
			e.suites(t.CipherSuites)
		}
	}
	e.strs(l.InsertHeaders)
	e.duration(l.ClientTimeout)
	e.duration(l.ConnectTimeout)
	e.duration(l.MemberTimeout)
	e.bool(l.TLS != nil)
	if t := l.TLS; t != nil {
		e.int(len(t.Certificates))
		for _, c := range t.Certificates {
			e.str(string(c.Chain))
			e.str(string(c.Key))
		}
		e.str(t.ClientAuth)
		e.str(string(t.ClientCA))
		e.str(string(t.ClientCRL))
		e.strs(t.ALPN)
		e.strs(t.Versions)
		e.suites(t.CipherSuites)
		e.int(t.HSTSMaxAge)
		e.bool(t.HSTSIncludeSubdomains)
		e.bool(t.HSTSPreload)
	}
}

func (e *encoder) backend(b *flows.Backend) {
	e.str(b.MemberID)
	e.addr(b.Address)
	e.uint(uint64(b.Port))
	e.int(b.Weight)
	e.str(b.Node)
	e.strs(b.Zones)
	e.strs(b.ForNodes)
	e.bool(b.KeepClient)
	e.bool(b.Terminating)
}

func (e *encoder) probe(p *flows.Probe) {
	e.str(p.MemberID)
	e.addr(p.Address)
	e.uint(uint64(p.Port))
	e.str(string(p.Type))
	e.duration(p.Delay)
	e.duration(p.Timeout)
	e.int(p.MaxRetries)
	e.int(p.MaxRetriesDown)
	e.str(p.HTTPMethod)
	e.str(p.URLPath)
	e.str(p.ExpectedCodes)
	e.str(p.HTTPVersion)
	e.str(p.DomainName)
	e.str(p.InitialStatus)
	e.str(p.Node)
}
