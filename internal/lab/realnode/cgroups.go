package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Hierarchies are the mount points of the machine's cgroup hierarchies
// (v1 ones and the v2 one), from /proc/self/mountinfo.
func Hierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") && len(fields) > 4 {
				out = append(out, fields[4])
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), sc.Err()
}

// MakeRoot makes the cgroup root (a path such as /flb-lab/n1) in every
// hierarchy, as the kubelet's cgroupfs driver wants it before it starts:
// in cpuset's, each level gets its parent's CPUs and memory nodes (a new
// cpuset cgroup has none, and no task could join it).
func MakeRoot(root string) error {
	hs, err := Hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := h
		for _, elem := range strings.Split(strings.Trim(root, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, elem)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					continue // not the cpuset hierarchy
				}
				if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) != "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// RemoveRoot kills every process in the cgroup root's tree in every
// hierarchy, except those in spare (the caller and the process that
// waits for it), and removes the tree's directories, deepest first; a
// directory still holding a spared process stays. It is idempotent.
func RemoveRoot(root string, spare ...int) error {
	hs, err := Hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		top := filepath.Join(h, strings.Trim(root, "/"))
		if _, err := os.Stat(top); errors.Is(err, os.ErrNotExist) {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		if err := killIn(dirs, spare); err != nil {
			errs = append(errs, err)
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			if holds(dirs[i], spare) {
				continue
			}
			if err := rmdirRetry(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// procs lists the processes of one cgroup directory.
func procs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func holds(dir string, spare []int) bool {
	return slices.ContainsFunc(procs(dir), func(p int) bool { return slices.Contains(spare, p) })
}

// killIn sends SIGKILL to every process of dirs but the spared ones, a
// few rounds (a process may fork as it dies), and waits until they are
// gone from the cgroups.
func killIn(dirs []string, spare []int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, d := range dirs {
			for _, pid := range procs(d) {
				if slices.Contains(spare, pid) {
					continue
				}
				left++
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes survived SIGKILL in %s", left, dirs[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rmdirRetry removes an empty cgroup, which fails with EBUSY until its
// killed tasks are fully gone.
func rmdirRetry(dir string) error {
	var err error
	for range 200 {
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}
