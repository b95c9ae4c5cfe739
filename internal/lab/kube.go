package lab

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The Kubernetes control plane of a lab (docs/lab.md, "Kubernetes"):
// etcd, kube-apiserver and kube-controller-manager run in the fabric
// namespace, on its own loopback (so labs never clash on ports) and, for
// the API, on the control address that every node and pod reaches. The
// lab kubelet runs there too and forwards a loopback port of the caller's
// namespace to the API, so that kubectl works from the machine's shell.

// KubeVersion is the Kubernetes release the lab runs (hack/kube-bins.sh
// builds it).
const KubeVersion = "v1.34.4"

// KubeServiceCIDR is the cluster-IP range of the lab's Kubernetes
// services: a part of the service VIP range, which flowlb owns.
var KubeServiceCIDR = netip.MustParsePrefix("198.19.64.0/18")

// KubeServiceCIDR6 is the IPv6 cluster-IP range, the second of the
// dual-stack cluster's (IPv4 first, so that Services without ipFamilies
// stay IPv4): a part of the IPv6 service VIP range. A /112 stays within
// what every Kubernetes release's allocator accepts.
var KubeServiceCIDR6 = netip.MustParsePrefix("2001:2:0:a000::/112")

// KubeAPIPort is the API server's port on the control address.
const KubeAPIPort = 6443

// Ports of etcd on the fabric namespace's loopback.
const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
)

// Process names of the control plane (all in the fabric).
const (
	ProcEtcd       = "etcd"
	ProcAPIServer  = "kube-apiserver"
	ProcController = "kube-controller-manager"
	ProcKubelet    = "kubelet"
	ProcScheduler  = "kube-scheduler"
	// ProcNodeRuntime is a real node's runtime (containerd and the
	// kubelet, package realnode), on the node.
	ProcNodeRuntime = "node-runtime"
)

// DefaultKubeCache is where hack/kube-bins.sh caches the binaries, one
// directory per version ($FLOWLB_KUBE_CACHE overrides it).
const DefaultKubeCache = "/var/cache/flowlb/kube"

// KubeBinDir is the directory holding the cached control-plane binaries of
// KubeVersion: $FLOWLB_KUBE_BIN if set, else
// ${FLOWLB_KUBE_CACHE:-/var/cache/flowlb/kube}/KubeVersion.
func KubeBinDir() string {
	if d := os.Getenv("FLOWLB_KUBE_BIN"); d != "" {
		return d
	}
	root := os.Getenv("FLOWLB_KUBE_CACHE")
	if root == "" {
		root = DefaultKubeCache
	}
	return filepath.Join(root, KubeVersion)
}

// KubeBinaries checks that dir holds the control-plane binaries and that
// etcd is installed, and returns the etcd path.
func KubeBinaries(dir string) (etcd string, err error) {
	var missing []string
	for _, b := range []string{ProcAPIServer, ProcController} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(dir, b))
		}
	}
	etcd, err = exec.LookPath("etcd")
	if err != nil {
		missing = append(missing, "etcd (Debian package etcd-server)")
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("missing %s: run hack/kube-bins.sh", strings.Join(missing, ", "))
	}
	return etcd, nil
}

// KubeState describes the lab's Kubernetes control plane.
type KubeState struct {
	Version string `json:"version"`
	Dir     string `json:"dir"` // pki, kubeconfigs, etcd data
	// Kubeconfig is the admin kubeconfig for the machine's shell (and
	// tests): its server is the forwarded loopback port.
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	// LabKubeconfig is the admin kubeconfig for processes in lab
	// namespaces: its server is on the control address.
	LabKubeconfig string `json:"lab_kubeconfig"`
	LabServer     string `json:"lab_server"`
	ServiceCIDR   string `json:"service_cidr"`
	ServiceCIDR6  string `json:"service_cidr6"`
	// UpSeconds is how long the control plane took to come up (processes
	// started until the API answered ready).
	UpSeconds float64 `json:"up_seconds"`
	// RealNodes: the nodes run real kubelets (KubeOptions.RealNodes).
	RealNodes bool `json:"real_nodes,omitempty"`
	// Pods maps lab pods (nI-pJ) to the Kubernetes pods they run.
	Pods map[string]KubePod `json:"pods,omitempty"`
}

// KubeOptions configure StartKube.
type KubeOptions struct {
	BinDir string // kube-apiserver and kube-controller-manager; default KubeBinDir()
	// Kubelet is the argv prefix of the lab kubelet; StartKube appends
	// --lab NAME --state-dir DIR --api-listen-fd 3. Default: this
	// executable with "lab kubelet".
	Kubelet    []string
	KubeletEnv []string
	// Timeout bounds the wait for the API server (default 3 minutes).
	Timeout time.Duration
	// RealNodes: the nodes are real kubelets (package realnode, started
	// by the caller), so the control plane also runs kube-scheduler and
	// authorizes nodes, and the lab kubelet only forwards the API to the
	// machine's loopback.
	RealNodes bool
}

// KubeDir is where the lab keeps its Kubernetes files.
func (l *Lab) KubeDir() string { return filepath.Join(l.dir, "kube") }

// Kube returns the control plane's state, or nil if the lab has none.
func (l *Lab) Kube() *KubeState { return l.snapshot().Kube }

// kubeletArgs are the flags StartKube gives the lab kubelet.
func (l *Lab) kubeletArgs() []string {
	return []string{"--lab", l.name, "--state-dir", filepath.Dir(l.dir), "--api-listen-fd", "3"}
}

// kubeClusterName names the lab's cluster in kubeconfigs and to the
// controller manager.
func (l *Lab) kubeClusterName() string { return "flowlb-" + l.name }

// URLs of the control plane: etcd and the API on the fabric's loopback,
// and the API on the control address for processes in lab namespaces.
var (
	etcdClientURL  = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdClientPort))
	etcdPeerURL    = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdPeerPort))
	apiInFabricURL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(KubeAPIPort))
	apiLabURL      = "https://" + net.JoinHostPort(ControlAddr.String(), strconv.Itoa(KubeAPIPort))
)

// StartKube starts etcd, kube-apiserver, kube-controller-manager and the
// lab kubelet in the fabric namespace, writes the kubeconfigs and returns
// once the API server is ready. The caller waits for the nodes (package
// kubelet does). `lab down` stops it all with the rest of the lab.
func (l *Lab) StartKube(ctx context.Context, o KubeOptions) (*KubeState, error) {
	if l.Kube() != nil {
		return nil, fmt.Errorf("lab %s already runs Kubernetes", l.name)
	}
	etcd, err := o.fillDefaults()
	if err == nil && o.RealNodes {
		err = realNodeBinaries(o.BinDir)
	}
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	dir := l.KubeDir()
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return nil, err
	}
	// etcd's data in memory: a lab's cluster lives as long as the lab,
	// and etcd syncing every write to a disk that other work shares made
	// requests time out ("etcdserver: request timed out") under load.
	// lab down unmounts it.
	if err := unix.Mount("tmpfs", filepath.Join(dir, "etcd"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=1g"); err != nil {
		return nil, fmt.Errorf("etcd's tmpfs: %w", err)
	}
	var nodes []string
	if o.RealNodes {
		for _, n := range l.State().Nodes {
			nodes = append(nodes, NodeName(n.Index))
		}
	}
	pki, err := newKubePKI(filepath.Join(dir, "pki"), nodes...)
	if err != nil {
		return nil, fmt.Errorf("kubernetes certificates: %w", err)
	}
	l.log.Info("kubernetes certificates made", "lab", l.name, "elapsed", time.Since(t0))
	ln, lnf, err := apiForwardListener()
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	defer lnf.Close()
	ks := newKubeState(dir, "https://"+ln.Addr().String())
	ks.RealNodes = o.RealNodes
	if err := l.writeKubeconfigs(ks, pki); err != nil {
		return nil, err
	}
	if err := l.update(func(s *State) error { s.Kube = ks; return nil }); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := l.startKubeProc(ctx, ProcEtcd, etcdArgv(etcd, dir), etcdClientURL+"/health", nil); err != nil {
		return nil, err
	}
	l.log.Info("etcd ready", "lab", l.name, "elapsed", time.Since(t0))
	tc, err := pki.clientTLS(pki.admin)
	if err != nil {
		return nil, err
	}
	apiArgv := apiServerArgv(o.BinDir, pki)
	controllers := KubeControllers
	if o.RealNodes {
		apiArgv = realNodesAPIServerArgv(o.BinDir, pki)
		controllers = RealNodeControllers
	}
	if err := l.startKubeProc(ctx, ProcAPIServer, apiArgv, apiInFabricURL+"/readyz", tc); err != nil {
		return nil, err
	}
	ks.UpSeconds = time.Since(t0).Seconds()
	l.log.Info("kube-apiserver ready", "lab", l.name, "elapsed", time.Since(t0))

	if _, err := l.Fabric().Start(ProcController, controllerManagerArgv(o.BinDir, dir, l.kubeClusterName(), pki, controllers)); err != nil {
		return nil, err
	}
	kubeletArgv := append(append([]string{}, o.Kubelet...), l.kubeletArgs()...)
	if o.RealNodes {
		if _, err := l.Fabric().Start(ProcScheduler, schedulerArgv(o.BinDir, dir)); err != nil {
			return nil, err
		}
		kubeletArgv = append(kubeletArgv, "--forward-only")
	}
	if _, err := l.startProc(HostFabric, ProcKubelet, ProcState{Argv: kubeletArgv, Env: o.KubeletEnv}, lnf); err != nil {
		return nil, err
	}
	if err := l.recordKubeUpSeconds(ks.UpSeconds); err != nil {
		return nil, err
	}
	return ks, nil
}

// fillDefaults sets the defaults the field comments of KubeOptions name,
// checks the binaries and returns the path of etcd.
func (o *KubeOptions) fillDefaults() (etcd string, err error) {
	if o.BinDir == "" {
		o.BinDir = KubeBinDir()
	}
	etcd, err = KubeBinaries(o.BinDir)
	if err != nil {
		return "", err
	}
	if len(o.Kubelet) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		o.Kubelet = []string{exe, "lab", "kubelet"}
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	return etcd, nil
}

// apiForwardListener binds the loopback port of the caller's namespace
// that the kubelet forwards to the API: bound here, so the kubeconfig is
// right before the kubelet even runs. The file is what the kubelet
// inherits; the caller closes both.
func apiForwardListener() (net.Listener, *os.File, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	lnf, err := ln.(*net.TCPListener).File()
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, lnf, nil
}

// newKubeState describes a control plane kept in dir whose API the
// machine's shell reaches at local.
func newKubeState(dir, local string) *KubeState {
	return &KubeState{
		Version:       KubeVersion,
		Dir:           dir,
		Kubeconfig:    filepath.Join(dir, "admin.kubeconfig"),
		Server:        local,
		LabKubeconfig: filepath.Join(dir, "lab-admin.kubeconfig"),
		LabServer:     apiLabURL,
		ServiceCIDR:   KubeServiceCIDR.String(),
		ServiceCIDR6:  KubeServiceCIDR6.String(),
	}
}

// writeKubeconfigs writes the admin kubeconfigs of ks (the shell's and the
// lab's) and those of the controller manager and the kubelet.
func (l *Lab) writeKubeconfigs(ks *KubeState, pki *kubePKI) error {
	type kubeconfig struct {
		path, server string
		cred         keyPair
	}
	kcs := []kubeconfig{
		{ks.Kubeconfig, ks.Server, pki.admin},
		{ks.LabKubeconfig, ks.LabServer, pki.admin},
		{filepath.Join(ks.Dir, "controller-manager.kubeconfig"), apiInFabricURL, pki.controller},
		{filepath.Join(ks.Dir, "kubelet.kubeconfig"), apiInFabricURL, pki.kubelet},
	}
	if pki.nodes != nil {
		kcs = append(kcs, kubeconfig{filepath.Join(ks.Dir, "scheduler.kubeconfig"), apiInFabricURL, pki.scheduler})
	}
	for name, cred := range pki.nodes {
		// Nodes reach the API on the control address.
		kcs = append(kcs, kubeconfig{NodeKubeconfig(ks, name), apiLabURL, cred})
	}
	for _, kc := range kcs {
		if err := writeKubeconfig(kc.path, l.kubeClusterName(), kc.server, pki.ca.cert, kc.cred); err != nil {
			return err
		}
	}
	return nil
}

// startKubeProc starts the control-plane process name in the fabric and
// waits until url answers 200 there.
func (l *Lab) startKubeProc(ctx context.Context, name string, argv []string, url string, tc *tls.Config) error {
	if _, err := l.Fabric().Start(name, argv); err != nil {
		return err
	}
	return l.waitHTTP(ctx, name, url, tc)
}

// recordKubeUpSeconds saves how long the control plane took to come up;
// only the figure, as the kubelet may already be recording pods.
func (l *Lab) recordKubeUpSeconds(up float64) error {
	return l.update(func(s *State) error {
		if s.Kube == nil {
			return ErrNoKube
		}
		s.Kube.UpSeconds = up
		return nil
	})
}

// waitHTTP polls url from inside the fabric until it answers 200, the
// process named proc dies, or ctx ends.
func (l *Lab) waitHTTP(ctx context.Context, proc, url string, tc *tls.Config) error {
	fabric := l.Fabric()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return fabric.Dial(ctx, network, addr)
		},
		TLSClientConfig: tc,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		last = err
		if !l.procAlive(HostFabric, proc) {
			return fmt.Errorf("%s exited (log %s): %v", proc, l.LogPath(HostFabric, proc), last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (log %s): %w (last: %v)", proc, l.LogPath(HostFabric, proc), ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (l *Lab) procAlive(host, name string) bool {
	for _, p := range l.snapshot().Procs {
		if p.Host == host && p.Name == name {
			return p.alive()
		}
	}
	return false
}

// ListenerFromFD turns the descriptor StartKube passes the kubelet back
// into a listener.
func ListenerFromFD(fd int) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), "api-listener")
	if f == nil {
		return nil, fmt.Errorf("no file descriptor %d", fd)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listener on fd %d: %w", fd, err)
	}
	return ln, nil
}

// ErrNoKube is returned by lab methods that need Kubernetes in a lab
// without it.
var ErrNoKube = errors.New("the lab runs no Kubernetes (lab up --kubernetes)")

// NodeKubeconfig is the kubeconfig of real node name (its identity).
func NodeKubeconfig(ks *KubeState, name string) string {
	return filepath.Join(ks.Dir, "kubelet-"+name+".kubeconfig")
}

// ClientCAFile is the lab CA's certificate: real kubelets take the API
// server's client certificate, which it signed.
func ClientCAFile(ks *KubeState) string { return filepath.Join(ks.Dir, "pki", "ca.crt") }

// realNodeBinaries checks that dir holds what real nodes need besides the
// control plane: kube-scheduler and the kubelet.
func realNodeBinaries(dir string) error {
	var missing []string
	for _, b := range []string{ProcScheduler, ProcKubelet} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(dir, b))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: run hack/kube-bins.sh", strings.Join(missing, ", "))
	}
	return nil
}
