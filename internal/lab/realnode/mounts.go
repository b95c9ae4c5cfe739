package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// isolate gives the node's mount namespace (Run's, made by the lab's
// spawn with propagation private) its own copies of what the kubelet,
// containerd, runc and the CNI plugins write at fixed paths whatever
// their flags say:
//   - /run is a fresh tmpfs (containerd's shim sockets, fifos and runc
//     state in /run/containerd, CRI's pod network namespaces in
//     /run/netns, iptables' lock), with the directories of s.Keep (the
//     lab's state, where the node's own directory is) moved back in as
//     they are;
//   - /var is an overlay whose upper layer is the node's (/var/lib/kubelet
//     with its device plugins and pods, /var/log/pods and
//     /var/log/containers, /var/lib/cni), so the machine's /var is read
//     and never written;
//   - each kernel tunable the kubelet would set machine-wide
//     (KernelTunables) is a file of the node's, bound over its /proc/sys
//     entry.
//
// Run's namespace was made private by its spawn before any of this, so
// none of it reaches the machine's. The mounts go with the namespace when its last process exits.
func isolate(s *Spec) error {
	var kept []int
	defer func() {
		for _, fd := range kept {
			unix.Close(fd)
		}
	}()
	for _, k := range s.Keep {
		if !strings.HasPrefix(k, "/run/") {
			return fmt.Errorf("keep %s: not below /run", k)
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, k, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("clone the mounts of %s: %w", k, err)
		}
		kept = append(kept, fd)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		return fmt.Errorf("a fresh /run: %w", err)
	}
	for i, k := range s.Keep {
		if err := os.MkdirAll(k, 0o755); err != nil {
			return err
		}
		if err := unix.MoveMount(kept[i], "", unix.AT_FDCWD, k, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("keep %s: %w", k, err)
		}
	}
	for _, d := range []string{"/run/containerd", "/run/netns", "/run/lock"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	upper, work := s.path("var", "upper"), s.path("var", "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("overlay", "/var", "overlay", 0, "lowerdir=/var,upperdir="+upper+",workdir="+work); err != nil {
		return fmt.Errorf("/var as an overlay of the node's: %w", err)
	}
	if err := os.MkdirAll(s.path("sysctl"), 0o755); err != nil {
		return err
	}
	for name, v := range KernelTunables {
		f := s.path("sysctl", strings.ReplaceAll(name, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
		target := filepath.Join("/proc/sys", name)
		if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
			continue // a kernel without it: the kubelet leaves it too
		}
		if err := unix.Mount(f, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", target, err)
		}
	}
	// Shared again, within this namespace only (the spawn made it
	// private first, so no peer group reaches the machine's): volumes
	// with mount propagation need their source on a shared mount.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make / shared in the node's namespace: %w", err)
	}
	return nil
}
