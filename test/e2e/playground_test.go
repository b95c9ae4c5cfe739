package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestPlayground runs the README's "Try it" through the CLI: `lab up
// --kubernetes --flowlb`, the printed KUBECONFIG, a LoadBalancer Service
// made with kubectl, reached from the external client and from a pod on
// its cluster IP, and `lab down` leaving no namespace behind. With
// FLOWLB_E2E_DATAPLANE=ebpf the lab runs `--dataplane ebpf`, and the
// agents the manifests deploy run on eBPF.
func TestPlayground(t *testing.T) {
	labtest.SkipUnlessRoot(t)
	kubetest.SkipUnlessKube(t)
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is missing (Debian kubernetes-client, installed by hack/kube-bins.sh)")
	}
	bin := flowlb(t)
	name := labtest.Name()
	run := func(args ...string) (string, error) {
		// Not t.Context(): down runs in a cleanup, after it ends.
		out, err := exec.Command(bin, append([]string{"lab", "--name", name}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := run("down"); err != nil {
			t.Errorf("lab down: %v\n%s", err, out)
		}
		if left, _ := filepath.Glob(filepath.Join(lab.NetnsDir, lab.Prefix(name)+"*")); len(left) > 0 {
			t.Errorf("lab down left namespaces %v", left)
		}
	})
	out, err := run("up", "--nodes", "2", "--pods-per-node", "0", "--kubernetes", "--flowlb", "--dataplane", dataplane())
	if err != nil {
		t.Fatalf("lab up --kubernetes --flowlb: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("lab up does not say where the kubeconfig is:\n%s", out)
	}
	k := func(args ...string) string {
		t.Helper()
		o, err := exec.CommandContext(t.Context(), kubectl, append([]string{"--kubeconfig", m[1]}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return strings.TrimSpace(string(o))
	}
	// The printed openstack line: https, and the CA it names verifies the
	// API from the client.
	ca := regexp.MustCompile(`--os-endpoint (https://\S+) --os-cacert (\S+) `).FindStringSubmatch(out)
	if ca == nil {
		t.Fatalf("lab up prints no openstack line with https and --os-cacert:\n%s", out)
	}
	if o, err := run("exec", "client", "--", "curl", "-sSf", "-m", "5", "--cacert", ca[2], ca[1]+"/v2/lbaas/loadbalancers"); err != nil {
		t.Fatalf("the API with the printed CA: %v\n%s", err, o)
	}
	k("create", "deployment", "web", "--image=flowlb/echo", "--port=8080", "--replicas=2")
	k("expose", "deployment", "web", "--type=LoadBalancer", "--port=80", "--target-port=8080")
	var ip string
	testutil.Eventually(t, 60*time.Second, "the Service's ingress address", func() (bool, string) {
		ip = k("get", "service", "web", "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}")
		return ip != "", "none yet"
	})
	pods := map[string]bool{}
	testutil.Eventually(t, 60*time.Second, "both pods answer the external client", func() (bool, string) {
		o, err := run("exec", "client", "--", "curl", "-s", "-m", "2", "http://"+ip+"/")
		if err == nil {
			if p := regexp.MustCompile(`pod=(\S+)`).FindStringSubmatch(o); p != nil {
				pods[p[1]] = true
			}
		}
		return len(pods) == 2, o
	})
	podToClusterIP(t, name, k("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")+":80")

	// The printed dashboard URL opens from this machine and lists the
	// Service's load balancer (among those of the cluster's other
	// Services), with the agents of both nodes.
	dash := regexp.MustCompile(`http://127\.0\.0\.1:\d+/dashboard/`).FindString(out)
	if dash == "" {
		t.Fatalf("lab up prints no dashboard URL:\n%s", out)
	}
	testutil.Eventually(t, 15*time.Second, "the Service's load balancer on the dashboard", func() (bool, string) {
		resp, err := http.Get(dash + "api/state")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var st struct {
			LoadBalancers []struct {
				Name               string `json:"name"`
				ProvisioningStatus string `json:"provisioning_status"`
			} `json:"loadbalancers"`
			Agents []struct{ Node string } `json:"agents"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return false, fmt.Sprint(resp.StatusCode, " ", err)
		}
		for _, lb := range st.LoadBalancers {
			if strings.HasSuffix(lb.Name, "_default_web") && lb.ProvisioningStatus == "ACTIVE" && len(st.Agents) == 2 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("load balancers %+v, agents %+v", st.LoadBalancers, st.Agents)
	})
}

// podToClusterIP: a web pod's connections to the Service's cluster IP
// vip are answered; in the pod's node they leave conntrack entries to
// the cluster IP on nftables, and none on eBPF, where the agent's pinned
// map holds the cluster IP and the connections are translated at
// connect() (lab.Host.Dial makes them in the pod's cgroup).
func podToClusterIP(t *testing.T, name, vip string) {
	t.Helper()
	l, err := lab.Open(name, "")
	if err != nil {
		t.Fatal(err)
	}
	var pod lab.Host
	for host, kp := range l.State().Kube.Pods {
		if kp.Namespace == "default" && strings.HasPrefix(kp.Name, "web-") && !kp.HostNetwork {
			if pod, err = l.Host(host); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if pod.Name == "" {
		t.Fatalf("no web pod among %v", l.State().Kube.Pods)
	}
	_, i, _, err := lab.ParseHost(pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	node := l.Node(i)
	ip, _, _ := strings.Cut(vip, ":")
	if dataplane() == lab.DataplaneEBPF {
		var out strings.Builder
		if err := node.Run(t.Context(), nil, &out, &out, flowlb(t), "agent", "dump", "--bpf-pin-dir", l.BPFPinDir(i)); err != nil {
			t.Fatalf("agent dump in %s: %v\n%s", node.Name, err, out.String())
		}
		if !strings.Contains(out.String(), vip+" TCP") {
			t.Fatalf("%s's pinned services map lacks the cluster IP %s: the agent is not on eBPF\n%s", node.Name, vip, out.String())
		}
	}
	if err := node.Run(t.Context(), nil, nil, nil, "conntrack", "-F"); err != nil {
		t.Fatalf("conntrack -F in %s: %v", node.Name, err)
	}
	for range 10 {
		if _, err := pod.Ask(t.Context(), vip, 3*time.Second); err != nil {
			t.Fatalf("%s to the cluster IP %s: %v", pod.Name, vip, err)
		}
	}
	var out strings.Builder
	_ = node.Run(t.Context(), nil, &out, &out, "conntrack", "-L", "-p", "tcp", "--orig-dst", ip)
	n := strings.Count(out.String(), "dport=80 ")
	switch {
	case dataplane() == lab.DataplaneEBPF && n != 0:
		t.Errorf("%d conntrack entries to %s in %s after 10 connections from %s: not translated at connect()\n%s", n, vip, node.Name, pod.Name, out.String())
	case dataplane() != lab.DataplaneEBPF && n == 0:
		t.Errorf("no conntrack entry to %s in %s after 10 connections from %s through nftables", vip, node.Name, pod.Name)
	}
	t.Logf("%s to the cluster IP %s on %s: 10 answers, %d conntrack entries to it in %s", pod.Name, vip, dataplane(), n, node.Name)
}
