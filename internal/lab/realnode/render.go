package realnode

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// The configurations of a node's containerd, kubelet and CNI plugins,
// as pure functions of its Spec.

// ContainerdConfig is containerd 1.6's configuration (version 2): every
// path of its own below the node's directory, the CRI plugin with runc
// on cgroupfs, the overlay snapshotter, CNI from the node's own
// configuration, and what this machine needs:
//   - restrict_oom_score_adj: root lacks CAP_SYS_RESOURCE here, so runc
//     cannot lower a process's oom_score_adj and fails every sandbox
//     unless the CRI plugin clamps the value to the current one;
//   - the stream server (kubectl exec, attach, port-forward) on the
//     node's loopback, where the kubelet proxies the API server's
//     streams to it.
func ContainerdConfig(s *Spec) string {
	q := func(v string) string { return fmt.Sprintf("%q", v) }
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("version = 2")
	w("root = %s", q(s.path("containerd", "root")))
	w("state = %s", q(s.path("containerd", "state")))
	w("disabled_plugins = [%s]", strings.Join([]string{q("io.containerd.snapshotter.v1.aufs"), q("io.containerd.snapshotter.v1.btrfs"),
		q("io.containerd.snapshotter.v1.devmapper"), q("io.containerd.snapshotter.v1.zfs"), q("io.containerd.tracing.processor.v1.otlp")}, ", "))
	w("")
	w("[grpc]")
	w("  address = %s", q(s.ContainerdSocket()))
	w("[ttrpc]")
	w("  address = %s", q(s.ContainerdSocket()+".ttrpc"))
	w("[debug]")
	w("  address = %s", q(s.path("containerd", "debug.sock")))
	w("  level = %s", q("info"))
	w("")
	w(`[plugins."io.containerd.internal.v1.opt"]`)
	w("  path = %s", q(s.path("containerd", "opt")))
	w(`[plugins."io.containerd.grpc.v1.cri"]`)
	w("  sandbox_image = %s", q(s.SandboxImage))
	w("  restrict_oom_score_adj = true")
	w("  stream_server_address = %s", q("127.0.0.1"))
	w("  stream_server_port = %s", q("0"))
	w("  enable_selinux = false")
	w("  disable_apparmor = true")
	w("  max_concurrent_downloads = 1")
	w(`  [plugins."io.containerd.grpc.v1.cri".containerd]`)
	w("    snapshotter = %s", q("overlayfs"))
	w("    default_runtime_name = %s", q("runc"))
	w(`    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`)
	w("      runtime_type = %s", q("io.containerd.runc.v2"))
	w(`      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`)
	w("        SystemdCgroup = false")
	w(`  [plugins."io.containerd.grpc.v1.cri".cni]`)
	w("    bin_dir = %s", q(s.CNIBin))
	w("    conf_dir = %s", q(s.CNIConfDir()))
	w("    max_conf_num = 1")
	return b.String()
}

// KubeletConfig is the kubelet's configuration file. The node runs on
// cgroup v1 with the cgroupfs driver below its own cgroup root; the
// kubelet's API takes clients of the lab's CA (the API server) and no
// one else; it changes nothing of the machine's: no iptables chains (the
// node's network is flowlb's), and the kernel tunables it would set are
// files of the node's (Run binds them), so it finds them right.
// Eviction thresholds are low: a lab shares one disk, and a node evicting
// its pods because the machine's disk is three quarters full would fail
// tests for no reason of theirs.
func KubeletConfig(s *Spec) string {
	q := func(v string) string { return fmt.Sprintf("%q", v) }
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("apiVersion: kubelet.config.k8s.io/v1beta1")
	w("kind: KubeletConfiguration")
	w("address: %s", q(s.NodeIPs[0]))
	w("port: 10250")
	w("readOnlyPort: 0")
	w("healthzBindAddress: %s", q("127.0.0.1"))
	w("healthzPort: 10248")
	w("authentication:")
	w("  anonymous:")
	w("    enabled: false")
	w("  webhook:")
	w("    enabled: false")
	w("  x509:")
	w("    clientCAFile: %s", q(s.ClientCA))
	w("authorization:")
	w("  mode: AlwaysAllow")
	w("cgroupDriver: cgroupfs")
	w("cgroupRoot: %s", q(s.CgroupRoot))
	w("cgroupsPerQOS: true")
	w("enforceNodeAllocatable: [%s]", q("pods"))
	w("failCgroupV1: false")
	w("failSwapOn: false")
	w("protectKernelDefaults: false")
	w("makeIPTablesUtilChains: false")
	w("containerRuntimeEndpoint: %s", q("unix://"+s.ContainerdSocket()))
	w("clusterDNS: [%s]", q(s.ClusterDNS))
	w("clusterDomain: %s", q(s.ClusterDomain))
	w("resolvConf: %s", q(s.resolvConf()))
	w("volumePluginDir: %s", q(s.path("kubelet-plugins")))
	w("serializeImagePulls: false")
	w("imageGCHighThresholdPercent: 100")
	w("imageGCLowThresholdPercent: 99")
	w("evictionHard:")
	for _, k := range []string{"memory.available: \"64Mi\"", "nodefs.available: \"1%\"", "nodefs.inodesFree: \"1%\"", "imagefs.available: \"1%\""} {
		w("  %s", k)
	}
	w("maxPods: 110")
	w("shutdownGracePeriod: 0s")
	return b.String()
}

// KubeletArgs are the kubelet's command line, after its binary.
func KubeletArgs(s *Spec) []string {
	args := []string{
		"--config", s.KubeletConfigFile(),
		"--kubeconfig", s.Kubeconfig,
		"--hostname-override", s.Node,
		"--node-ip", strings.Join(s.NodeIPs, ","),
		"--root-dir", "/var/lib/kubelet",
		"--v", "1",
	}
	if len(s.Labels) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
			kv = append(kv, k+"="+s.Labels[k])
		}
		args = append(args, "--node-labels", strings.Join(kv, ","))
	}
	return args
}

// ContainerdArgs are containerd's command line, after its binary.
func ContainerdArgs(s *Spec) []string {
	return []string{"--config", s.ContainerdConfigFile()}
}

// CNIConfig is the node's CNI network: the lab's routed pods, as the lab
// makes its own (docs/lab.md): ptp gives every pod a veth pair whose node
// end carries the pod network's gateway as a /32 (and /128) and a host
// route to the pod, with an address from the node's pod CIDR of each
// family (host-local) and a default route via that gateway; nothing is
// masqueraded, so pods on different
// nodes see each other's real addresses, and the fabric routes each pod
// CIDR to its node. portmap serves hostPort.
func CNIConfig(s *Spec) (string, error) {
	var ranges [][]map[string]string
	var routes []map[string]string
	for _, c := range s.PodCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return "", fmt.Errorf("pod CIDR %q: %w", c, err)
		}
		ranges = append(ranges, []map[string]string{{"subnet": p.Masked().String()}})
		// The pod's default route, via its gateway on the node (the
		// node routes nothing out of the lab).
		def := "0.0.0.0/0"
		if p.Addr().Is6() {
			def = "::/0"
		}
		routes = append(routes, map[string]string{"dst": def})
	}
	if len(ranges) == 0 {
		return "", fmt.Errorf("node %s has no pod CIDR", s.Node)
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "lab",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": false,
				"mtu":    1500,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  ranges,
					"routes":  routes,
					"dataDir": s.path("cni", "ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	return string(b) + "\n", err
}

// ResolvConf is what pods with dnsPolicy Default get.
func ResolvConf(s *Spec) string {
	return "nameserver " + s.Nameserver + "\noptions timeout:1 attempts:1\n"
}

// KernelTunables are the sysctls the kubelet sets machine-wide unless
// they hold these values, and the values: Run binds a file of the node's
// with that value over each, so the machine's stay as they are.
var KernelTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}
