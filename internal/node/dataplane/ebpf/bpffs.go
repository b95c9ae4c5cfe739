package ebpf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// MountBPFFS mounts a bpffs at dir unless one is there already (Debian
// mounts none by default; pins need one).
func MountBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", dir, err)
	}
	return nil
}

// Cleanup removes what an agent pinned in pinDir: the maps are freed and
// the programs detached once no process holds them (a running agent
// does until it exits). A missing pinDir is nothing to clean.
func Cleanup(pinDir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(pinDir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%s is not on a bpffs: not flowlb's pins", pinDir)
	}
	return os.RemoveAll(pinDir)
}

// CgroupV2Root is where the cgroup v2 hierarchy is mounted:
// /sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified in hybrid mode.
func CgroupV2Root() (string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 3 && fs[2] == "cgroup2" {
			return fs[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup2 mount")
}
