package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	labload "github.com/flowlb/flowlb/internal/lab/load"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// labOverlay is deploy/kubernetes/overlays/lab of this repository, or
// overlays/lab-ebpf for a run on eBPF: the agents' data plane is the
// manifests' to say.
func labOverlay(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	overlay := "lab"
	if dataplane() == lab.DataplaneEBPF {
		overlay = "lab-ebpf"
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "kubernetes", "overlays", overlay)
}

// TestKubernetesDeploy does what a user does: on a lab with Kubernetes and
// no flowlb, `kubectl apply -k` of the manifests (the lab overlay, on
// eBPF lab-ebpf), wait for the rollouts, then a Deployment with a
// ClusterIP and a LoadBalancer Service made with kubectl, reached from a
// pod (on eBPF translated at connect(), by the agent the manifests
// configured: podToClusterIP) and from the external client; rolling
// updates of the agent DaemonSet and of the server under a stream of
// held connections (the client's to the external address, a pod's to
// the cluster IP) and new ones; `kubectl delete -k`, which leaves no
// flowlb state in any node's kernel.
func TestKubernetesDeploy(t *testing.T) {
	kubetest.SkipUnlessKube(t)
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is missing (Debian kubernetes-client, installed by hack/kube-bins.sh)")
	}
	bin := flowlb(t)
	l := labtest.New(t, 3, 0, func(o *lab.Options) { o.Dataplane = dataplane() })
	ctx := t.Context()
	kc, err := kubelet.Up(ctx, l, lab.KubeOptions{Kubelet: []string{bin, "lab", "kubelet"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			kubetest.LogTails(t, l, 30)
		}
	})
	k := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kc.State.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	overlay := labOverlay(t)
	k("apply", "-k", overlay)
	rollout := func() {
		for _, o := range []string{"deployment/flowlb-server", "daemonset/flowlb-agent", "deployment/flowlb-kube-controller"} {
			k("-n", "flowlb-system", "rollout", "status", o, "--timeout=180s")
		}
	}
	rollout()
	apiOverTLS(t, l, k("-n", "flowlb-system", "get", "secret", "flowlb-agent", "-o", `jsonpath={.data.ca\.crt}`))

	k("create", "deployment", "web", "--image=flowlb/echo", "--port=8080", "--replicas=3")
	k("expose", "deployment", "web", "--port=80", "--target-port=8080")
	k("expose", "deployment", "web", "--name=web-lb", "--type=LoadBalancer", "--port=80", "--target-port=8080")
	clusterIP := strings.TrimSpace(k("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"))
	var extIP string
	testutil.Eventually(t, 60*time.Second, "web-lb's external address", func() (bool, string) {
		extIP = strings.TrimSpace(k("get", "service", "web-lb", "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}"))
		return extIP != "", "none yet"
	})
	var podHost lab.Host
	pods, err := l.KubePods()
	if err != nil {
		t.Fatal(err)
	}
	for h, kp := range pods {
		if strings.HasPrefix(kp.Name, "web-") {
			podHost, _ = l.Host(h)
		}
	}
	if podHost.Name == "" {
		t.Fatalf("no lab pod runs web: %v", pods)
	}
	reach := func(from lab.Host, addr string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, from.Name+" -> "+addr, func() (bool, string) {
			r, err := ask(from, addr)
			if err != nil {
				return false, err.Error()
			}
			return strings.HasPrefix(r.Pod, "default/web-"), r.Pod
		})
	}
	reach(podHost, net.JoinHostPort(clusterIP, "80"))
	reach(l.Client(), net.JoinHostPort(extIP, "80"))
	podToClusterIP(t, l.Name(), net.JoinHostPort(clusterIP, "80"))

	// Held connections from the client and from a pod, each asked every
	// 100 ms, and new connections at 50/s, while the agents and then the
	// server roll.
	extVIP := net.JoinHostPort(extIP, "80")
	held := holdConnections(t, l.Client(), extVIP, 8)
	heldPod := holdConnections(t, podHost, net.JoinHostPort(clusterIP, "80"), 4)
	lctx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan labload.Result, 1)
	go func() {
		r, _ := l.Client().Load(lctx, labload.Config{Target: extVIP, Concurrency: 4, Rate: 50, Duration: 10 * time.Minute, Timeout: time.Second})
		loadDone <- r
	}()
	start := time.Now()
	k("-n", "flowlb-system", "rollout", "restart", "daemonset/flowlb-agent")
	k("-n", "flowlb-system", "rollout", "status", "daemonset/flowlb-agent", "--timeout=180s")
	agentsRolled := time.Since(start)
	k("-n", "flowlb-system", "rollout", "restart", "deployment/flowlb-server")
	k("-n", "flowlb-system", "rollout", "status", "deployment/flowlb-server", "--timeout=180s")
	stopLoad()
	res := <-loadDone
	lost, lostPod := held.stop(), heldPod.stop()
	t.Logf("rolling updates: agents in %s, server in %s; held connections: %d of 8 from the client and %d of 4 from %s lost; new connections: %d ok, %d failed %v",
		agentsRolled.Round(time.Millisecond), (time.Since(start) - agentsRolled).Round(time.Millisecond), lost, lostPod, podHost.Name, res.Count, res.Errors, res.ByError)
	if lost+lostPod > 0 {
		t.Errorf("%d established connections lost during the rolling updates", lost+lostPod)
	}
	if res.Count == 0 || res.Errors*100 > res.Count {
		t.Errorf("new connections during the rolling updates: %d ok, %d failed (%v); the bound is 1%%", res.Count, res.Errors, res.ErrorSample)
	}

	k("delete", "-k", overlay, "--wait=true", "--timeout=120s")
	testutil.Eventually(t, 60*time.Second, "no flowlb process left", func() (bool, string) {
		left, err := l.KubePods()
		if err != nil {
			return false, err.Error()
		}
		for h, kp := range left {
			if kp.Flowlb {
				return false, h + " still runs " + kp.Name
			}
		}
		return true, ""
	})
	for i, n := range l.Nodes() {
		var b strings.Builder
		_ = n.Run(ctx, nil, &b, &b, "nft", "list", "tables")
		if strings.Contains(b.String(), "flowlb") {
			t.Errorf("node %s keeps flowlb's nftables state after kubectl delete -k:\n%s", n.Name, b.String())
		}
		if l.Dataplane() == lab.DataplaneEBPF {
			// --remove-on-delete takes the pins too, and with them the
			// programs and maps.
			if _, err := os.Stat(l.BPFPinDir(i + 1)); !os.IsNotExist(err) {
				t.Errorf("node %s keeps flowlb's eBPF pins after kubectl delete -k (%s: %v)", n.Name, l.BPFPinDir(i+1), err)
			}
		}
	}
}

// apiOverTLS checks, from the lab's client, that the API of the lab
// overlay answers over TLS verified with the CA the server published in
// the agents' Secret (caB64, as kubectl prints it), and not over plain
// HTTP.
func apiOverTLS(t *testing.T, l *lab.Lab, caB64 string) {
	t.Helper()
	caPEM, err := base64.StdEncoding.DecodeString(caB64)
	if err != nil {
		t.Fatalf("ca.crt of Secret flowlb-agent: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in ca.crt of Secret flowlb-agent: %q", caPEM)
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return l.Client().Dial(ctx, network, addr)
	}
	get := func(c *http.Client, url string) (int, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	verified := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	testutil.Eventually(t, 30*time.Second, "the API over TLS from the client", func() (bool, string) {
		code, err := get(verified, "https://198.18.0.1:9876/v2/lbaas/loadbalancers")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprint(code)
	})
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial}}
	if code, err := get(plain, "http://198.18.0.1:9876/v2/lbaas/loadbalancers"); err == nil && code == http.StatusOK {
		t.Error("the API answered plain HTTP")
	}
	untrusted := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial}}
	if _, err := get(untrusted, "https://198.18.0.1:9876/v2/lbaas/loadbalancers"); err == nil {
		t.Error("the API's certificate verified without the published CA")
	}
}

// heldConns asks over long-lived connections until stop.
type heldConns struct {
	lost atomic.Int32
	done chan struct{}
	wg   sync.WaitGroup
}

func holdConnections(t *testing.T, from lab.Host, addr string, n int) *heldConns {
	h := &heldConns{done: make(chan struct{})}
	for i := range n {
		c, err := from.Dial(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatalf("held connection %d: %v", i, err)
		}
		h.wg.Go(func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				_ = c.SetDeadline(time.Now().Add(3 * time.Second))
				_, err := fmt.Fprintf(c, "hi %d\n", i)
				if err == nil {
					_, err = r.ReadString('\n')
				}
				if err != nil {
					t.Logf("held connection %d lost: %v", i, err)
					h.lost.Add(1)
					return
				}
				select {
				case <-h.done:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	return h
}

// stop ends the connections and returns how many were lost.
func (h *heldConns) stop() int {
	close(h.done)
	h.wg.Wait()
	return int(h.lost.Load())
}
