// Package ebpf is flowlb's socket-level data plane: cgroup programs that
// translate a service's VIP:port into a backend when a local socket
// connects (TCP, connected UDP) or sends (unconnected UDP), and show the
// VIP again to getpeername() and recvmsg(). Packets of such connections
// carry the backend's address from the start: no NAT, no conntrack.
// Traffic that does not start on a local socket of the cgroup (clients
// from outside, node ports, forwarded packets) and the services the
// programs do not carry (Carried) stay with the nftables data plane,
// which the agent runs beside this one. When a UDP backend leaves its
// service, the connected sockets translated to it are destroyed
// (terminate.go). The programs and bindings are generated from
// bpf/socklb.c and bpf/sockterm.c by bpf2go (make generate).
package ebpf

//go:generate ../../../../hack/gen-bpf.sh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// hook is a socket program, where it attaches, and how to find it
// among the loaded ones.
type hook struct {
	name   string
	attach ebpf.AttachType
	prog   func(*socklbPrograms) *ebpf.Program
}

// hooks are the programs attached for good.
var hooks = []hook{
	{socklbProgConnect4, ebpf.AttachCGroupInet4Connect, func(p *socklbPrograms) *ebpf.Program { return p.Connect4 }},
	{socklbProgSendmsg4, ebpf.AttachCGroupUDP4Sendmsg, func(p *socklbPrograms) *ebpf.Program { return p.Sendmsg4 }},
	{socklbProgRecvmsg4, ebpf.AttachCGroupUDP4Recvmsg, func(p *socklbPrograms) *ebpf.Program { return p.Recvmsg4 }},
	{socklbProgGetpeername4, ebpf.AttachCgroupInet4GetPeername, func(p *socklbPrograms) *ebpf.Program { return p.Getpeername4 }},
	{socklbProgConnect6, ebpf.AttachCGroupInet6Connect, func(p *socklbPrograms) *ebpf.Program { return p.Connect6 }},
	{socklbProgSendmsg6, ebpf.AttachCGroupUDP6Sendmsg, func(p *socklbPrograms) *ebpf.Program { return p.Sendmsg6 }},
	{socklbProgRecvmsg6, ebpf.AttachCGroupUDP6Recvmsg, func(p *socklbPrograms) *ebpf.Program { return p.Recvmsg6 }},
	{socklbProgGetpeername6, ebpf.AttachCgroupInet6GetPeername, func(p *socklbPrograms) *ebpf.Program { return p.Getpeername6 }},
}

// datagramHooks count the translated UDP sockets' datagrams, and their
// connections closed at release. Two of them run for every packet of
// the cgroup's sockets, TCP's too: attached only while a UDP service is
// carried (countDatagrams).
var datagramHooks = []hook{
	{socklbProgCountEgress, ebpf.AttachCGroupInetEgress, func(p *socklbPrograms) *ebpf.Program { return p.CountEgress }},
	{socklbProgCountIngress, ebpf.AttachCGroupInetIngress, func(p *socklbPrograms) *ebpf.Program { return p.CountIngress }},
	{socklbProgSockRelease, ebpf.AttachCgroupInetSockRelease, func(p *socklbPrograms) *ebpf.Program { return p.SockRelease }},
}

// AttachTypes are the cgroup hooks the data plane attaches programs to
// (the socket programs, the datagram counting ones, the TCP counting
// sock_ops): where a check looks for what it left.
func AttachTypes() []ebpf.AttachType {
	out := []ebpf.AttachType{ebpf.AttachCGroupSockOps}
	for _, h := range append(append([]hook{}, hooks...), datagramHooks...) {
		out = append(out, h.attach)
	}
	return out
}

// Config of a Dataplane.
type Config struct {
	// Node and Zone name this node, for local and PreferClose services.
	Node, Zone string
	// Cgroup is the cgroup v2 directory whose processes, and those of
	// every cgroup below it, are served.
	Cgroup string
	// PinDir, if set, is a directory on a bpffs (see MountBPFFS) where
	// the maps and links are pinned: they outlive the agent, and the next
	// agent with the same PinDir adopts them. Empty: nothing is pinned
	// and Close detaches the programs.
	PinDir string
	// Log, if set, hears of the sockets destroyed when UDP backends
	// leave their services, and of what kept them from being destroyed.
	Log *slog.Logger
}

// Dataplane is the socket programs attached to one cgroup and the
// services maps they read.
type Dataplane struct {
	// mu serialises changes, checks and counter reads.
	mu  sync.Mutex
	cfg Config
	// cgroupID is the cgroup's, as the links report it attached.
	cgroupID uint64
	objs     socklbObjects
	links    []link.Link
	// datagramLinks are datagramHooks' links while attached (nil while
	// not); tcpLink is the TCP counting's sock_ops program (nil where
	// the kernel refused tcp, tcpErr says why).
	datagramLinks []link.Link
	tcp           *tcpCounter
	tcpErr        error
	tcpLink       link.Link
	// The services maps of IPv4 and IPv6.
	t4 *table[svcKey, svcVal]
	t6 *table[svcKey6, svcVal6]
	// Their counters, and the traffic of the translated connections.
	c4 *counted[svcKey]
	c6 *counted[svcKey6]
	f4 *flowed[pairKey]
	f6 *flowed[pairKey6]
	// reported are the maps of the sums reported from those four, pinned
	// with the rest (none without PinDir).
	reported []*ebpf.Map
	// lastOps counts the map entries the last Sync or Apply wrote or
	// deleted.
	lastOps int
	// term destroys the sockets of the pairs a Sync or an Apply ended
	// (ended4, ended6): nil where the kernel refused its iterators
	// (termErr says why). lastTerm is what its last run did.
	term     *terminator
	termErr  error
	ended4   []pairKey
	ended6   []pairKey6
	lastTerm termination
	log      *slog.Logger
}

// removeIncompatiblePins removes the pinned maps in dir whose shape
// differs from spec's. A socket storage map made anew forgets every
// socket's pair, so the traffic maps go with it: the connections they
// count open would never be counted closed.
func removeIncompatiblePins(spec *ebpf.CollectionSpec, dir string) error {
	skLbRemoved := false
	for name, ms := range spec.Maps {
		pin := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		incompatible := ms.Compatible(m) != nil
		m.Close()
		if incompatible {
			if err := os.Remove(pin); err != nil {
				return err
			}
			skLbRemoved = skLbRemoved || name == socklbMapSkLb
		}
	}
	if skLbRemoved {
		for _, name := range []string{socklbMapTraffic, socklbMapTraffic6} {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// New loads the programs and attaches them to cfg.Cgroup. With PinDir,
// pinned maps and links are adopted: their programs are replaced by
// these (never added beside them, where both would translate), and the
// services already in the map stay until a Sync says otherwise.
func New(cfg Config) (_ *Dataplane, err error) {
	if cfg.Cgroup == "" {
		return nil, errors.New("ebpf data plane: no cgroup")
	}
	cgID, err := cgroupID(cfg.Cgroup)
	if err != nil {
		return nil, err
	}
	spec, err := loadSocklb()
	if err != nil {
		return nil, err
	}
	var opts ebpf.CollectionOptions
	if cfg.PinDir != "" {
		if err := os.MkdirAll(cfg.PinDir, 0o700); err != nil {
			return nil, err
		}
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinByName
		}
		opts.Maps.PinPath = cfg.PinDir
	}
	d := &Dataplane{cfg: cfg, log: cfg.Log, cgroupID: cgID}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	// The counting maps adopted, not made anew, have sums another agent
	// may have reported (reported.go).
	had := pinnedCounting(cfg.PinDir)
	err = spec.LoadAndAssign(&d.objs, &opts)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// Pins of another version's maps (an entry that grew): they go,
		// and new maps take their place. Until the next Sync fills them
		// the programs translate nothing and nftables, which holds every
		// service too, serves those connections.
		if rmErr := removeIncompatiblePins(spec, cfg.PinDir); rmErr != nil {
			return nil, fmt.Errorf("load the socket programs: %w (%v)", err, rmErr)
		}
		had = pinnedCounting(cfg.PinDir)
		err = spec.LoadAndAssign(&d.objs, &opts)
	}
	if err != nil {
		return nil, fmt.Errorf("load the socket programs: %w", err)
	}
	d.c4 = &counted[svcKey]{m: d.objs.Counters, flowKey: flowKey}
	d.c6 = &counted[svcKey6]{m: d.objs.Counters6, flowKey: flowKey6}
	d.t4 = &table[svcKey, svcVal]{m: d.objs.Services, deleted: d.c4.forget, replaced: func(k svcKey, old, now *svcVal) {
		if terminates(k.Proto) {
			d.ended4 = append(d.ended4, endedPairs4(k, old, now)...)
		}
	}}
	d.t6 = &table[svcKey6, svcVal6]{m: d.objs.Services6, deleted: d.c6.forget, replaced: func(k svcKey6, old, now *svcVal6) {
		if terminates(k.Proto) {
			d.ended6 = append(d.ended6, endedPairs6(k, old, now)...)
		}
	}}
	d.f4 = &flowed[pairKey]{m: d.objs.Traffic, split: splitPair, held: func(k pairKey) bool {
		v, ok := d.t4.kernel[k.Svc]
		return ok && holds4(v, k)
	}, uncounted: func(k pairKey) bool { return k.Svc.Proto == unix.IPPROTO_UDP && d.datagramLinks == nil }}
	d.f6 = &flowed[pairKey6]{m: d.objs.Traffic6, split: splitPair6, held: func(k pairKey6) bool {
		v, ok := d.t6.kernel[k.Svc]
		return ok && holds6(v, k)
	}, uncounted: func(k pairKey6) bool { return k.Svc.Proto == unix.IPPROTO_UDP && d.datagramLinks == nil }}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	var primes []func(map[flows.Key]flows.Stats) error
	for _, r := range []struct {
		start func(*ebpf.Map, string, string, bool) (bool, error)
		m     *ebpf.Map
		name  string
		saved **ebpf.Map
		read  func(map[flows.Key]flows.Stats) error
	}{
		{d.c4.start, d.objs.Counters, socklbMapCounters, &d.c4.reported.m, d.c4.read},
		{d.c6.start, d.objs.Counters6, socklbMapCounters6, &d.c6.reported.m, d.c6.read},
		{d.f4.start, d.objs.Traffic, socklbMapTraffic, &d.f4.reported.m, d.f4.read},
		{d.f6.start, d.objs.Traffic6, socklbMapTraffic6, &d.f6.reported.m, d.f6.read},
	} {
		prime, err := r.start(r.m, cfg.PinDir, reportedNames[r.name], had[r.name])
		if *r.saved != nil {
			d.reported = append(d.reported, *r.saved)
		}
		if err != nil {
			return nil, err
		}
		if prime {
			primes = append(primes, r.read)
		}
	}
	for _, h := range hooks {
		l, err := d.attach(h.name, h.attach, h.prog(&d.objs.socklbPrograms))
		if err != nil {
			return nil, fmt.Errorf("attach %s to %s: %w", h.name, cfg.Cgroup, err)
		}
		d.links = append(d.links, l)
	}
	if d.tcp, d.tcpErr = newTCPCounter(&d.objs.socklbMaps); d.tcpErr == nil {
		if d.tcpLink, err = d.attach(socktcpProgCountTcp, ebpf.AttachCGroupSockOps, d.tcp.sockops.CountTcp); err != nil {
			return nil, fmt.Errorf("attach %s to %s: %w", socktcpProgCountTcp, cfg.Cgroup, err)
		}
		if d.tcp.iterErr != nil {
			d.log.Warn("the bytes of open TCP connections will be counted only when they close", "err", d.tcp.iterErr)
		}
	} else {
		d.log.Warn("the bytes of translated TCP connections will not be counted", "err", d.tcpErr)
	}
	// Without the iterators (a kernel before 6.5) the programs balance
	// all the same; only the sockets of a backend that leaves are kept.
	if d.term, d.termErr = newTerminator(d.objs.SkLb); d.termErr != nil {
		d.log.Warn("connected UDP sockets of backends that leave their service will not be destroyed", "err", d.termErr)
	}
	if err := d.t4.read(); err != nil {
		return nil, err
	}
	if err := d.t6.read(); err != nil {
		return nil, err
	}
	if err := d.countDatagrams(d.carriesUDP()); err != nil {
		return nil, err
	}
	// Counters adopted from an agent that kept no reported sums: what
	// they hold is taken as reported (open connections are not counters:
	// every read reports them whole).
	for _, read := range primes {
		if err := read(map[flows.Key]flows.Stats{}); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// attach links prog to the cgroup, or swaps it into the pinned link.
func (d *Dataplane) attach(name string, typ ebpf.AttachType, prog *ebpf.Program) (link.Link, error) {
	pin := ""
	if d.cfg.PinDir != "" {
		pin = filepath.Join(d.cfg.PinDir, "link_"+name)
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			if err := l.Update(prog); err != nil {
				l.Close()
				return nil, fmt.Errorf("replace the pinned link's program: %w", err)
			}
			return l, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: d.cfg.Cgroup, Attach: typ, Program: prog})
	if err != nil {
		return nil, err
	}
	if pin != "" {
		if err := l.Pin(pin); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Sync makes the services maps hold exactly t's carried services,
// writing only the entries that differ (a first load writes them all in
// one batch per family).
func (d *Dataplane) Sync(_ context.Context, t flows.Table) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.terminateEnded()
	defer d.countDatagramsAfter()
	var ss4, ss6 []flows.Service
	for _, s := range t.Services {
		if s.Key.VIP.Is4() {
			ss4 = append(ss4, s)
		} else {
			ss6 = append(ss6, s)
		}
	}
	d.countDatagramsBefore(ss4, ss6)
	cpus := runtime.GOMAXPROCS(0)
	n4, err := d.t4.sync(ss4, func(s flows.Service) (svcKey, svcVal, bool) { return encode(s, d.cfg.Node, d.cfg.Zone) }, cpus)
	d.lastOps = n4
	if err != nil {
		return err
	}
	n6, err := d.t6.sync(ss6, func(s flows.Service) (svcKey6, svcVal6, bool) { return encode6(s, d.cfg.Node, d.cfg.Zone) }, cpus)
	d.lastOps += n6
	return err
}

// Apply writes the upserted services that differ from the maps and
// deletes the others.
func (d *Dataplane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.t4.stale || d.t6.stale {
		return errors.New("ebpf data plane: a services map is out of step after a failed write; a Sync repairs it")
	}
	defer d.terminateEnded()
	// Only a UDP service deleted can leave none: then a scan tells.
	udpDeleted := false
	defer func() {
		if udpDeleted {
			d.countDatagramsAfter()
		}
	}()
	d.countDatagramsBefore(upserts)
	var b4 batch[svcKey, svcVal]
	var b6 batch[svcKey6, svcVal6]
	del := func(k flows.Key) {
		udpDeleted = udpDeleted || k.Protocol == flows.UDP
		switch {
		case !Carried(flows.Service{Key: k}):
		case k.VIP.Is4():
			d.t4.del(&b4, encodeKey(k))
		default:
			d.t6.del(&b6, encodeKey6(k))
		}
	}
	upserted := make(map[flows.Key]bool, len(upserts))
	for _, s := range upserts {
		upserted[s.Key] = true
		if k, v, ok := encode(s, d.cfg.Node, d.cfg.Zone); ok {
			d.t4.set(&b4, k, v)
		} else if k, v, ok := encode6(s, d.cfg.Node, d.cfg.Zone); ok {
			d.t6.set(&b6, k, v)
		} else {
			// Not (or no longer) the programs': nftables serves it alone.
			del(s.Key)
		}
	}
	for _, k := range deletes {
		if !upserted[k] {
			del(k)
		}
	}
	n4, err := d.t4.write(b4)
	d.lastOps = n4
	if err != nil {
		return err
	}
	n6, err := d.t6.write(b6)
	d.lastOps += n6
	return err
}

// countDatagramsBefore attaches the datagram counting programs before a
// write of services that brings a UDP one, so that its first datagrams
// are counted; countDatagramsAfter detaches them after a write that
// leaves none. Counting fails no change: what it could not do is logged.
func (d *Dataplane) countDatagramsBefore(services ...[]flows.Service) {
	for _, ss := range services {
		for _, s := range ss {
			if s.Key.Protocol == flows.UDP && Carried(s) {
				if err := d.countDatagrams(true); err != nil {
					d.log.Warn("the datagrams of translated UDP sockets will not be counted", "err", err)
				}
				return
			}
		}
	}
}

func (d *Dataplane) countDatagramsAfter() {
	if d.datagramLinks != nil && !d.carriesUDP() {
		if err := d.countDatagrams(false); err != nil {
			d.log.Warn("detaching the datagram counting programs", "err", err)
		}
	}
}

// carriesUDP reports whether the services maps hold a UDP service.
func (d *Dataplane) carriesUDP() bool {
	for k := range d.t4.kernel {
		if k.Proto == unix.IPPROTO_UDP {
			return true
		}
	}
	for k := range d.t6.kernel {
		if k.Proto == unix.IPPROTO_UDP {
			return true
		}
	}
	return false
}

// countDatagrams attaches datagramHooks (on) or detaches them and
// removes their pins, those of an earlier agent too.
func (d *Dataplane) countDatagrams(on bool) error {
	if on {
		if d.datagramLinks != nil {
			return nil
		}
		var ls []link.Link
		for _, h := range datagramHooks {
			l, err := d.attach(h.name, h.attach, h.prog(&d.objs.socklbPrograms))
			if err != nil {
				d.datagramLinks = ls
				return errors.Join(fmt.Errorf("attach %s to %s: %w", h.name, d.cfg.Cgroup, err), d.countDatagrams(false))
			}
			ls = append(ls, l)
		}
		d.datagramLinks = ls
		return nil
	}
	ls := d.datagramLinks
	d.datagramLinks = nil
	if d.cfg.PinDir != "" && ls == nil {
		for _, h := range datagramHooks {
			l, err := link.LoadPinnedLink(filepath.Join(d.cfg.PinDir, "link_"+h.name), nil)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
	}
	var errs []error
	for _, l := range ls {
		if d.cfg.PinDir != "" {
			errs = append(errs, l.Unpin())
		}
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// terminateEnded destroys the sockets of the pairs that the writes since
// the last call ended, in every network namespace of the cgroup's
// threads. It is best effort and fails no change: the services map is
// what new connections follow, and it is written.
func (d *Dataplane) terminateEnded() {
	p4, p6 := d.ended4, d.ended6
	d.ended4, d.ended6 = nil, nil
	if len(p4)+len(p6) == 0 || d.term == nil {
		return
	}
	start := time.Now()
	nss, err := socketNetns(d.cfg.Cgroup)
	res := termination{Pairs: len(p4) + len(p6)}
	if err != nil {
		res.Err = fmt.Errorf("list the network namespaces of %s: %w", d.cfg.Cgroup, err)
	} else {
		res = d.term.run(nss, p4, p6)
	}
	d.lastTerm = res
	attrs := []any{"pairs", res.Pairs, "namespaces", res.Namespaces, "destroyed", res.Destroyed, "failed", res.Failed, "took", time.Since(start)}
	switch {
	case res.Err != nil:
		d.log.Warn("destroying the sockets of backends that left their service", append(attrs, "err", res.Err)...)
	case res.Destroyed > 0 || res.Failed > 0:
		d.log.Info("sockets of backends that left their service destroyed", attrs...)
	}
}

// Close releases this process's hold. Without PinDir that detaches the
// programs and frees the maps; with it, the pins keep them working.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.close()
}

func (d *Dataplane) close() error {
	if d.term != nil {
		d.term.close()
		d.term = nil
	}
	if d.tcp != nil {
		d.tcp.close()
		d.tcp = nil
	}
	for _, l := range append(d.allLinks(), d.datagramLinks...) {
		l.Close()
	}
	d.links, d.tcpLink, d.datagramLinks = nil, nil, nil
	for _, m := range d.reported {
		m.Close()
	}
	return d.objs.Close()
}

// allLinks are the links attached for good: hooks' and the TCP counting's.
func (d *Dataplane) allLinks() []link.Link {
	if d.tcpLink == nil {
		return d.links
	}
	return append(slices.Clip(d.links), d.tcpLink)
}

// Remove detaches the programs, frees the maps and removes the pins.
func (d *Dataplane) Remove() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	errs := []error{d.countDatagrams(false)}
	for _, l := range d.allLinks() {
		if d.cfg.PinDir != "" {
			errs = append(errs, l.Unpin())
		}
	}
	if d.cfg.PinDir != "" {
		for _, m := range []*ebpf.Map{d.objs.Services, d.objs.Revnat, d.objs.Counters, d.objs.Affinity,
			d.objs.Services6, d.objs.Revnat6, d.objs.Counters6, d.objs.Affinity6,
			d.objs.Traffic, d.objs.Traffic6, d.objs.SkLb} {
			errs = append(errs, m.Unpin())
		}
		for _, m := range d.reported {
			errs = append(errs, m.Unpin())
		}
	}
	errs = append(errs, d.close())
	if d.cfg.PinDir != "" {
		errs = append(errs, os.Remove(d.cfg.PinDir))
	}
	return errors.Join(errs...)
}
