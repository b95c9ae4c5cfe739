package realnode

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expected configurations in testdata from what the code produces")

func testSpec() *Spec {
	return &Spec{
		Lab: "x", Node: "n2", Dir: "/run/flowlb/lab/x/nodes/n2", Keep: []string{"/run/flowlb/lab"},
		NodeIPs: []string{"198.18.0.2", "2001:2::2"}, PodCIDRs: []string{"198.18.18.0/24", "2001:2:0:4002::/64"},
		ClusterDNS: "198.19.64.10", ClusterDomain: "cluster.local", Nameserver: "198.18.0.250",
		CgroupRoot: "/flb-x/n2", Labels: map[string]string{"flowlb.io/lab": "x", "topology.kubernetes.io/zone": "zone-b"},
		Kubelet: "/var/cache/flowlb/kube/v1.34.4/kubelet", Kubeconfig: "/run/flowlb/lab/x/kube/kubelet-n2.kubeconfig",
		ClientCA: "/run/flowlb/lab/x/kube/pki/ca.crt", Containerd: "/usr/bin/containerd", Ctr: "/usr/bin/ctr", CNIBin: "/usr/lib/cni",
		Images: []string{"/var/cache/flowlb/images/e2e-0123.tar"}, SandboxImage: "registry.k8s.io/pause:3.10.1",
	}
}

// TestConfigs compares each configuration of one node with the whole
// expected text.
func TestConfigs(t *testing.T) {
	s := testSpec()
	cni, err := CNIConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{
		"containerd.toml": ContainerdConfig(s),
		"kubelet.yaml":    KubeletConfig(s),
		"cni.conflist":    cni,
		"resolv.conf":     ResolvConf(s),
		"kubelet.args":    strings.Join(KubeletArgs(s), "\n") + "\n",
		"containerd.args": strings.Join(ContainerdArgs(s), "\n") + "\n",
	} {
		golden(t, filepath.Join("testdata", name), got)
	}
}

// TestConfigsStayInTheNodesDirectory: every path a node's daemons are
// told to write is below the node's directory (what they write at fixed
// paths is isolate's).
func TestConfigsStayInTheNodesDirectory(t *testing.T) {
	s := testSpec()
	written := []string{s.ContainerdSocket(), s.ContainerdConfigFile(), s.KubeletConfigFile(), s.CNIConfDir(), s.resolvConf(), s.LogFile("kubelet"),
		s.path("containerd", "root"), s.path("containerd", "state"), s.path("cni", "ipam"), s.path("kubelet-plugins")}
	for _, p := range written {
		if !strings.HasPrefix(p, s.Dir+"/") {
			t.Errorf("%s is outside %s", p, s.Dir)
		}
	}
	for _, text := range []string{ContainerdConfig(s), KubeletConfig(s)} {
		for _, line := range strings.Split(text, "\n") {
			if i := strings.Index(line, `"/`); i >= 0 {
				p := strings.Trim(line[i:], `"[], `)
				if !strings.HasPrefix(p, s.Dir+"/") && !slices.Contains([]string{s.CNIBin, s.ClientCA, s.CgroupRoot}, p) {
					t.Errorf("configuration line %q names %s, outside %s", line, p, s.Dir)
				}
			}
		}
	}
}

func TestCNIConfigNeedsAPodCIDR(t *testing.T) {
	s := testSpec()
	s.PodCIDRs = nil
	if _, err := CNIConfig(s); err == nil {
		t.Error("a node without pod CIDRs got a CNI configuration")
	}
	s.PodCIDRs = []string{"198.18.18.0/33"}
	if _, err := CNIConfig(s); err == nil {
		t.Error("a bad pod CIDR was taken")
	}
}

func TestSpecRoundTrip(t *testing.T) {
	s := testSpec()
	s.Dir = t.TempDir()
	if err := s.Write(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpec(SpecFile(s.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != s.Node || !slices.Equal(got.NodeIPs, s.NodeIPs) || got.Labels["topology.kubernetes.io/zone"] != "zone-b" {
		t.Errorf("read back %+v", got)
	}
	if err := os.WriteFile(SpecFile(s.Dir), []byte(`{"node":"n1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSpec(SpecFile(s.Dir)); err == nil {
		t.Error("a spec without dir, addresses and cgroup root was taken")
	}
}

// golden compares got with the file's content, or rewrites the file with
// -update (then read the diff before committing it).
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update and read the diff):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}
