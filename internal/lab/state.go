package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultStateRoot holds one directory per lab: its state file, lock,
// process logs and echo control files. /run is a tmpfs, so a reboot
// clears it together with the namespaces it describes.
const DefaultStateRoot = "/run/flowlb/lab"

// State is what a lab writes to disk so that another process (the CLI,
// or `lab down` after a crash) can find and manage it.
type State struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Ready   bool      `json:"ready"` // false while lab up is still building
	Ports   Ports     `json:"ports"`
	// Echo is the argv prefix that starts a pod's echo server; Env is
	// added to its environment (tests re-exec their own binary).
	Echo     []string    `json:"echo"`
	EchoEnv  []string    `json:"echo_env,omitempty"`
	Nodes    []NodeState `json:"nodes"`
	NextHops []int       `json:"next_hops"`       // nodes the router sends external VIPs to
	Zones    int         `json:"zones,omitempty"` // topology zones the nodes are dealt into
	// Servers are the indices of the server hosts (s1, s2, ...).
	Servers []int `json:"servers,omitempty"`
	// Postgres is set once the database host exists (Lab.StartPostgres).
	Postgres *PostgresState `json:"postgres,omitempty"`
	Procs    []ProcState    `json:"procs"`
	// Owner, if set, is the process whose lifetime bounds the lab (a test
	// binary); DownOrphans removes the lab once that process is gone.
	Owner *ProcState `json:"owner,omitempty"`
	// Kube is set once a Kubernetes control plane runs in the lab.
	Kube *KubeState `json:"kube,omitempty"`
	// Dataplane is the agents' data plane, "" for nftables (AgentDataplaneArgs).
	Dataplane string `json:"dataplane,omitempty"`
}

// Ports are the echo server ports every pod listens on.
type Ports struct {
	TCP  []int `json:"tcp"`
	UDP  []int `json:"udp"`
	HTTP []int `json:"http"`
	// ProxyHTTP ports serve HTTP after a PROXY protocol header.
	ProxyHTTP []int `json:"proxy_http,omitempty"`
	// HTTPS ports serve HTTP over TLS, with a self-signed certificate.
	HTTPS []int `json:"https,omitempty"`
}

// NodeState describes one node and its pods.
type NodeState struct {
	Index int   `json:"index"`
	Pods  []int `json:"pods"` // pod indices present on the node
	// LastKube is the pod index last given to a Kubernetes pod; the next
	// one takes the next free index after it, so a pod address is not
	// reused right after its pod went away.
	LastKube int `json:"last_kube,omitempty"`
}

// ProcState identifies a process the lab started. PID plus the kernel's
// start time guards against killing an unrelated process that reused the
// PID after a reboot-free crash.
//
// The fields after Log say how it was started, so that Restart starts it
// the same way.
type ProcState struct {
	Host  string   `json:"host"`
	Name  string   `json:"name"`
	PID   int      `json:"pid"`
	Start uint64   `json:"start"`
	Argv  []string `json:"argv"`
	Log   string   `json:"log"`
	Env   []string `json:"env,omitempty"` // added to the starter's environment
	// User, if set, is who it runs as instead of root (the lab's
	// PostgreSQL runs as the postgres system user).
	User *ProcUser `json:"user,omitempty"`
	// OwnIPC puts it in a new IPC namespace: the System V shared memory
	// it makes goes away with it, however it ends.
	OwnIPC bool   `json:"own_ipc,omitempty"`
	Dir    string `json:"dir,omitempty"` // working directory
	// Container marks a Kubernetes pod's container: it gets a mount
	// namespace of its own and only Env as its environment.
	Container bool `json:"container,omitempty"`
	// OwnMounts gives it a mount namespace of its own whose mounts are
	// private (nothing it mounts reaches the machine's), and a UTS
	// namespace of its own (a host name of its own): a real node's
	// runtime.
	OwnMounts bool `json:"own_mounts,omitempty"`
	// Fds is how many descriptors it inherited (3, 4, ...); such a process
	// cannot be restarted from the state.
	Fds int `json:"fds,omitempty"`
}

// ProcUser is the user and group a process runs as.
type ProcUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

func stateFile(dir string) string { return filepath.Join(dir, "state.json") }

func readState(dir string) (*State, error) {
	b, err := os.ReadFile(stateFile(dir))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", stateFile(dir), err)
	}
	return &s, nil
}

// writeState replaces the state file atomically, so a crash never leaves
// a half-written file that `lab down` could not read.
func writeState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := stateFile(dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, stateFile(dir))
}

// lockDir takes an exclusive flock on the lab directory's lock file; it
// serialises state changes between processes (CLI calls, tests).
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// update runs fn on the freshest state under the lock and saves the result.
func (l *Lab) update(fn func(s *State) error) error {
	unlock, err := lockDir(l.dir)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := readState(l.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if s == nil {
		s = l.snapshot()
	}
	if err := fn(s); err != nil {
		return err
	}
	if err := writeState(l.dir, s); err != nil {
		return err
	}
	l.mu.Lock()
	l.st = *s
	l.mu.Unlock()
	return nil
}

// snapshot is a deep-enough copy of the in-memory state.
func (l *Lab) snapshot() *State {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, _ := json.Marshal(l.st)
	var s State
	_ = json.Unmarshal(b, &s)
	return &s
}
