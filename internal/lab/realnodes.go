package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/flowlb/flowlb/internal/lab/realnode"
)

// Real nodes (docs/lab.md, "Real nodes"): each lab node runs a real
// kubelet with a containerd of its own, in the node's network namespace
// and in a mount namespace of its own (package realnode).

// ClusterDNS is the cluster DNS Service's address on a lab of real nodes
// (CoreDNS, served by flowlb like any Service).
var ClusterDNS = netip.AddrFrom4([4]byte{198, 19, 64, 10})

// ClusterDomain is the lab cluster's DNS domain.
const ClusterDomain = "cluster.local"

// SandboxImage is the pause image real nodes' sandboxes run (an image
// of RealNodeOptions.Images must carry it).
const SandboxImage = "registry.k8s.io/pause:3.10.1"

// RealNodeOptions say what real nodes run with.
type RealNodeOptions struct {
	// Kubelet is the kubelet binary (default: KubeBinDir()/kubelet).
	Kubelet string
	// Images are OCI layout tars every node imports (no registry is
	// reachable): the sandbox image among them.
	Images []string
	// Runtime is the argv prefix of a node's runtime (default: this
	// executable with "lab node-runtime"); "--spec FILE" is appended.
	Runtime []string
}

// NodeCgroupRoot is real node i's cgroup root: the same path as the lab's
// cgroup of the node's processes, so that in the cgroup v2 hierarchy the
// pods are below their node, where the eBPF data plane's programs act.
func (l *Lab) NodeCgroupRoot(i int) string { return "/flb-" + l.name + "/" + NodeName(i) }

// NodeDir is real node i's own directory.
func (l *Lab) NodeDir(i int) string { return filepath.Join(l.dir, "nodes", NodeName(i)) }

// StartRealNodes starts a real node's runtime on every lab node: the
// lab's Kubernetes control plane (StartKube with RealNodes) must run.
// It returns once they are started; the caller waits for the Nodes.
func (l *Lab) StartRealNodes(o RealNodeOptions) error {
	ks := l.Kube()
	if ks == nil || !ks.RealNodes {
		return fmt.Errorf("lab %s runs no Kubernetes for real nodes (StartKube with RealNodes)", l.name)
	}
	if o.Kubelet == "" {
		o.Kubelet = filepath.Join(KubeBinDir(), ProcKubelet)
	}
	if len(o.Runtime) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Runtime = []string{exe, "lab", "node-runtime"}
	}
	tools, err := realNodeTools()
	if err != nil {
		return err
	}
	var keep []string
	if root := filepath.Dir(l.dir); strings.HasPrefix(root, "/run/") {
		keep = append(keep, root)
	}
	for _, n := range l.State().Nodes {
		i := n.Index
		s := &realnode.Spec{
			Lab: l.name, Node: NodeName(i), Dir: l.NodeDir(i), Keep: keep,
			NodeIPs:    []string{NodeAddr(i).String(), NodeAddr6(i).String()},
			PodCIDRs:   []string{PodCIDR(i).String(), PodCIDR6(i).String()},
			ClusterDNS: ClusterDNS.String(), ClusterDomain: ClusterDomain,
			Nameserver: ControlAddr.String(),
			CgroupRoot: l.NodeCgroupRoot(i),
			Labels:     map[string]string{"flowlb.io/lab": l.name, "topology.kubernetes.io/zone": Zone(i, l.Zones())},
			Kubelet:    o.Kubelet, Kubeconfig: NodeKubeconfig(ks, NodeName(i)), ClientCA: ClientCAFile(ks),
			Containerd: tools["containerd"], Ctr: tools["ctr"], CNIBin: tools["cni"],
			Images: o.Images, SandboxImage: SandboxImage,
		}
		if err := s.Write(); err != nil {
			return err
		}
		if err := realnode.MakeRoot(s.CgroupRoot); err != nil {
			return err
		}
		if err := l.routeVIPsToLoopback(i); err != nil {
			return err
		}
		argv := append(append([]string{}, o.Runtime...), "--spec", realnode.SpecFile(s.Dir))
		if _, err := l.startProc(NodeName(i), ProcNodeRuntime, ProcState{Argv: argv, OwnMounts: true}); err != nil {
			return err
		}
	}
	return nil
}

// routeVIPsToLoopback gives node i a route for the VIP ranges through
// its loopback: a real node's processes (hostNetwork pods, the kubelet's
// probes) connect to cluster IPs and external addresses, and connect()
// needs a route before the output hook translates the connection. A real
// node would have its default route; a lab node has none, and a route
// via the router would send what flowlb does not translate back and
// forth. Untranslated packets sent to loopback with an address that is
// not the node's are dropped.
func (l *Lab) routeVIPsToLoopback(i int) error {
	h, err := l.Node(i).Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, p := range []netip.Prefix{ServiceVIPs, ExternalVIPs, ServiceVIPs6, ExternalVIPs6} {
		if err := h.RouteReplace(&netlink.Route{Dst: ipnet(p), LinkIndex: lo.Attrs().Index}); err != nil {
			return fmt.Errorf("node %d: route %s to loopback: %w", i, p, err)
		}
	}
	return nil
}

// realNodeTools finds Debian's containerd, ctr, runc and CNI plugins.
func realNodeTools() (map[string]string, error) {
	out := map[string]string{}
	var missing []string
	for _, t := range []struct{ name, path, pkg string }{
		{"containerd", "/usr/bin/containerd", "containerd"},
		{"ctr", "/usr/bin/ctr", "containerd"},
		{"shim", "/usr/bin/containerd-shim-runc-v2", "containerd"},
		{"runc", "/usr/sbin/runc", "runc"},
		{"cni", "/usr/lib/cni", "containernetworking-plugins"},
	} {
		if _, err := os.Stat(t.path); err != nil {
			missing = append(missing, t.path+" (Debian package "+t.pkg+")")
			continue
		}
		out[t.name] = t.path
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("real nodes need %s", strings.Join(missing, ", "))
	}
	return out, nil
}
