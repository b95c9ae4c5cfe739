package ebpf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/dataplane"
)

// Scope of a check: the services maps read whole (in batches), and
// every link's attachment and pin.
const scopeMaps = "maps"

// Verify checks the kernel against what the data plane wrote and
// attached, and writes again what differs:
//
//   - the services maps, read whole in batches and compared with the
//     record of what was written: an entry another process deleted or
//     changed is written again, one it added is deleted. No socket is
//     ended by a repair (that is only for backends a change of services
//     removes): sockets translated before keep their backend;
//   - the cgroup links of the programs (the eight hooks, the TCP
//     counting's, the datagram counting's while a UDP service is
//     carried): one detached (BPF_LINK_DETACH) is replaced by a new link
//     to the cgroup, pinned in its place; one given another program gets
//     this data plane's again; a pin removed is pinned again, so that a
//     restarted agent does not attach a second link beside it.
//
// No event tells of these changes: the agent runs Verify periodically.
// A services map left out of step by a failed write is not checked (the
// next Sync rewrites it).
func (d *Dataplane) Verify(_ context.Context) (dataplane.Check, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	check := dataplane.Check{Scope: scopeMaps}
	var errs []error
	if err := verifyTable(d.t4, socklbMapServices, now, &check); err != nil {
		errs = append(errs, err)
	}
	if err := verifyTable(d.t6, socklbMapServices6, now, &check); err != nil {
		errs = append(errs, err)
	}
	if err := d.verifyLinks(now, &check); err != nil {
		errs = append(errs, err)
	}
	return check, errors.Join(errs...)
}

// verifyTable compares a services map with the record and repairs it.
func verifyTable[K, V comparable](t *table[K, V], name string, now time.Time, check *dataplane.Check) error {
	if t.stale {
		return nil
	}
	got, err := readMap[K, V](t.m)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	put, del := diffEntries(t.kernel, got)
	if len(put) > 0 {
		vals := make([]V, len(put))
		for i, k := range put {
			vals[i] = *t.kernel[k]
		}
		if _, err := t.m.BatchUpdate(put, vals, nil); err != nil {
			return fmt.Errorf("write %d entries of %s again: %w", len(put), name, err)
		}
	}
	if len(del) > 0 {
		if _, err := t.m.BatchDelete(del, nil); err != nil {
			return fmt.Errorf("delete another's %d entries of %s: %w", len(del), name, err)
		}
	}
	if n := len(put) + len(del); n > 0 {
		check.Repair(dataplane.EBPFMap, n, now, fmt.Sprintf("%s: %d entries written again, %d of another's deleted", name, len(put), len(del)))
	}
	return nil
}

// diffEntries is what makes a map hold want from got: the keys to write
// (missing, or of another value) and to delete (another's), in a stable
// order.
func diffEntries[K, V comparable](want map[K]*V, got map[K]V) (put, del []K) {
	for k, w := range want {
		if g, ok := got[k]; !ok || g != *w {
			put = append(put, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			del = append(del, k)
		}
	}
	order := func(a, b K) int { return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b)) }
	slices.SortFunc(put, order)
	slices.SortFunc(del, order)
	return put, del
}

// mapBatch is how many entries one batch lookup reads.
const mapBatch = 1024

// readMap reads a hash map whole, in batches (a few system calls for
// thousands of entries), or entry by entry where batches are refused.
func readMap[K comparable, V any](m *ebpf.Map) (map[K]V, error) {
	out := map[K]V{}
	keys, vals := make([]K, mapBatch), make([]V, mapBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			out[keys[i]] = vals[i]
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.ENOSPC) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	out = map[K]V{}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	return out, it.Err()
}

// verifyLinks checks each link the data plane holds, and that the
// datagram counting is attached while a UDP service is carried.
func (d *Dataplane) verifyLinks(now time.Time, check *dataplane.Check) error {
	var errs []error
	fix := func(l *link.Link, name string, typ ebpf.AttachType, prog *ebpf.Program) {
		what, err := d.verifyLink(l, name, typ, prog)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if what != "" {
			check.Repair(dataplane.EBPFAttach, 1, now, name+": "+what)
		}
	}
	for i, h := range hooks {
		if i < len(d.links) {
			fix(&d.links[i], h.name, h.attach, h.prog(&d.objs.socklbPrograms))
		}
	}
	if d.tcpLink != nil {
		fix(&d.tcpLink, socktcpProgCountTcp, ebpf.AttachCGroupSockOps, d.tcp.sockops.CountTcp)
	}
	for i, h := range datagramHooks {
		if i < len(d.datagramLinks) {
			fix(&d.datagramLinks[i], h.name, h.attach, h.prog(&d.objs.socklbPrograms))
		}
	}
	if d.datagramLinks == nil && d.carriesUDP() {
		if err := d.countDatagrams(true); err != nil {
			errs = append(errs, err)
		} else {
			check.Repair(dataplane.EBPFAttach, len(d.datagramLinks), now, "datagram counting attached again")
		}
	}
	return errors.Join(errs...)
}

// verifyLink repairs one link: attached anew if it was detached, given
// its program back if another replaced it, pinned again if its pin went.
// It says what it did ("": nothing).
func (d *Dataplane) verifyLink(l *link.Link, name string, typ ebpf.AttachType, prog *ebpf.Program) (string, error) {
	info, err := (*l).Info()
	if err != nil {
		return "", err
	}
	pin := ""
	if d.cfg.PinDir != "" {
		pin = filepath.Join(d.cfg.PinDir, "link_"+name)
	}
	if cg := info.Cgroup(); cg == nil || cg.CgroupId != d.cgroupID {
		// Detached: the link is dead for good; a new one takes its place
		// and its pin.
		if pin != "" {
			if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", err
			}
		}
		(*l).Close()
		nl, err := d.attach(name, typ, prog)
		if err != nil {
			return "", fmt.Errorf("attach again: %w", err)
		}
		*l = nl
		return "attached again", nil
	}
	pi, err := prog.Info()
	if err != nil {
		return "", err
	}
	if id, ok := pi.ID(); ok && info.Program != id {
		if err := (*l).Update(prog); err != nil {
			return "", fmt.Errorf("give the link its program back: %w", err)
		}
		return "program put back", nil
	}
	if pin != "" {
		if _, err := os.Stat(pin); errors.Is(err, os.ErrNotExist) {
			// The link remembers its path: forget it, or Pin does nothing.
			_ = (*l).Unpin()
			if err := (*l).Pin(pin); err != nil {
				return "", fmt.Errorf("pin again: %w", err)
			}
			return "pinned again", nil
		}
	}
	return "", nil
}

// cgroupID is a cgroup v2 directory's id: its inode.
func cgroupID(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return st.Ino, nil
}
