// Package realnode runs a lab node as a real Kubernetes node: a kubelet
// of the pinned release with a containerd and runc of its own (Debian's
// packages) and the CNI plugins of Debian's containernetworking-plugins,
// all inside the node's network namespace and a mount namespace of their
// own, so that several nodes share one machine and leave nothing on it
// (docs/lab.md, "Real nodes").
//
// The lab writes a Spec per node and starts `flowlb lab node-runtime` in
// the node's network namespace and cgroup; that process (Run) makes the
// node's mount namespace, writes the configurations (render.go, pure),
// starts containerd, imports the images, starts the kubelet and, when it
// is told to stop, stops them and everything they started.
package realnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Spec is what one node runs with; the lab writes it, the node's
// runtime reads it.
type Spec struct {
	Lab  string `json:"lab"`
	Node string `json:"node"` // n1, n2, ...
	// Dir is the node's own directory: containerd's root and state, the
	// upper layer of its /var, its CNI configuration, logs.
	Dir string `json:"dir"`
	// Keep are the directories below /run that the node's fresh /run
	// shows as they are (the lab's state, where Dir is).
	Keep []string `json:"keep"`
	// NodeIPs are the node's addresses (IPv4 first), PodCIDRs its pod
	// networks, one per family, in the same order.
	NodeIPs  []string `json:"node_ips"`
	PodCIDRs []string `json:"pod_cidrs"`
	// ClusterDNS is the cluster DNS Service's address.
	ClusterDNS    string `json:"cluster_dns"`
	ClusterDomain string `json:"cluster_domain"`
	// Nameserver is what pods with dnsPolicy Default (CoreDNS itself)
	// are given: an address in the lab that answers nothing, so that no
	// query leaves the lab.
	Nameserver string `json:"nameserver"`
	// CgroupRoot is the node's cgroup (cgroupfs driver), the same path in
	// every hierarchy: below it the kubelet makes its pods' cgroups.
	CgroupRoot string            `json:"cgroup_root"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Kubelet is the kubelet binary, Kubeconfig its credentials (the
	// node's own identity), ClientCA the CA whose clients (the API
	// server) may use the kubelet's API.
	Kubelet    string `json:"kubelet"`
	Kubeconfig string `json:"kubeconfig"`
	ClientCA   string `json:"client_ca"`
	// Containerd, Ctr and CNIBin: Debian's containerd, its ctr, the CNI
	// plugins' directory.
	Containerd string `json:"containerd"`
	Ctr        string `json:"ctr"`
	CNIBin     string `json:"cni_bin"`
	// Images are tars of OCI image layouts imported before the kubelet
	// starts (no registry is reachable); SandboxImage is one of them.
	Images       []string `json:"images"`
	SandboxImage string   `json:"sandbox_image"`
}

// SpecFile is where the lab writes the spec of the node whose directory
// is dir.
func SpecFile(dir string) string { return filepath.Join(dir, "spec.json") }

// Write saves s in SpecFile(s.Dir).
func (s *Spec) Write() error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(SpecFile(s.Dir), b, 0o644)
}

// ReadSpec reads a spec file.
func ReadSpec(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Node == "" || s.Dir == "" || len(s.NodeIPs) == 0 || s.CgroupRoot == "" {
		return nil, fmt.Errorf("%s: node, dir, node_ips and cgroup_root are needed", path)
	}
	return &s, nil
}

// The node's paths, all below Dir.
func (s *Spec) path(elem ...string) string { return filepath.Join(append([]string{s.Dir}, elem...)...) }

// ContainerdSocket is the node's containerd's socket.
func (s *Spec) ContainerdSocket() string { return s.path("containerd", "containerd.sock") }

// ContainerdConfigFile, KubeletConfigFile and CNIConfDir are where Run
// writes the configurations.
func (s *Spec) ContainerdConfigFile() string { return s.path("containerd", "config.toml") }
func (s *Spec) KubeletConfigFile() string    { return s.path("kubelet", "config.yaml") }
func (s *Spec) CNIConfDir() string           { return s.path("cni", "net.d") }
func (s *Spec) resolvConf() string           { return s.path("kubelet", "resolv.conf") }

// LogFile is the log of the node's process name (containerd, kubelet).
func (s *Spec) LogFile(name string) string { return s.path("logs", name+".log") }
