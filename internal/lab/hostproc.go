package lab

// The processes the lab runs on its hosts, recorded in the state so that
// Stop, Kill, Restart, status and down find them from any process.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// LogPath is the log file of the host's process named name.
func (l *Lab) LogPath(host, name string) string {
	return filepath.Join(l.dir, "logs", host+"."+name+".log")
}

// startProc starts spec (Argv and how to run it) on host as name and
// records it; a live process of that name is an error.
func (l *Lab) startProc(host, name string, spec ProcState, extra ...*os.File) (ProcState, error) {
	if _, err := l.Host(host); err != nil {
		return ProcState{}, err
	}
	spec.Host, spec.Name, spec.Log = host, name, l.LogPath(host, name)
	var p ProcState
	err := l.update(func(s *State) error {
		for _, q := range s.Procs {
			if q.Host == host && q.Name == name && q.alive() {
				return fmt.Errorf("%s/%s already runs as pid %d", host, name, q.PID)
			}
		}
		var err error
		p, err = spawn(NSName(l.name, host), l.cgroup(host), spec, extra...)
		if err != nil {
			return err
		}
		s.Procs = slices.DeleteFunc(s.Procs, func(q ProcState) bool { return q.Host == host && q.Name == name })
		s.Procs = append(s.Procs, p)
		return nil
	})
	return p, err
}

// cgroup is the cgroup of host's processes. A pod's is below its node's,
// so that a program attached to the node's cgroup (the eBPF data plane's
// agent) acts on the node's pods too.
func (l *Lab) cgroup(host string) string {
	cg := cgroupDir(l.name)
	if cg == "" {
		return ""
	}
	if kind, i, _, err := ParseHost(host); err == nil && kind == KindPod {
		return filepath.Join(cg, NodeName(i), host)
	}
	return filepath.Join(cg, host)
}

func (l *Lab) stopProc(host, name string) error {
	return l.update(func(s *State) error {
		var pids []int
		found := false
		s.Procs = slices.DeleteFunc(s.Procs, func(q ProcState) bool {
			if q.Host != host || q.Name != name {
				return false
			}
			found = true
			if q.alive() {
				pids = append(pids, q.PID)
			}
			return true
		})
		if !found {
			return fmt.Errorf("no process %s on %s", name, host)
		}
		return killAndWait(pids, 5*time.Second)
	})
}

// proc is the record of the host's process named name, from the state
// file (another process may have started it).
func (l *Lab) proc(host, name string) (ProcState, error) {
	s := l.snapshot()
	if fs, err := readState(l.dir); err == nil {
		s = fs
	}
	for _, p := range s.Procs {
		if p.Host == host && p.Name == name {
			return p, nil
		}
	}
	return ProcState{}, fmt.Errorf("no process %s on %s", name, host)
}

// signalProc sends sig to the host's process named name, if it runs, and
// waits up to timeout until it has exited. Its record stays, for status
// and restartProc.
func (l *Lab) signalProc(host, name string, sig syscall.Signal, timeout time.Duration) error {
	p, err := l.proc(host, name)
	if err != nil {
		return err
	}
	if !p.alive() {
		return nil
	}
	if err := signalAndWait([]int{p.PID}, sig, timeout); err != nil {
		return fmt.Errorf("%s/%s: %w", host, name, err)
	}
	return nil
}

// restartProc starts the host's process named name again as it was
// started last (argv, environment, user, ...); it must have exited.
func (l *Lab) restartProc(host, name string) (ProcState, error) {
	p, err := l.proc(host, name)
	if err != nil {
		return ProcState{}, err
	}
	if p.alive() {
		return ProcState{}, fmt.Errorf("%s/%s still runs as pid %d", host, name, p.PID)
	}
	if p.Fds > 0 {
		return ProcState{}, fmt.Errorf("%s/%s was started with %d inherited descriptors and cannot be restarted from the state", host, name, p.Fds)
	}
	p.PID, p.Start = 0, 0
	return l.startProc(host, name, p)
}

// KillTimeout bounds how long Host.Kill waits for the process to exit.
const KillTimeout = 10 * time.Second

// Kill sends sig to the host's process named name (syscall.SIGKILL for
// kill -9) and waits until it has exited. Unlike Stop, the lab keeps its
// record: status shows it dead and Restart starts it again.
func (h Host) Kill(name string, sig syscall.Signal) error {
	return h.lab.signalProc(h.Name, name, sig, KillTimeout)
}

// Restart starts the host's process named name again with the argv and
// environment it was started with last; it must not be running (Kill
// it first). Logs are appended to the same file.
func (h Host) Restart(name string) (ProcState, error) { return h.lab.restartProc(h.Name, name) }

// Running reports whether the host's process named name runs.
func (h Host) Running(name string) bool {
	p, err := h.lab.proc(h.Name, name)
	return err == nil && p.alive()
}

// Proc returns the record of the host's process named name: PID, argv,
// log file, ...
func (h Host) Proc(name string) (ProcState, error) { return h.lab.proc(h.Name, name) }
