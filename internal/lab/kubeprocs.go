package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Kubernetes pods of flowlb's image: the lab kubelet runs their
// containers as processes (the lab's flowlb binary under `lab exec-pod`,
// which binds the pod's volumes in a mount namespace of its own), in the
// pod's network namespace or, with hostNetwork, in the node's. A
// hostNetwork pod has no lab host of its own: it is recorded under
// HostPodKey and its processes belong to the node.

// KubeProc is one container's process.
type KubeProc struct {
	Container string   `json:"container"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"` // its whole environment
}

// HostPodKey is the key of a hostNetwork pod in KubeState.Pods.
func HostPodKey(node int, uid string) string { return NodeName(node) + "~" + uid }

// isHostPodKey reports whether key is a HostPodKey.
func isHostPodKey(key string) bool { return strings.Contains(key, "~") }

// AddKubeHostPod records hostNetwork pod kp on node i and returns its key.
func (l *Lab) AddKubeHostPod(i int, kp KubePod) (string, error) {
	if !l.hasNode(i) {
		return "", fmt.Errorf("no node %d", i)
	}
	kp.HostNetwork, kp.Node, kp.Flowlb = true, i, true
	key := HostPodKey(i, kp.UID)
	err := l.update(func(s *State) error {
		if s.Kube == nil {
			return ErrNoKube
		}
		if _, ok := s.Kube.Pods[key]; ok {
			return fmt.Errorf("pod %s/%s (%s) already runs on %s", kp.Namespace, kp.Name, kp.UID, NodeName(i))
		}
		if s.Kube.Pods == nil {
			s.Kube.Pods = map[string]KubePod{}
		}
		s.Kube.Pods[key] = kp
		return nil
	})
	return key, err
}

// procHost and procName place a container's process of the pod at key.
func procHost(key string, kp KubePod) string {
	if kp.HostNetwork {
		return NodeName(kp.Node)
	}
	return key
}

func procName(kp KubePod, container string) string {
	if kp.HostNetwork {
		return "k8s-" + kp.UID + "-" + container
	}
	return "k8s-" + container
}

// StartKubeProcs records the processes of the pod at key and starts them.
func (l *Lab) StartKubeProcs(key string, procs []KubeProc) error {
	var kp KubePod
	err := l.update(func(s *State) error {
		p, ok := kubePod(s, key)
		if !ok {
			return fmt.Errorf("no Kubernetes pod %s", key)
		}
		p.Procs = procs
		s.Kube.Pods[key] = p
		kp = p
		return nil
	})
	if err != nil {
		return err
	}
	return l.startKubeProcs(key, kp, false)
}

func kubePod(s *State, key string) (KubePod, bool) {
	if s.Kube == nil {
		return KubePod{}, false
	}
	p, ok := s.Kube.Pods[key]
	return p, ok
}

// startKubeProcs starts the pod's processes (onlyDead: those not running).
func (l *Lab) startKubeProcs(key string, kp KubePod, onlyDead bool) error {
	host := procHost(key, kp)
	var errs []error
	for _, p := range kp.Procs {
		name := procName(kp, p.Container)
		if onlyDead && l.procAlive(host, name) {
			continue
		}
		if _, err := l.startProc(host, name, ProcState{Argv: p.Argv, Env: p.Env, Container: true}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// KubePodUp reports whether the pod's server runs: its echo server, or
// every process of a flowlb pod.
func (l *Lab) KubePodUp(key string) bool {
	kp, ok := kubePod(l.snapshot(), key)
	if !ok {
		return false
	}
	if !kp.Flowlb {
		return l.EchoUp(key)
	}
	if len(kp.Procs) == 0 {
		return false
	}
	for _, p := range kp.Procs {
		if !l.procAlive(procHost(key, kp), procName(kp, p.Container)) {
			return false
		}
	}
	return true
}

// RestartKubePod starts the pod's server again: the echo server, or the
// processes that died.
func (l *Lab) RestartKubePod(ctx context.Context, key string) error {
	kp, ok := kubePod(l.snapshot(), key)
	if !ok {
		return fmt.Errorf("no Kubernetes pod %s", key)
	}
	if !kp.Flowlb {
		return l.StartEcho(ctx, key)
	}
	return l.startKubeProcs(key, kp, true)
}

// StopKubePod stops the pod's server as a runtime stops containers:
// SIGTERM, SIGKILL after grace.
func (l *Lab) StopKubePod(key string, grace time.Duration) error {
	kp, ok := kubePod(l.snapshot(), key)
	if !ok {
		return nil
	}
	if !kp.Flowlb {
		return l.TermEcho(key, grace)
	}
	host := procHost(key, kp)
	var procs []ProcState
	for _, q := range l.snapshot().Procs {
		if q.Host == host && slices.ContainsFunc(kp.Procs, func(p KubeProc) bool { return procName(kp, p.Container) == q.Name }) && q.alive() {
			procs = append(procs, q)
			_ = unix.Kill(q.PID, unix.SIGTERM)
		}
	}
	deadline := time.Now().Add(grace)
	for _, q := range procs {
		for q.alive() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	var errs []error
	for _, q := range procs {
		errs = append(errs, l.stopProc(host, q.Name))
	}
	return errors.Join(errs...)
}

// RemoveKubePod removes the pod: its namespace (DelPod), or for a
// hostNetwork pod its processes and record.
func (l *Lab) RemoveKubePod(key string) error {
	if !isHostPodKey(key) {
		return l.DelPod(key)
	}
	if err := l.StopKubePod(key, 0); err != nil {
		return err
	}
	return l.update(func(s *State) error {
		if s.Kube != nil {
			delete(s.Kube.Pods, key)
		}
		return nil
	})
}
