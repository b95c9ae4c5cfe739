package realnode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Run is the node's runtime: in the mount and UTS namespaces its spawn
// made (and the node's network namespace and cgroup), it isolates the
// node's paths (isolate), takes the node's name as its host name, writes the configurations, starts containerd, imports the
// images, starts the kubelet, and keeps both running (a process that
// exits is started again after a pause) until ctx ends. Then it stops
// the kubelet, every pod (the processes of the node's cgroup tree but
// itself) and containerd, and returns; the node's mounts go with it.
func Run(ctx context.Context, s *Spec, log *slog.Logger) error {
	if err := isolate(s); err != nil {
		return err
	}
	// The node's host name (its spawn gave it a UTS namespace): a
	// hostNetwork pod shares it, and Kubernetes' specs expect the node's
	// name there.
	if err := unix.Sethostname([]byte(s.Node)); err != nil {
		return fmt.Errorf("host name %s: %w", s.Node, err)
	}
	if err := writeConfigs(s); err != nil {
		return err
	}
	// Adopt the shims and pods orphaned by containerd, so that they are
	// not init's and a restart of it finds them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("subreaper: %w", err)
	}
	defer stopAll(s, log)
	ctrd := &daemon{name: "containerd", argv: append([]string{s.Containerd}, ContainerdArgs(s)...), log: s.LogFile("containerd"), l: log}
	if err := ctrd.start(); err != nil {
		return err
	}
	defer ctrd.stop(10 * time.Second)
	if err := waitSocket(ctx, s.ContainerdSocket(), 30*time.Second); err != nil {
		return fmt.Errorf("containerd: %w (log %s)", err, s.LogFile("containerd"))
	}
	if err := importImages(ctx, s); err != nil {
		return err
	}
	kubelet := &daemon{name: "kubelet", argv: append([]string{s.Kubelet}, KubeletArgs(s)...), log: s.LogFile("kubelet"), l: log}
	if err := kubelet.start(); err != nil {
		return err
	}
	defer kubelet.stop(10 * time.Second)
	log.Info("node running", "node", s.Node)
	var wg sync.WaitGroup
	for _, d := range []*daemon{ctrd, kubelet} {
		wg.Go(func() { d.keep(ctx) })
	}
	wg.Wait()
	return nil
}

// writeConfigs writes the node's configurations and makes its
// directories.
func writeConfigs(s *Spec) error {
	cni, err := CNIConfig(s)
	if err != nil {
		return err
	}
	files := map[string]string{
		s.ContainerdConfigFile():                         ContainerdConfig(s),
		s.KubeletConfigFile():                            KubeletConfig(s),
		filepath.Join(s.CNIConfDir(), "10-lab.conflist"): cni,
		s.resolvConf():                                   ResolvConf(s),
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, d := range []string{s.path("logs"), s.path("kubelet-plugins"), s.path("containerd", "opt")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// waitSocket waits until a unix socket accepts connections.
func waitSocket(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting after %s: %w", path, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// importImages imports the node's images into containerd's k8s.io
// namespace, where the CRI plugin finds them, unpacked.
func importImages(ctx context.Context, s *Spec) error {
	for _, img := range s.Images {
		cmd := exec.CommandContext(ctx, s.Ctr, "--address", s.ContainerdSocket(), "--namespace", "k8s.io", "images", "import", img)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("import %s: %v: %s", img, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// daemon is one of the node's long-running processes.
type daemon struct {
	name string
	argv []string
	log  string
	l    *slog.Logger

	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when the current process has exited.
	exited chan struct{}
}

func (d *daemon) start() error {
	f, err := os.OpenFile(d.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(d.argv[0], d.argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// If the runtime itself is killed, its daemons follow it (the lab's
	// cgroup kill gets the rest).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()
	return nil
}

// keep starts the daemon again whenever it exits, until ctx ends.
func (d *daemon) keep(ctx context.Context) {
	for {
		d.mu.Lock()
		exited := d.exited
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-exited:
		}
		d.l.Warn("node process exited; starting it again", "process", d.name, "log", d.log)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if err := d.start(); err != nil {
			d.l.Error("restart", "process", d.name, "err", err)
		}
	}
}

// stop sends SIGTERM, then SIGKILL after grace.
func (d *daemon) stop(grace time.Duration) {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// stopAll kills what the node started that is still running: its pods
// (below the cgroup root) and the shims (in the runtime's own cgroup,
// which the lab made), sparing the runtime itself.
func stopAll(s *Spec, log *slog.Logger) {
	if err := RemoveRoot(s.CgroupRoot, os.Getpid()); err != nil {
		log.Warn("stopping the node's processes", "node", s.Node, "err", err)
	}
}
