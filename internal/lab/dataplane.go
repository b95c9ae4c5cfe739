package lab

// The eBPF data plane in the lab. Its cgroup programs act on the
// processes of a cgroup in any network namespace, and all lab nodes share
// one kernel, so each node's agent attaches to a cgroup of its own: the
// node's (flb-<lab>/nI), which holds the node's processes and, nested
// below it, its pods' (flb-<lab>/nI/nI-pJ). Pins go to a bpffs that the
// lab mounts in its state directory, one directory per node.

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Data planes a lab's agents can run (Options.Dataplane).
const (
	DataplaneNftables = "nftables"
	DataplaneEBPF     = "ebpf"
)

// bpffsDir is the bpffs the lab mounts in its state directory dir.
func bpffsDir(dir string) string { return filepath.Join(dir, "bpf") }

// mountBPFFS mounts the lab's own bpffs, so that nodes' pins never meet
// another lab's or the host's, with a directory in it for each of the
// nodes: what /sys/fs/bpf is to a real node.
func mountBPFFS(dir string, nodes int) error {
	d := bpffsDir(dir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpf", d, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs at %s: %w", d, err)
	}
	for i := 1; i <= nodes; i++ {
		if err := os.Mkdir(filepath.Join(d, NodeName(i)), 0o700); err != nil {
			return err
		}
	}
	return nil
}

// Dataplane is the data plane the lab's agents are to run: nftables
// unless the lab was brought up with Options.Dataplane ebpf.
func (l *Lab) Dataplane() string {
	if d := l.snapshot().Dataplane; d != "" {
		return d
	}
	return DataplaneNftables
}

// NodeCgroup is the cgroup v2 directory of node i: its processes, and its
// pods' in cgroups below it ("" without a cgroup v2 mount).
func (l *Lab) NodeCgroup(i int) string { return l.cgroup(NodeName(i)) }

// NodeBPFFS is node i's directory on the lab's bpffs: its /sys/fs/bpf
// (on eBPF only).
func (l *Lab) NodeBPFFS(i int) string { return filepath.Join(bpffsDir(l.dir), NodeName(i)) }

// BPFPinDir is where node i's agent pins its eBPF maps and links: in the
// node's bpffs directory, where the agent's default --bpf-pin-dir
// (/sys/fs/bpf/flowlb) has them on a real node, so that an agent the
// manifests deploy (NodeHostPaths) pins there too.
func (l *Lab) BPFPinDir(i int) string { return filepath.Join(l.NodeBPFFS(i), "flowlb") }

// NodeHostPaths are the directories of the lab that stand for node i's
// kernel file systems, by the path they have on a real node: the node's
// cgroup for the cgroup v2 root (/sys/fs/cgroup), and on eBPF its bpffs
// directory for /sys/fs/bpf. The lab kubelet gives a pod's hostPath
// volume at one of those paths that directory, so that the agent
// DaemonSet on eBPF (deploy/kubernetes/components/ebpf) attaches to its
// node's cgroup and pins in its node's bpffs, with its own flags.
func (l *Lab) NodeHostPaths(i int) map[string]string {
	out := map[string]string{}
	if cg := l.NodeCgroup(i); cg != "" {
		out["/sys/fs/cgroup"] = cg
	}
	if l.Dataplane() == DataplaneEBPF {
		out["/sys/fs/bpf"] = l.NodeBPFFS(i)
	}
	return out
}

// AgentDataplaneArgs are the flags that give node i's agent the lab's
// data plane: none for nftables; for eBPF the node's cgroup and pin
// directory.
func (l *Lab) AgentDataplaneArgs(i int) []string {
	if l.Dataplane() != DataplaneEBPF {
		return nil
	}
	return []string{"--dataplane", DataplaneEBPF, "--cgroup", l.NodeCgroup(i), "--bpf-pin-dir", l.BPFPinDir(i)}
}
