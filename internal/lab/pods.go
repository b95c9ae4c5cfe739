package lab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// EchoProc is the process name of a pod's echo server.
const EchoProc = "echo"

func (l *Lab) healthFile(pod string) string { return filepath.Join(l.dir, "ctl", pod+".unhealthy") }
func (l *Lab) readyFile(pod string) string  { return filepath.Join(l.dir, "ctl", pod+".ready") }

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func (l *Lab) echoArgv(s *State, pod string) []string {
	argv := slices.Clone(s.Echo)
	if s.Kube != nil {
		if kp, ok := s.Kube.Pods[pod]; ok {
			// A Kubernetes pod listens on its container ports only; TCP
			// ports answer HTTP and the line protocol alike.
			return append(argv, "--name", kp.Namespace+"/"+kp.Name,
				"--health-file", l.healthFile(pod), "--ready-file", l.readyFile(pod),
				"--tcp=", "--http=", "--udp="+joinInts(kp.UDP), "--auto="+joinInts(kp.TCP))
		}
	}
	argv = append(argv, "--name", pod,
		"--health-file", l.healthFile(pod), "--ready-file", l.readyFile(pod))
	if len(s.Ports.TCP) > 0 {
		argv = append(argv, "--tcp", joinInts(s.Ports.TCP))
	}
	if len(s.Ports.UDP) > 0 {
		argv = append(argv, "--udp", joinInts(s.Ports.UDP))
	}
	if len(s.Ports.HTTP) > 0 {
		argv = append(argv, "--http", joinInts(s.Ports.HTTP))
	}
	if len(s.Ports.ProxyHTTP) > 0 {
		argv = append(argv, "--proxy-http", joinInts(s.Ports.ProxyHTTP))
	}
	if len(s.Ports.HTTPS) > 0 {
		argv = append(argv, "--https", joinInts(s.Ports.HTTPS))
	}
	return argv
}

// startEcho starts the echo servers of pods (in parallel, one state
// update) and waits until each listens on all its ports.
func (l *Lab) startEcho(ctx context.Context, pods []string, timeout time.Duration) error {
	err := l.update(func(s *State) error {
		var (
			mu    sync.Mutex
			wg    sync.WaitGroup
			errs  []error
			sem   = make(chan struct{}, parallelism)
			procs []ProcState
		)
		for _, pod := range pods {
			for _, q := range s.Procs {
				if q.Host == pod && q.Name == EchoProc && q.alive() {
					return fmt.Errorf("echo on %s already runs as pid %d", pod, q.PID)
				}
			}
			_ = os.Remove(l.readyFile(pod))
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				p, err := spawn(NSName(l.name, pod), l.cgroup(pod), ProcState{Argv: l.echoArgv(s, pod), Env: s.EchoEnv, Log: l.LogPath(pod, EchoProc)})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				p.Host, p.Name = pod, EchoProc
				procs = append(procs, p)
			}()
		}
		wg.Wait()
		for _, p := range procs {
			s.Procs = slices.DeleteFunc(s.Procs, func(q ProcState) bool { return q.Host == p.Host && q.Name == p.Name })
			s.Procs = append(s.Procs, p)
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return err
	}
	return l.waitReady(ctx, pods, timeout)
}

// waitReady waits for the ready files the echo servers create once all
// their sockets are bound.
func (l *Lab) waitReady(ctx context.Context, pods []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pending := slices.Clone(pods)
	for {
		pending = slices.DeleteFunc(pending, func(p string) bool {
			_, err := os.Stat(l.readyFile(p))
			return err == nil
		})
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("echo servers not ready after %s: %v (see %s)", timeout, pending, filepath.Join(l.dir, "logs"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (l *Lab) startAllEcho(ctx context.Context, timeout time.Duration) error {
	var pods []string
	for _, p := range l.Pods() {
		pods = append(pods, p.Name)
	}
	return l.startEcho(ctx, pods, timeout)
}

func (l *Lab) checkPod(pod string) error {
	kind, _, _, err := ParseHost(pod)
	if err != nil {
		return err
	}
	if kind != KindPod {
		return fmt.Errorf("%s is not a pod", pod)
	}
	_, err = l.Host(pod)
	return err
}

// StartEcho (re)starts the echo server of pod and waits until it listens.
func (l *Lab) StartEcho(ctx context.Context, pod string) error {
	if err := l.checkPod(pod); err != nil {
		return err
	}
	return l.startEcho(ctx, []string{pod}, 10*time.Second)
}

// StopEcho kills the echo server of pod: connections are then refused.
func (l *Lab) StopEcho(pod string) error {
	if err := l.checkPod(pod); err != nil {
		return err
	}
	return l.stopProc(pod, EchoProc)
}

// SetHealthy makes pod's echo server answer HTTP 200 (true) or 500
// (false). TCP and UDP keep answering; stop the server to fail those.
func (l *Lab) SetHealthy(pod string, healthy bool) error {
	if err := l.checkPod(pod); err != nil {
		return err
	}
	if healthy {
		if err := os.Remove(l.healthFile(pod)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(l.healthFile(pod), []byte("unhealthy\n"), 0o644)
}

// Healthy reports whether pod's echo server is set to answer HTTP 200.
func (l *Lab) Healthy(pod string) bool {
	_, err := os.Stat(l.healthFile(pod))
	return err != nil
}

// AddPod adds a pod to node i (index j, or the lowest free one if j is 0),
// starts its echo server unless the lab has none, and returns it.
func (l *Lab) AddPod(ctx context.Context, i, j int) (Host, error) {
	if !l.hasNode(i) {
		return Host{}, fmt.Errorf("no node %d", i)
	}
	var pod string
	err := l.update(func(s *State) error {
		n := slices.IndexFunc(s.Nodes, func(n NodeState) bool { return n.Index == i })
		if j == 0 {
			for j = 1; slices.Contains(s.Nodes[n].Pods, j); j++ {
			}
		}
		if j < 1 || j > MaxPodsPerNode {
			return fmt.Errorf("pod index %d: want 1-%d", j, MaxPodsPerNode)
		}
		if slices.Contains(s.Nodes[n].Pods, j) {
			return fmt.Errorf("pod %s exists", PodName(i, j))
		}
		pod = PodName(i, j)
		if err := l.newHostNS(pod); err != nil {
			return err
		}
		if err := l.buildPod(i, j); err != nil {
			_ = deleteNS(NSName(l.name, pod))
			return err
		}
		s.Nodes[n].Pods = append(s.Nodes[n].Pods, j)
		slices.Sort(s.Nodes[n].Pods)
		return nil
	})
	if err != nil {
		return Host{}, err
	}
	if len(l.snapshot().Echo) > 0 {
		if err := l.startEcho(ctx, []string{pod}, 10*time.Second); err != nil {
			return Host{}, err
		}
	}
	return l.Host(pod)
}

// DelPod kills a pod's processes and removes its namespace; the node's
// veth and /32 route go with it.
func (l *Lab) DelPod(pod string) error {
	if err := l.checkPod(pod); err != nil {
		return err
	}
	_, i, j, _ := ParseHost(pod)
	return l.update(func(s *State) error {
		var pids []int
		s.Procs = slices.DeleteFunc(s.Procs, func(q ProcState) bool {
			if q.Host != pod {
				return false
			}
			if q.alive() {
				pids = append(pids, q.PID)
			}
			return true
		})
		ns := NSName(l.name, pod)
		if ino, err := nsInode(ns); err == nil {
			pids = append(pids, pidsInNS(map[uint64]bool{ino: true})...)
		}
		if err := killAndWait(pids, 5*time.Second); err != nil {
			return err
		}
		if err := deleteNS(ns); err != nil {
			return err
		}
		if cg := l.cgroup(pod); cg != "" {
			_ = killCgroup(cg)
		}
		_ = os.Remove(l.healthFile(pod))
		_ = os.Remove(l.readyFile(pod))
		if s.Kube != nil {
			delete(s.Kube.Pods, pod)
		}
		for k := range s.Nodes {
			if s.Nodes[k].Index == i {
				s.Nodes[k].Pods = slices.DeleteFunc(s.Nodes[k].Pods, func(x int) bool { return x == j })
			}
		}
		return nil
	})
}

// KubePod is a Kubernetes pod that the lab kubelet runs as a lab pod: a
// namespace on its node with an echo server on the pod's ports.
type KubePod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	TCP       []int  `json:"tcp,omitempty"` // answer HTTP or the line protocol
	UDP       []int  `json:"udp,omitempty"`
	// A pod of flowlb's image runs its containers as processes
	// (StartKubeProcs) instead of the echo server; with HostNetwork in
	// node Node's namespace, without a namespace of its own.
	Flowlb      bool       `json:"flowlb,omitempty"`
	HostNetwork bool       `json:"host_network,omitempty"`
	Node        int        `json:"node,omitempty"`
	Procs       []KubeProc `json:"procs,omitempty"`
}

// AddKubePod adds a pod for a Kubernetes pod to node i and starts its echo
// server on the pod's ports. Its index (and so its address in the node's
// pod CIDR) is the next free one after the last one given to a
// Kubernetes pod on the node, so addresses of pods that just went away are
// not reused at once; static pods keep theirs.
func (l *Lab) AddKubePod(ctx context.Context, i int, kp KubePod) (Host, error) {
	if !l.hasNode(i) {
		return Host{}, fmt.Errorf("no node %d", i)
	}
	var pod string
	err := l.update(func(s *State) error {
		if s.Kube == nil {
			return ErrNoKube
		}
		for h, p := range s.Kube.Pods {
			if p.UID == kp.UID {
				return fmt.Errorf("pod %s/%s (%s) already runs as %s", kp.Namespace, kp.Name, kp.UID, h)
			}
		}
		n := slices.IndexFunc(s.Nodes, func(n NodeState) bool { return n.Index == i })
		j := nextFree(s.Nodes[n].Pods, s.Nodes[n].LastKube, MaxPodsPerNode)
		if j == 0 {
			return fmt.Errorf("node %d has no free pod address", i)
		}
		pod = PodName(i, j)
		if err := l.newHostNS(pod); err != nil {
			return err
		}
		if err := l.buildPod(i, j); err != nil {
			_ = deleteNS(NSName(l.name, pod))
			return err
		}
		s.Nodes[n].Pods = append(s.Nodes[n].Pods, j)
		slices.Sort(s.Nodes[n].Pods)
		s.Nodes[n].LastKube = j
		if s.Kube.Pods == nil {
			s.Kube.Pods = map[string]KubePod{}
		}
		s.Kube.Pods[pod] = kp
		return nil
	})
	if err != nil {
		return Host{}, err
	}
	if len(l.snapshot().Echo) > 0 && !kp.Flowlb {
		if err := l.startEcho(ctx, []string{pod}, 10*time.Second); err != nil {
			_ = l.DelPod(pod)
			return Host{}, err
		}
	}
	return l.Host(pod)
}

// nextFree returns the first index in 1..max after last (wrapping) that is
// not in used, or 0 if all are.
func nextFree(used []int, last, max int) int {
	for k := 1; k <= max; k++ {
		j := (last+k-1)%max + 1
		if !slices.Contains(used, j) {
			return j
		}
	}
	return 0
}

// KubePods returns the lab pods that run Kubernetes pods, by host name,
// as the state file has them now (another process may have changed it).
func (l *Lab) KubePods() (map[string]KubePod, error) {
	out := map[string]KubePod{}
	err := l.update(func(s *State) error {
		if s.Kube != nil {
			maps.Copy(out, s.Kube.Pods)
		}
		return nil
	})
	return out, err
}

// EchoUp reports whether pod's echo server runs and has bound its ports.
func (l *Lab) EchoUp(pod string) bool {
	s := l.snapshot()
	for _, p := range s.Procs {
		if p.Host == pod && p.Name == EchoProc {
			if !p.alive() {
				return false
			}
			_, err := os.Stat(l.readyFile(pod))
			return err == nil
		}
	}
	return false
}

// TermEcho stops pod's echo server the way a container runtime stops a
// container: SIGTERM, then SIGKILL if it still runs after grace.
func (l *Lab) TermEcho(pod string, grace time.Duration) error {
	var p *ProcState
	for _, q := range l.snapshot().Procs {
		if q.Host == pod && q.Name == EchoProc && q.alive() {
			p = &q
		}
	}
	if p == nil {
		return nil
	}
	_ = unix.Kill(p.PID, unix.SIGTERM)
	deadline := time.Now().Add(grace)
	for p.alive() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return l.stopProc(pod, EchoProc)
}
