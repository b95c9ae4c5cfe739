package lab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup2Root finds the cgroup v2 mount: /sys/fs/cgroup on unified hosts,
// /sys/fs/cgroup/unified on hybrid ones (like this CI machine). "" if none.
func cgroup2Root() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ... mountpoint ... - fstype source options
		fields := strings.Fields(s.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4]
			}
		}
	}
	return ""
}

// cgroupDir is the lab's cgroup; every process the lab starts goes into a
// child named after its host, so `down` can kill a whole lab (or one host)
// with cgroup.kill, whatever forked from what.
func cgroupDir(name string) string {
	root := cgroup2Root()
	if root == "" {
		return ""
	}
	return filepath.Join(root, "flb-"+name)
}

// StatFields reads a /proc/PID/stat (or /proc/PID/task/TID/stat) file
// and returns its fields after the command name, which may hold spaces
// and parentheses: f[0] is field 3 (the state), f[i] is field i+3.
func StatFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("parse %s: no command name", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) == 0 {
		return nil, fmt.Errorf("parse %s: no fields", path)
	}
	return f, nil
}

// procStart reads the start time (in clock ticks since boot) of a process.
func procStart(pid int) (uint64, error) {
	f, err := StatFields(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// starttime is field 22.
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("process %d is dead", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether the process recorded in p still runs.
func (p ProcState) alive() bool {
	st, err := procStart(p.PID)
	return err == nil && st == p.Start
}

// exited reports whether process pid is gone or a zombie whose threads
// have all exited. The main thread of a killed multi-threaded process
// turns zombie before the others have closed its files (a listening
// socket, say), so a zombie alone is not enough.
func exited(pid int) bool {
	if _, err := procStart(pid); err == nil {
		return false
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err != nil || len(tasks) <= 1
}

// spawn starts spec.Argv inside network namespace ns, detached (own
// session, stdin from /dev/null, output appended to spec.Log) so that it
// outlives the caller, as spec says (environment, user, IPC namespace,
// working directory), and places it in cgroup cg if cg is not "". extra
// are passed as file descriptors 3, 4, ... It returns spec with the
// process's PID and start time.
func spawn(ns, cg string, spec ProcState, extra ...*os.File) (ProcState, error) {
	if len(spec.Argv) == 0 {
		return ProcState{}, errors.New("empty command")
	}
	logf, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return ProcState{}, err
	}
	defer logf.Close()
	cmd := spawnCmd(spec, logf, extra)
	var cgfd = -1
	if cg != "" {
		if err := os.MkdirAll(cg, 0o755); err == nil {
			if fd, err := unix.Open(cg, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
				cgfd = fd
				defer unix.Close(fd)
				// clone3(CLONE_INTO_CGROUP): the child is in the cgroup
				// before it runs a single instruction.
				cmd.SysProcAttr.UseCgroupFD = true
				cmd.SysProcAttr.CgroupFD = fd
			}
		}
	}
	err = InNS(ns, cmd.Start)
	if err != nil && cgfd >= 0 {
		// Older kernels without clone3 into cgroup: start, then move.
		cmd = spawnCmd(spec, logf, extra)
		if err = InNS(ns, cmd.Start); err == nil {
			_ = os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
		}
	}
	if err != nil {
		return ProcState{}, fmt.Errorf("start %s in %s: %w", spec.Argv[0], ns, err)
	}
	spec.PID = cmd.Process.Pid
	spec.Start, _ = procStart(spec.PID)
	spec.Fds = len(extra)
	// Reap the child if it exits while we live; if we exit first, init
	// adopts it.
	go func() { _ = cmd.Wait() }()
	return spec, nil
}

// spawnCmd is the command spawn starts for spec, logging to logf.
func spawnCmd(spec ProcState, logf *os.File, extra []*os.File) *exec.Cmd {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), spec.Env...)
	if spec.Container {
		cmd.Env = slices.Clone(spec.Env)
	}
	cmd.ExtraFiles = extra
	cmd.Dir = spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if spec.User != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: spec.User.UID, Gid: spec.User.GID}
	}
	if spec.OwnIPC {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWIPC
	}
	if spec.Container {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
	}
	if spec.OwnMounts {
		// As an unshare, Go makes / private (MS_REC|MS_PRIVATE) in the
		// child before exec.
		cmd.SysProcAttr.Unshareflags |= syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS
	}
	return cmd
}

// killAndWait sends SIGKILL to every pid and waits (bounded) until each
// is gone or a zombie, which no longer holds any namespace.
func killAndWait(pids []int, timeout time.Duration) error {
	return signalAndWait(pids, unix.SIGKILL, timeout)
}

// signalAndWait sends sig to every pid and waits (bounded) until each has
// exited.
func signalAndWait(pids []int, sig unix.Signal, timeout time.Duration) error {
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for {
			if exited(pid) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d survived %s for %s", pid, unix.SignalName(sig), timeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// pidsInNS lists processes whose network namespace is one of inodes. It
// finds what a crashed lab left behind even without a state file.
func pidsInNS(inodes map[uint64]bool) []int {
	if len(inodes) == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil {
			continue
		}
		if inodes[st.Ino] {
			out = append(out, pid)
		}
	}
	return out
}

// killCgroup kills everything in the cgroup tree at dir and removes the
// tree, deepest first.
func killCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		// rmdir fails with EBUSY until the killed tasks are fully gone.
		var err error
		for try := 0; try < 200; try++ {
			if err = unix.Rmdir(dirs[i]); err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}
