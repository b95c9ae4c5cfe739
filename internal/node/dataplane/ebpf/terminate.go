package ebpf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Terminating the sockets of pairs that ended. A socket that connect()
// translated keeps its backend for its life (the translation is done
// once); when that backend leaves the service, a connected UDP socket
// would go on sending to it, where nftables' conntrack cleanup moves a
// client that keeps sending to another backend. So the data plane
// destroys such sockets: their owners get an error and connect again,
// through the VIP. What is destroyed is decided by pairs (service,
// backend), from the services map's old and new values (endedPairs);
// which sockets carry a pair only the kernel knows (their sk_lb
// storage), so BPF iterators over each network namespace's sockets
// (bpf/sockterm.c) look it up and destroy the matching ones
// (bpf_sock_destroy, Linux 6.5).

// terminates tells the services whose sockets are destroyed when a
// backend leaves: UDP only, as nftables clears UDP conntrack entries
// only. An established TCP connection is the application's to keep
// (a drained backend finishes it) or to lose (a dead backend's
// connection ends in a reset or a timeout, which TCP reports itself).
func terminates(proto uint8) bool { return proto == unix.IPPROTO_UDP }

// endedPairs4 returns the pairs of service k whose backend held a slot
// of old and holds none of now (nil: the service was deleted). A
// refusing value holds no backend.
func endedPairs4(k svcKey, old, now *svcVal) []pairKey {
	if old.Flags&flagRefuse != 0 {
		return nil
	}
	var out []pairKey
	for _, b := range old.Slots {
		p := pairKey{Svc: k, Be: b}
		if contains(out, p) || now != nil && now.Flags&flagRefuse == 0 && holds4(now, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// endedPairs6 is endedPairs4 for an IPv6 service.
func endedPairs6(k svcKey6, old, now *svcVal6) []pairKey6 {
	if old.Flags&flagRefuse != 0 {
		return nil
	}
	var out []pairKey6
	for _, b := range old.Slots {
		p := pairKey6{Svc: k, Be: b}
		if contains(out, p) || now != nil && now.Flags&flagRefuse == 0 && holds6(now, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// contains is slices.Contains for the few backends of one service.
func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// endedMax is the entries of the ended and ended6 maps: more pairs are
// terminated in rounds.
const endedMax = 65536

// terminator is the iterators of sockterm.c, loaded against the socket
// programs' sk_lb map.
type terminator struct {
	objs     socktermObjects
	tcp, udp *link.Iter
}

// newTerminator loads the iterators. It fails on a kernel without
// bpf_sock_destroy (before 6.5), BPF iterators or BTF.
func newTerminator(skLb *ebpf.Map) (_ *terminator, err error) {
	spec, err := loadSockterm()
	if err != nil {
		return nil, err
	}
	t := &terminator{}
	opts := ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{socktermMapSkLb: skLb}}
	if err := spec.LoadAndAssign(&t.objs, &opts); err != nil {
		return nil, fmt.Errorf("load the socket iterators: %w", err)
	}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.tcp, err = link.AttachIter(link.IterOptions{Program: t.objs.TermTcp}); err != nil {
		return nil, fmt.Errorf("attach the TCP socket iterator: %w", err)
	}
	if t.udp, err = link.AttachIter(link.IterOptions{Program: t.objs.TermUdp}); err != nil {
		return nil, fmt.Errorf("attach the UDP socket iterator: %w", err)
	}
	return t, nil
}

func (t *terminator) close() {
	for _, l := range []*link.Iter{t.tcp, t.udp} {
		if l != nil {
			l.Close()
		}
	}
	t.objs.Close()
}

// termination is what one run did.
type termination struct {
	// Pairs ended, namespaces walked.
	Pairs, Namespaces int
	// Sockets destroyed, and those the kernel failed to destroy.
	Destroyed, Failed uint64
	// Err joins what went wrong: a namespace not entered, an iterator
	// that failed. The other namespaces were walked all the same.
	Err error
}

// run destroys the sockets of the pairs p4 and p6, in every network
// namespace of nss.
func (t *terminator) run(nss []netnsRef, p4 []pairKey, p6 []pairKey6) termination {
	res := termination{Pairs: len(p4) + len(p6)}
	var d0, f0 uint64
	if err := errors.Join(t.objs.Destroyed.Get(&d0), t.objs.Failed.Get(&f0)); err != nil {
		res.Err = err
		return res
	}
	var errs []error
	for len(p4) > 0 || len(p6) > 0 {
		n4, n6 := min(len(p4), endedMax), min(len(p6), endedMax)
		var tcp, udp bool
		for _, p := range p4[:n4] {
			tcp, udp = tcp || p.Svc.Proto == unix.IPPROTO_TCP, udp || p.Svc.Proto == unix.IPPROTO_UDP
		}
		for _, p := range p6[:n6] {
			tcp, udp = tcp || p.Svc.Proto == unix.IPPROTO_TCP, udp || p.Svc.Proto == unix.IPPROTO_UDP
		}
		var iters []*link.Iter
		if tcp {
			iters = append(iters, t.tcp)
		}
		if udp {
			iters = append(iters, t.udp)
		}
		if err := fill(t.objs.Ended, p4[:n4]); err != nil {
			errs = append(errs, err)
		} else if err := fill(t.objs.Ended6, p6[:n6]); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, walk(nss, iters))
		}
		errs = append(errs, empty(t.objs.Ended, p4[:n4]), empty(t.objs.Ended6, p6[:n6]))
		p4, p6 = p4[n4:], p6[n6:]
	}
	res.Namespaces = len(nss)
	var d1, f1 uint64
	errs = append(errs, t.objs.Destroyed.Get(&d1), t.objs.Failed.Get(&f1))
	res.Destroyed, res.Failed = d1-d0, f1-f0
	res.Err = errors.Join(errs...)
	return res
}

func fill[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := m.BatchUpdate(keys, make([]uint8, len(keys)), nil); err != nil {
		return fmt.Errorf("write %d ended pairs: %w", len(keys), err)
	}
	return nil
}

func empty[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := m.BatchDelete(keys, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete %d ended pairs: %w", len(keys), err)
	}
	return nil
}

// walk runs the iterators in each namespace of nss. An iterator walks
// the sockets of the namespace of the thread that opens it, so this
// enters each one on a thread of its own, which it never gives back:
// the thread ends with the goroutine, in whatever namespace it is.
func walk(nss []netnsRef, iters []*link.Iter) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var errs []error
		for _, ns := range nss {
			if err := walkIn(ns, iters); err != nil {
				errs = append(errs, fmt.Errorf("network namespace %d (of thread %s): %w", ns.ino, ns.tid, err))
			}
		}
		errc <- errors.Join(errs...)
	}()
	return <-errc
}

func walkIn(ns netnsRef, iters []*link.Iter) error {
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return err
	}
	if self.Dev != ns.dev || self.Ino != ns.ino {
		fd, err := unix.Open(ns.path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("enter: %w", err)
		}
	}
	for _, it := range iters {
		if err := drain(it); err != nil {
			return err
		}
	}
	return nil
}

// drain runs an iterator over what it walks, its programs' output
// discarded.
func drain(it *link.Iter) error {
	r, err := it.Open()
	if err != nil {
		return fmt.Errorf("open a socket iterator: %w", err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("iterate the sockets: %w", err)
	}
	return nil
}

// netnsRef is a network namespace and a thread in it ("self": this
// process's main thread).
type netnsRef struct {
	dev, ino uint64
	tid      string
}

func (n netnsRef) path() string { return "/proc/" + n.tid + "/ns/net" }

// socketNetns lists the network namespaces where the sockets of a
// cgroup's processes are: this process's own, first, which it walks
// without entering it, and those of the threads of the cgroup and of
// the cgroups below it. A thread that is gone, or that this process may
// not look at, is skipped (sockets match by their storage: a namespace
// walked in vain costs time only).
func socketNetns(cgroup string) ([]netnsRef, error) {
	seen := map[[2]uint64]bool{}
	var out []netnsRef
	add := func(tid string) {
		ref := netnsRef{tid: tid}
		var st unix.Stat_t
		if unix.Stat(ref.path(), &st) != nil {
			return
		}
		ref.dev, ref.ino = st.Dev, st.Ino
		if k := [2]uint64{st.Dev, st.Ino}; !seen[k] {
			seen[k] = true
			out = append(out, ref)
		}
	}
	add("self")
	err := filepath.WalkDir(cgroup, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p != cgroup && errors.Is(err, fs.ErrNotExist) {
				return nil // a cgroup removed during the walk
			}
			return err
		}
		if !e.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.threads"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, tid := range strings.Fields(string(b)) {
			add(tid)
		}
		return nil
	})
	return out, err
}

// SocketTermination is nil when the data plane destroys the connected
// UDP sockets translated to a backend that leaves its service, and
// otherwise why the kernel refused the iterators that do it (the data
// plane balances all the same).
func (d *Dataplane) SocketTermination() error { return d.termErr }
