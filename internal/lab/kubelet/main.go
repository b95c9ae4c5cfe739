package kubelet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flowlb/flowlb/internal/lab"
)

// Main is the lab kubelet's command line (`flowlb lab kubelet`, started by
// `lab up --kubernetes` in the fabric namespace; test binaries re-exec
// themselves into it). It serves until SIGTERM or SIGINT.
func Main(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("kubelet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		name, root, kubeconfig, bin string
		fd, zones                   int
	)
	fs.StringVar(&name, "lab", "", "lab name")
	fs.StringVar(&root, "state-dir", lab.DefaultStateRoot, "directory of lab state")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: the lab's kubelet.kubeconfig)")
	fs.IntVar(&fd, "api-listen-fd", -1, "listening socket to forward to the API server")
	fs.StringVar(&bin, "flowlb-bin", "", "flowlb binary that runs pods of flowlb's image (default: this executable)")
	fs.IntVar(&zones, "zones", 0, "topology zones the nodes are dealt into (default: the lab's)")
	nodeIPs := map[int]netip.Addr{}
	fs.Func("node-ip", "N=ADDR: lab node N reports ADDR as its IPv4 InternalIP instead of its fabric address (repeatable)", func(v string) error {
		n, a, err := parseNodeIP(v)
		if err == nil {
			nodeIPs[n] = a
		}
		return err
	})
	forwardOnly := fs.Bool("forward-only", false, "only forward the API listener to the API server: the nodes are real kubelets (lab up --kubelet real)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := lab.Open(name, root)
	if err != nil {
		return err
	}
	if zones == 0 {
		zones = l.Zones()
	}
	if kubeconfig == "" {
		kubeconfig = filepath.Join(l.KubeDir(), "kubelet.kubeconfig")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	rc.UserAgent = "flowlb-lab-kubelet"
	rc.QPS, rc.Burst = 100, 200
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	cfg := Config{Lab: name, Client: client, Runtime: LabRuntime{Lab: l}, Zones: zones,
		FlowlbBin: bin, VolumeDir: filepath.Join(l.KubeDir(), "volumes"), APIHost: lab.ControlAddr.String(), APIPort: lab.KubeAPIPort,
		HostPaths: l.NodeHostPaths,
		NodeIPs:   nodeIPs,
		APIAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(lab.KubeAPIPort)),
		Log:       slog.New(slog.NewTextHandler(stderr, nil))}
	if fd >= 0 {
		if cfg.APIListener, err = lab.ListenerFromFD(fd); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *forwardOnly {
		if cfg.APIListener == nil {
			return errors.New("--forward-only needs --api-listen-fd")
		}
		k := &Kubelet{cfg: cfg, log: cfg.Log}
		k.forward(ctx)
		return nil
	}
	k, err := New(cfg)
	if err != nil {
		return err
	}
	return k.Run(ctx)
}

// parseNodeIP parses --node-ip's N=ADDR: a lab node (from 1) and an
// IPv4 address.
func parseNodeIP(v string) (int, netip.Addr, error) {
	ns, as, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(ns)
	if !ok || err != nil || n < 1 {
		return 0, netip.Addr{}, fmt.Errorf("--node-ip %q: want N=ADDR, N a lab node from 1", v)
	}
	a, err := netip.ParseAddr(as)
	if err != nil || !a.Is4() {
		return 0, netip.Addr{}, fmt.Errorf("--node-ip %q: want an IPv4 address after =", v)
	}
	return n, a, nil
}

// Cluster is a lab with a running Kubernetes control plane.
type Cluster struct {
	Lab    *lab.Lab
	State  *lab.KubeState
	Config *rest.Config
	Client kubernetes.Interface
	// APIReady is the time from start to the API server answering ready;
	// NodesReady to every lab node Ready and pods admissible.
	APIReady, NodesReady time.Duration
}

// Up starts Kubernetes in lab l (lab.StartKube) and waits until every lab
// node is Ready and the default service account exists, so pods can be
// created right away.
func Up(ctx context.Context, l *lab.Lab, o lab.KubeOptions) (*Cluster, error) {
	t0 := time.Now()
	ks, err := l.StartKube(ctx, o)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Lab: l, State: ks, APIReady: time.Since(t0)}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", ks.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 50, 100
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	want := len(l.State().Nodes)
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelLab + "=" + l.Name()})
		if err != nil {
			last = err
			return false, nil
		}
		ready := 0
		for i := range nodes.Items {
			if nodeReady(&nodes.Items[i]) {
				ready++
			}
		}
		if ready < want {
			last = fmt.Errorf("%d of %d nodes ready", ready, want)
			return false, nil
		}
		_, err = c.Client.CoreV1().ServiceAccounts(corev1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			last = fmt.Errorf("default service account: %w", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) {
			err = fmt.Errorf("kubernetes in lab %s not ready: %v (logs in %s)", l.Name(), last, filepath.Join(l.Dir(), "logs"))
		}
		return nil, err
	}
	c.NodesReady = time.Since(t0)
	return c, nil
}
