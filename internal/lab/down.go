package lab

// Teardown: removing a lab, also one whose `lab up` crashed, and finding
// the labs present on the machine.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/lab/realnode"
)

// Down removes the lab.
func (l *Lab) Down() error {
	root := filepath.Dir(l.dir)
	return Down(l.name, root)
}

// Down removes lab name completely: its processes (from the state file,
// its cgroup and a scan of every process's namespace), its namespaces
// (and with them every link and route), its cgroups and its state
// directory. It needs nothing but the name, so it also cleans up after a
// lab (or a `lab up`) that crashed; it is idempotent.
func Down(name, root string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	dir := filepath.Join(stateRoot(root), name)
	var errs []error
	nss, err := listNS(Prefix(name))
	if err != nil {
		errs = append(errs, err)
	}
	// Kill first: a namespace only goes away once no process holds it.
	if err := killCgroupProcs(cgroupDir(name)); err != nil {
		errs = append(errs, err)
	}
	inodes := map[uint64]bool{}
	for _, ns := range nss {
		if ino, err := nsInode(ns); err == nil {
			inodes[ino] = true
		}
	}
	pids := pidsInNS(inodes)
	if s, err := readState(dir); err == nil {
		for _, p := range s.Procs {
			if p.alive() {
				pids = append(pids, p.PID)
			}
		}
	}
	if err := killAndWait(pids, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range nss {
		if err := deleteNS(ns); err != nil {
			errs = append(errs, err)
		}
	}
	// Real nodes' pods have cgroups of the lab's name in the cgroup v1
	// hierarchies too (the kubelet's cgroupfs driver): their processes
	// are waited for until gone from every hierarchy (a container's
	// take a while to die), then the trees removed.
	if err := realnode.RemoveRoot("/flb-" + name); err != nil {
		errs = append(errs, err)
	}
	if err := killCgroup(cgroupDir(name)); err != nil {
		errs = append(errs, err)
	}
	// The agents are dead: unmounting frees the eBPF data plane's pins,
	// programs and maps (its bpffs) and etcd's memory (its tmpfs), and
	// lets RemoveAll remove the mount points.
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	} else if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DownOrphans removes every lab whose owner process (Options.Owned) has
// exited, and returns their names. Labs without an owner (made by the
// CLI) and labs of live processes are left alone, so concurrent test
// binaries can call it safely.
func DownOrphans(root string) ([]string, error) {
	var gone []string
	var errs []error
	for _, name := range Labs(root) {
		s, err := readState(filepath.Join(stateRoot(root), name))
		if err != nil || s.Owner == nil || s.Owner.alive() {
			continue
		}
		if err := Down(name, root); err != nil {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, name)
	}
	return gone, errors.Join(errs...)
}

// killCgroupProcs kills the lab's cgroup tree without waiting.
func killCgroupProcs(dir string) error {
	if dir == "" {
		return nil
	}
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	return nil
}

// Labs lists the names of labs present on the machine, found by state
// directory, namespace and cgroup prefix.
func Labs(root string) []string {
	seen := map[string]bool{}
	if ents, err := os.ReadDir(stateRoot(root)); err == nil {
		for _, e := range ents {
			if ValidName(e.Name()) == nil {
				seen[e.Name()] = true
			}
		}
	}
	if nss, err := listNS("flb-"); err == nil {
		for _, ns := range nss {
			if n := labOfNS(ns); n != "" {
				seen[n] = true
			}
		}
	}
	if cg := cgroup2Root(); cg != "" {
		if ents, err := os.ReadDir(cg); err == nil {
			for _, e := range ents {
				if rest, ok := strings.CutPrefix(e.Name(), "flb-"); ok && ValidName(rest) == nil {
					seen[rest] = true
				}
			}
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// unmountUnder detaches every mount below dir (the lab's bpffs, etcd's
// tmpfs), deepest first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		// ID parent major:minor root mountpoint ...; a mount point's
		// spaces are escaped (\040), and a lab's paths have none.
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
