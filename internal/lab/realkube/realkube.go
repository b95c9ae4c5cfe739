// Package realkube brings up Kubernetes on a lab whose nodes are real
// kubelets (package realnode): the control plane with kube-scheduler,
// every node's containerd and kubelet, the Nodes' pod networks, the
// cluster DNS (CoreDNS) and a volume for flowlb's server. What it does
// not run is a service proxy: Services need flowlb (or kube-proxy) to be
// installed next, as on any cluster (docs/lab.md, "Real nodes").
package realkube

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/shared/ociimage"
	"github.com/flowlb/flowlb/internal/shared/version"
)

// Options of Up.
type Options struct {
	Kube lab.KubeOptions
	// Images are the OCI layout tars every node imports (default: the
	// newest e2e image tar of hack/test-images.sh's cache, TestImages).
	Images []string
	// Runtime, if set, is the argv prefix of the nodes' runtime
	// (lab.RealNodeOptions.Runtime).
	Runtime []string
	// Timeout bounds the wait for the nodes (default 3 minutes).
	Timeout time.Duration
}

// DefaultImageCache is where hack/test-images.sh caches the e2e images
// ($FLOWLB_IMAGE_CACHE overrides it).
const DefaultImageCache = "/var/cache/flowlb/images"

// TestImages finds the newest tar of e2e images hack/test-images.sh made.
func TestImages() (string, error) {
	dir := os.Getenv("FLOWLB_IMAGE_CACHE")
	if dir == "" {
		dir = DefaultImageCache
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "e2e-*.tar"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no e2e images in %s: run hack/test-images.sh", dir)
	}
	sort.Slice(matches, func(i, j int) bool {
		a, _ := os.Stat(matches[i])
		b, _ := os.Stat(matches[j])
		return a.ModTime().After(b.ModTime())
	})
	return matches[0], nil
}

// Up starts the control plane for real nodes, the nodes, and waits until
// every node is Ready with its pod networks; then the cluster DNS and the
// server's volume.
func Up(ctx context.Context, l *lab.Lab, o Options) (*kubelet.Cluster, error) {
	t0 := time.Now()
	if len(o.Images) == 0 {
		img, err := TestImages()
		if err != nil {
			return nil, err
		}
		o.Images = []string{img}
	}
	o.Kube.RealNodes = true
	ks, err := l.StartKube(ctx, o.Kube)
	if err != nil {
		return nil, err
	}
	c := &kubelet.Cluster{Lab: l, State: ks, APIReady: time.Since(t0)}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", ks.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 50, 100
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	if err := l.StartRealNodes(lab.RealNodeOptions{Images: o.Images, Runtime: o.Runtime}); err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	if err := waitNodes(ctx, l, c.Client, timeout); err != nil {
		return nil, err
	}
	if err := applyAll(ctx, c.Client, clusterDNS()); err != nil {
		return nil, fmt.Errorf("cluster DNS: %w", err)
	}
	if err := serverVolume(ctx, l, c.Client); err != nil {
		return nil, fmt.Errorf("flowlb server's volume: %w", err)
	}
	c.NodesReady = time.Since(t0)
	return c, nil
}

// waitNodes gives each lab node's Node its pod networks as soon as it
// registers (the lab's routes, not an allocator's) and waits until all
// are Ready and the default service account exists.
func waitNodes(ctx context.Context, l *lab.Lab, client kubernetes.Interface, timeout time.Duration) error {
	want := map[string][]string{}
	for _, n := range l.State().Nodes {
		want[lab.NodeName(n.Index)] = []string{lab.PodCIDR(n.Index).String(), lab.PodCIDR6(n.Index).String()}
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kubelet.LabelLab + "=" + l.Name()})
		if err != nil {
			last = err
			return false, nil
		}
		ready := 0
		for i := range nodes.Items {
			n := &nodes.Items[i]
			cidrs, ours := want[n.Name]
			if !ours {
				continue
			}
			if len(n.Spec.PodCIDRs) == 0 {
				patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q,%q]}}`, cidrs[0], cidrs[0], cidrs[1])
				if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					last = fmt.Errorf("node %s's pod CIDRs: %w", n.Name, err)
				}
				continue
			}
			if !slices.Equal(n.Spec.PodCIDRs, cidrs) {
				return false, fmt.Errorf("node %s has pod CIDRs %v, want %v", n.Name, n.Spec.PodCIDRs, cidrs)
			}
			if nodeReady(n) {
				ready++
			}
		}
		if ready < len(want) {
			last = fmt.Errorf("%d of %d nodes ready", ready, len(want))
			return false, nil
		}
		if _, err := client.CoreV1().ServiceAccounts(corev1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			last = fmt.Errorf("default service account: %w", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("real nodes of lab %s not ready: %v (logs in %s)", l.Name(), last, filepath.Join(l.Dir(), "nodes"))
		}
		return err
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// FlowlbImage packs the flowlb binary exe (static, as `make build` makes
// it) as flowlb's image, as `make image` does for this machine's
// architecture, into a tar in dir that every node imports, and returns
// the image's reference: flowlb.lab/flowlb:sha-<the binary's digest>, so
// that another binary is another tag (an upgrade).
func FlowlbImage(exe, dir string) (ref, path string, err error) {
	refs, path, err := FlowlbImages(exe, dir, "")
	if err != nil {
		return "", "", err
	}
	return refs[0], path, nil
}

// FlowlbImages is FlowlbImage of one image per marker, all in one tar:
// "" is FlowlbImage's; another marker is the image's revision label and
// the suffix of its tag (flowlb.lab/flowlb:sha-<digest>-<marker>), an
// image of the same binary with a digest of its own, as a new release's
// would have (the upgrade of the install tests). The layers are shared.
func FlowlbImages(exe, dir string, markers ...string) (refs []string, path string, err error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, "", fmt.Errorf("flowlb image: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return nil, "", fmt.Errorf("flowlb image: %s is dynamically linked (an image has no libc): build it with make build (CGO_ENABLED=0)", exe)
		}
	}
	f.Close()
	content, err := os.ReadFile(exe)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(content)
	tag := "sha-" + hex.EncodeToString(sum[:6])
	spec := ociimage.Spec{Binaries: []ociimage.Binary{{OS: "linux", Arch: runtime.GOARCH, Content: content}},
		Version: version.Version, Source: "https://github.com/flowlb/flowlb", Created: time.Unix(0, 0)}
	idx, err := ociimage.Build(spec)
	if err != nil {
		return nil, "", err
	}
	var images []ociimage.Named
	for _, m := range markers {
		n := ociimage.Named{Ref: "flowlb.lab/flowlb:" + tag, Index: idx}
		if m != "" {
			n.Ref += "-" + m
			s := spec
			s.Revision = m
			if n.Index, err = ociimage.Reconfigure(idx, s); err != nil {
				return nil, "", err
			}
		}
		refs = append(refs, n.Ref)
		images = append(images, n)
	}
	name := []string{"flowlb-image", tag}
	for _, m := range markers {
		if m != "" {
			name = append(name, m)
		}
	}
	path = filepath.Join(dir, strings.Join(name, "-")+".tar")
	out, err := os.Create(path)
	if err != nil {
		return nil, "", err
	}
	if err := ociimage.WriteArchives(out, images...); err != nil {
		out.Close()
		return nil, "", err
	}
	return refs, path, out.Close()
}
