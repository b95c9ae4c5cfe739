package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// ExecPodMount is one bind mount of `lab exec-pod`: a directory of the
// lab onto a container path.
type ExecPodMount struct {
	Source, Target string
	ReadOnly       bool
}

// String is the --mount form, SOURCE:TARGET[:ro].
func (m ExecPodMount) String() string {
	s := m.Source + ":" + m.Target
	if m.ReadOnly {
		s += ":ro"
	}
	return s
}

// ExecPodArgv is the command line that runs argv as a container with
// mounts, through bin's `lab exec-pod`.
func ExecPodArgv(bin string, mounts []ExecPodMount, argv []string) []string {
	out := []string{bin, "lab", "exec-pod"}
	for _, m := range mounts {
		out = append(out, "--mount", m.String())
	}
	return append(append(out, "--"), argv...)
}

// parseExecPod reads `--mount S:T[:ro]... -- ARGV...`.
func parseExecPod(args []string) ([]ExecPodMount, []string, error) {
	var mounts []ExecPodMount
	for len(args) > 0 {
		switch a := args[0]; {
		case a == "--":
			if len(args) < 2 {
				return nil, nil, errors.New("exec-pod: no command after --")
			}
			return mounts, args[1:], nil
		case a == "--mount" && len(args) > 1:
			parts := strings.Split(args[1], ":")
			if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") || (len(parts) == 3 && parts[2] != "ro") {
				return nil, nil, fmt.Errorf("exec-pod: bad --mount %q: want SOURCE:/TARGET[:ro]", args[1])
			}
			mounts = append(mounts, ExecPodMount{Source: parts[0], Target: parts[1], ReadOnly: len(parts) == 3})
			args = args[2:]
		default:
			return nil, nil, fmt.Errorf("exec-pod: unexpected %q", a)
		}
	}
	return nil, nil, errors.New("exec-pod: no -- COMMAND")
}

// ExecPod is `flowlb lab exec-pod`: started by the lab in a mount
// namespace of its own (ProcState.Container), it stops mounts from
// propagating back to the machine, binds each source onto its target
// (creating both directories if missing: a missing target is left behind
// on the machine as an empty directory) and becomes the command.
func ExecPod(args []string) error {
	mounts, argv, err := parseExecPod(args)
	if err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("exec-pod: make mounts private (is this a mount namespace of its own?): %w", err)
	}
	for _, m := range mounts {
		for _, d := range []string{m.Source, m.Target} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("exec-pod: %w", err)
			}
		}
		if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("exec-pod: bind %s on %s: %w", m.Source, m.Target, err)
		}
		if m.ReadOnly {
			if err := unix.Mount("", m.Target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("exec-pod: read-only %s: %w", m.Target, err)
			}
		}
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("exec-pod: %w", err)
	}
	return unix.Exec(bin, argv, os.Environ())
}
