// Package ebpf is flowlb's socket-level data plane: cgroup programs that
// translate a service's VIP:port into a backend when a local socket
// connects (TCP, connected UDP) or sends (unconnected UDP), and show the
// VIP again to getpeername() and recvmsg(). Packets of such connections
// carry the backend's address from the start: no NAT, no conntrack.
// Traffic that does not start on a local socket of the cgroup (clients
// from outside, node ports, forwarded packets) and the services the
// programs do not carry (Carried) stay with the nftables data plane,
// which the agent runs beside this one. The programs and bindings are
// generated from bpf/socklb.c by bpf2go (make generate).
package ebpf

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/flowlb/flowlb/internal/flows"
)

// hooks are the programs and where they attach.
var hooks = []struct {
	name   string
	attach ebpf.AttachType
}{
	{socklbProgConnect4, ebpf.AttachCGroupInet4Connect},
	{socklbProgSendmsg4, ebpf.AttachCGroupUDP4Sendmsg},
	{socklbProgRecvmsg4, ebpf.AttachCGroupUDP4Recvmsg},
	{socklbProgGetpeername4, ebpf.AttachCgroupInet4GetPeername},
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
}

// Dataplane is the socket programs attached to one cgroup and the
// services map they read.
type Dataplane struct {
	cfg   Config
	objs  socklbObjects
	links []link.Link
	// kernel is what the services map holds, as this process last wrote
	// or read it; stale after a failed write, until Sync reads it again.
	kernel map[svcKey]svcVal
	stale  bool
	// lastOps counts the map entries the last Sync or Apply wrote or
	// deleted.
	lastOps int
}

// New loads the programs and attaches them to cfg.Cgroup. With PinDir,
// pinned maps and links are adopted: their programs are replaced by
// these (never added beside them, where both would translate), and the
// services already in the map stay until a Sync says otherwise.
func New(cfg Config) (_ *Dataplane, err error) {
	if cfg.Cgroup == "" {
		return nil, errors.New("ebpf data plane: no cgroup")
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
	d := &Dataplane{cfg: cfg, kernel: map[svcKey]svcVal{}}
	if err := spec.LoadAndAssign(&d.objs, &opts); err != nil {
		return nil, fmt.Errorf("load the socket programs: %w", err)
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	progs := map[string]*ebpf.Program{
		socklbProgConnect4: d.objs.Connect4, socklbProgSendmsg4: d.objs.Sendmsg4,
		socklbProgRecvmsg4: d.objs.Recvmsg4, socklbProgGetpeername4: d.objs.Getpeername4,
	}
	for _, h := range hooks {
		l, err := d.attach(h.name, h.attach, progs[h.name])
		if err != nil {
			return nil, fmt.Errorf("attach %s to %s: %w", h.name, cfg.Cgroup, err)
		}
		d.links = append(d.links, l)
	}
	if err := d.read(); err != nil {
		return nil, err
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

// read makes kernel what the services map holds.
func (d *Dataplane) read() error {
	kernel := map[svcKey]svcVal{}
	var k svcKey
	var v svcVal
	it := d.objs.Services.Iterate()
	for it.Next(&k, &v) {
		kernel[k] = v
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the services map: %w", err)
	}
	d.kernel, d.stale = kernel, false
	return nil
}

// Sync makes the services map hold exactly t's carried services, writing
// only the entries that differ (a first load writes them all in one batch).
func (d *Dataplane) Sync(_ context.Context, t flows.Table) error {
	if d.stale {
		if err := d.read(); err != nil {
			return err
		}
	}
	var w writes
	want := make(map[svcKey]bool, len(t.Services))
	for _, e := range d.encodeAll(t) {
		if e.ok {
			want[e.k] = true
			w.set(d, e.k, e.v)
		}
	}
	for k := range d.kernel {
		if !want[k] {
			w.dels = append(w.dels, k)
		}
	}
	return d.write(w)
}

// encoded is one service's map entry (ok: the programs carry it).
type encoded struct {
	k  svcKey
	v  svcVal
	ok bool
}

// encodeAll encodes t's services on every CPU: their Maglev tables are
// most of a full load's time.
func (d *Dataplane) encodeAll(t flows.Table) []encoded {
	ss := slices.Collect(maps.Values(t.Services))
	out := make([]encoded, len(ss))
	workers := min(runtime.GOMAXPROCS(0), len(ss)/1000+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(ss); i += workers {
				out[i].k, out[i].v, out[i].ok = encode(ss[i], d.cfg.Node, d.cfg.Zone)
			}
		})
	}
	wg.Wait()
	return out
}

// Apply writes the upserted services that differ from the map and
// deletes the others.
func (d *Dataplane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	if d.stale {
		return errors.New("ebpf data plane: the services map is out of step after a failed write; a Sync repairs it")
	}
	var w writes
	upserted := make(map[flows.Key]bool, len(upserts))
	for _, s := range upserts {
		upserted[s.Key] = true
		if k, v, ok := encode(s, d.cfg.Node, d.cfg.Zone); ok {
			w.set(d, k, v)
		} else {
			// Not (or no longer) the programs': nftables serves it alone.
			w.del(d, s.Key)
		}
	}
	for _, k := range deletes {
		if !upserted[k] {
			w.del(d, k)
		}
	}
	return d.write(w)
}

// writes are the map entries one change stores and deletes.
type writes struct {
	keys []svcKey
	vals []svcVal
	dels []svcKey
	gone map[svcKey]bool // dels, to delete each once
}

// set stores k unless the map holds v for it already.
func (w *writes) set(d *Dataplane, k svcKey, v svcVal) {
	if old, ok := d.kernel[k]; !ok || old != v {
		w.keys, w.vals = append(w.keys, k), append(w.vals, v)
	}
}

// del deletes the service of k if the map holds it.
func (w *writes) del(d *Dataplane, k flows.Key) {
	if !Carried(flows.Service{Key: k}) {
		return
	}
	ek := encodeKey(k)
	if _, ok := d.kernel[ek]; !ok || w.gone[ek] {
		return
	}
	if w.gone == nil {
		w.gone = map[svcKey]bool{}
	}
	w.gone[ek] = true
	w.dels = append(w.dels, ek)
}

// write stores and deletes w's entries, in one batch each.
func (d *Dataplane) write(w writes) error {
	d.lastOps = len(w.keys) + len(w.dels)
	if len(w.keys) > 0 {
		if _, err := d.objs.Services.BatchUpdate(w.keys, w.vals, nil); err != nil {
			d.stale = true
			return fmt.Errorf("write %d services: %w", len(w.keys), err)
		}
		if len(d.kernel) == 0 {
			d.kernel = make(map[svcKey]svcVal, len(w.keys))
		}
		for i, k := range w.keys {
			d.kernel[k] = w.vals[i]
		}
	}
	if len(w.dels) > 0 {
		if _, err := d.objs.Services.BatchDelete(w.dels, nil); err != nil {
			d.stale = true
			return fmt.Errorf("delete %d services: %w", len(w.dels), err)
		}
		for _, k := range w.dels {
			delete(d.kernel, k)
		}
	}
	return nil
}

// Close releases this process's hold. Without PinDir that detaches the
// programs and frees the maps; with it, the pins keep them working.
func (d *Dataplane) Close() error {
	for _, l := range d.links {
		l.Close()
	}
	d.links = nil
	return d.objs.Close()
}

// Remove detaches the programs, frees the maps and removes the pins.
func (d *Dataplane) Remove() error {
	var errs []error
	for _, l := range d.links {
		if d.cfg.PinDir != "" {
			errs = append(errs, l.Unpin())
		}
	}
	if d.cfg.PinDir != "" {
		errs = append(errs, d.objs.Services.Unpin(), d.objs.Revnat.Unpin())
	}
	errs = append(errs, d.Close())
	if d.cfg.PinDir != "" {
		errs = append(errs, os.Remove(d.cfg.PinDir))
	}
	return errors.Join(errs...)
}
