package lab

// The processes the lab runs on its hosts, recorded in the state so that
// Stop, status and down find them from any process.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// LogPath is the log file of the host's process named name.
func (l *Lab) LogPath(host, name string) string {
	return filepath.Join(l.dir, "logs", host+"."+name+".log")
}

func (l *Lab) startProc(host, name string, argv, env []string, extra ...*os.File) (ProcState, error) {
	if _, err := l.Host(host); err != nil {
		return ProcState{}, err
	}
	var p ProcState
	err := l.update(func(s *State) error {
		for _, q := range s.Procs {
			if q.Host == host && q.Name == name && q.alive() {
				return fmt.Errorf("%s/%s already runs as pid %d", host, name, q.PID)
			}
		}
		var err error
		p, err = spawn(NSName(l.name, host), l.cgroup(host), l.LogPath(host, name), argv, env, extra...)
		if err != nil {
			return err
		}
		p.Host, p.Name = host, name
		s.Procs = slices.DeleteFunc(s.Procs, func(q ProcState) bool { return q.Host == host && q.Name == name })
		s.Procs = append(s.Procs, p)
		return nil
	})
	return p, err
}

func (l *Lab) cgroup(host string) string {
	cg := cgroupDir(l.name)
	if cg == "" {
		return ""
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
