package lab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted; it is the
// directory iproute2 uses, so `ip netns` and `ip netns exec` see the lab.
const NetnsDir = "/run/netns"

// NSPath is the bind-mount path of a named namespace.
func NSPath(ns string) string { return filepath.Join(NetnsDir, ns) }

var netnsDirOnce sync.Once
var netnsDirErr error

// ensureNetnsDir prepares /run/netns the way `ip netns add` does: a shared
// mount point, so that namespace mounts propagate into mount namespaces
// created later (ip netns exec) and can be removed from any of them.
func ensureNetnsDir() error {
	netnsDirOnce.Do(func() {
		if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
			netnsDirErr = err
			return
		}
		if !isMountPoint(NetnsDir) {
			if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				netnsDirErr = fmt.Errorf("bind %s: %w", NetnsDir, err)
				return
			}
		}
		if err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			netnsDirErr = fmt.Errorf("make %s shared: %w", NetnsDir, err)
		}
	})
	return netnsDirErr
}

func isMountPoint(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

// onThread runs fn on an OS thread locked for the duration, and returns
// the thread to the Go scheduler only if fn left it in the namespace it
// started in (fn reports that). Otherwise the goroutine exits still
// locked and the runtime discards the thread, so no goroutine ever runs
// in a foreign namespace by accident.
func onThread(fn func() (clean bool, err error)) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		clean, err := fn()
		if clean {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// threadNS opens the calling thread's network namespace.
func threadNS() (int, error) {
	return unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// EnterNS moves the calling thread, which must be locked to its goroutine,
// into the named namespace. back moves it to where it was and reports
// whether that worked; if not, the caller must keep the thread locked so
// that the runtime discards it.
func EnterNS(ns string) (back func() bool, err error) {
	orig, err := threadNS()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(NSPath(ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(orig)
		return nil, fmt.Errorf("open netns %s: %w", ns, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		unix.Close(orig)
		return nil, fmt.Errorf("enter netns %s: %w", ns, err)
	}
	return func() bool {
		defer unix.Close(orig)
		return unix.Setns(orig, unix.CLONE_NEWNET) == nil
	}, nil
}

// InNS runs fn on a locked OS thread inside the named network namespace.
// Sockets fn opens and processes fn starts belong to that namespace;
// goroutines fn starts do not.
func InNS(ns string, fn func() error) error {
	return onThread(func() (bool, error) {
		back, err := EnterNS(ns)
		if err != nil {
			return true, err
		}
		err = fn()
		return back(), err
	})
}

// createNS makes a named network namespace and runs setup inside it
// before anything else can see it. The namespace is a fresh one: it has
// only a loopback device and no route at all.
func createNS(ns string, setup func() error) (err error) {
	if err := ensureNetnsDir(); err != nil {
		return err
	}
	path := NSPath(ns)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create netns %s: %w", ns, err)
	}
	f.Close()
	defer func() {
		if err != nil {
			_ = deleteNS(ns)
		}
	}()
	return onThread(func() (bool, error) {
		orig, err := threadNS()
		if err != nil {
			return true, err
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return true, fmt.Errorf("unshare netns %s: %w", ns, err)
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("mount netns %s: %w", ns, err)
		} else if setup != nil {
			err = setup()
		}
		return unix.Setns(orig, unix.CLONE_NEWNET) == nil, err
	})
}

// deleteNS unmounts and removes a named namespace. The kernel frees the
// namespace, and with it every link and route inside, once no process and
// no mount holds it any more.
func deleteNS(ns string) error {
	path := NSPath(ns)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", ns, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", ns, err)
	}
	return nil
}

// nsExists reports whether a named namespace is present.
func nsExists(ns string) bool {
	_, err := os.Stat(NSPath(ns))
	return err == nil
}

// listNS returns the names of namespaces under NetnsDir that start with
// prefix.
func listNS(prefix string) ([]string, error) {
	ents, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// nsInode is the inode that identifies the namespace mounted at ns; the
// same number appears in /proc/PID/ns/net of its processes.
func nsInode(ns string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(NSPath(ns), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Handle opens a netlink handle bound to the named namespace, usable from
// any goroutine. Close it when done.
func Handle(ns string) (*netlink.Handle, error) {
	h, err := netns.GetFromPath(NSPath(ns))
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", ns, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", ns, err)
	}
	return nh, nil
}
