package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gnft "github.com/google/nftables"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlb/flowlb/bench/suite/results"
	"github.com/flowlb/flowlb/internal/lab"
	labload "github.com/flowlb/flowlb/internal/lab/load"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The Kubernetes data-plane contenders: flowlb (server, agents,
// kube-controller) on the data plane FLOWLB_E2E_DATAPLANE names (nftables
// by default), flowlb on the eBPF data plane whatever it names (a
// contender of its own, so that both data planes are measured in one
// run beside kube-proxy), and the real kube-proxy v1.34.4 in both its
// modes.
const (
	contenderFlowlb     = results.Baseline
	contenderFlowlbEBPF = "flowlb eBPF"
	contenderKPNFT      = "kube-proxy nftables"
	contenderKPIPTable  = "kube-proxy iptables"
)

// The contests BenchmarkKubeProxyVsFlowlb records.
var (
	contestForwarding = results.Contest{Name: "kube-services-forwarding", Title: "N Services created → every node forwards all of them",
		Unit: "s", Size: "Services", LowerIsBetter: true}
	contestServiceP99 = results.Contest{Name: "kube-service-latency-p99", Title: "One Service created → every node forwards it (p99)",
		Unit: "s", Size: "Services", LowerIsBetter: true}
	contestNodeCPU = results.Contest{Name: "kube-node-cpu", Title: "Per-node proxy CPU time while N Services are programmed",
		Unit: "CPU s", Size: "Services", LowerIsBetter: true}
	contestNodeRSS = results.Contest{Name: "kube-node-rss", Title: "Per-node proxy peak resident memory (largest node)",
		Unit: "MiB", Size: "Services", LowerIsBetter: true}
	contestEndpointChange = results.Contest{Name: "kube-endpoint-change", Title: "One endpoint added → every node forwards to it (median of 5)",
		Unit: "s", Size: "Services", LowerIsBetter: true}
	contestEndpointChangeMax = results.Contest{Name: "kube-endpoint-change-max", Title: "One endpoint added → every node forwards to it (slowest of 5)",
		Unit: "s", Size: "Services", LowerIsBetter: true}
	contestControlCPU = results.Contest{Name: "kube-control-cpu", Title: "flowlb control side CPU time (server, kube-controller)",
		Unit: "CPU s", Size: "Services", LowerIsBetter: true}
	contestControlRSS = results.Contest{Name: "kube-control-rss", Title: "flowlb control side peak resident memory (server + kube-controller)",
		Unit: "MiB", Size: "Services", LowerIsBetter: true}
	contestNodeKernel = results.Contest{Name: "kube-node-kernel-memory", Title: "Kernel memory charged to the per-node proxy for N Services (largest node)",
		Unit: "MiB", Size: "Services", LowerIsBetter: true}
	contestConnRatio = results.Contest{Name: "kube-conn-rate-ratio", Title: "New connections/s through a Service ÷ direct to its pod, at the same time",
		Unit: "ratio", Size: "Services"}
	contestDirectRate = results.Contest{Name: "kube-direct-conn-rate", Title: "New connections/s pod to pod, not through a Service (with N Services loaded)",
		Unit: "conn/s", Size: "Services"}
	contestKPOwnProgramming = results.Contest{Name: "kube-proxy-own-programming-p50", Title: "kube-proxy's own network_programming_duration_seconds during the endpoint changes (p50)",
		Unit: "s", Size: "Services", LowerIsBetter: true}
	contestServiceConnectP50 = results.Contest{Name: "kube-service-connect-p50", Title: "Connect + request + answer through a Service (p50)",
		Unit: "ms", Size: "Services", LowerIsBetter: true}
)

// BenchmarkKubeProxyVsFlowlb runs, on the lab's real Kubernetes control
// plane (2 nodes), the same work for flowlb and for the real kube-proxy
// in nftables and iptables mode, alternately, round after round: a
// Deployment of 10 pods, then N Services selecting it (10 endpoints
// each), created at once by 8 clients; it measures when every node's
// kernel holds every Service with its endpoints (each contender's own
// table, read every 100 ms), checks that the Services answer from a pod
// of every node, and reads the per-node proxy's CPU time and peak memory.
//
// FLOWLB_BENCH_SERVICES (sizes, default 1000), FLOWLB_BENCH_ROUNDS
// (default 3), FLOWLB_BENCH_CONTENDERS (default all four, comma
// separated), FLOWLB_BENCH_RECORD (a JSON record for bench/suite),
// FLOWLB_BENCH_COMMAND (the command line the record names),
// FLOWLB_BENCH_PROFILE (a directory for CPU profiles of flowlb's server,
// kube-controller and agents, of their whole run).
//
//	make bench   # or:
//	FLOWLB_BENCH_SERVICES=100 FLOWLB_BENCH_ROUNDS=1 go test -run '^$' -bench KubeProxyVsFlowlb -benchtime 1x ./test/e2e/
func BenchmarkKubeProxyVsFlowlb(b *testing.B) {
	sizes, err := envInts("FLOWLB_BENCH_SERVICES", "1000")
	if err != nil {
		b.Fatal(err)
	}
	rounds, err := envInts("FLOWLB_BENCH_ROUNDS", "3")
	if err != nil || len(rounds) != 1 {
		b.Fatalf("FLOWLB_BENCH_ROUNDS: one number (%v)", err)
	}
	contenders := []string{contenderFlowlb, contenderFlowlbEBPF, contenderKPNFT, contenderKPIPTable}
	if v := os.Getenv("FLOWLB_BENCH_CONTENDERS"); v != "" {
		contenders = strings.Split(v, ",")
	}
	if slices.ContainsFunc(contenders, func(c string) bool { return strings.HasPrefix(c, "kube-proxy") }) {
		if _, err := os.Stat(filepath.Join(lab.KubeBinDir(), "kube-proxy")); err != nil {
			b.Skipf("kube-proxy not built (hack/kube-bins.sh): %v", err)
		}
	}
	command := os.Getenv("FLOWLB_BENCH_COMMAND")
	if command == "" {
		command = "go test -run '^$' -bench KubeProxyVsFlowlb -benchtime 1x ./test/e2e/"
	}
	rec := results.Run{Date: time.Now().UTC(), Commit: headCommit(), Machine: results.ThisMachine(command)}
	for _, n := range sizes {
		for r := range rounds[0] {
			// Each round starts with another contender: no one always
			// runs on the machine as the previous one left it.
			for i := range contenders {
				who := contenders[(i+r)%len(contenders)]
				b.Run(fmt.Sprintf("%s/services=%d/round=%d", strings.ReplaceAll(who, " ", "-"), n, r+1), func(b *testing.B) {
					m := measureKubeProgramming(b, who, n)
					fmt.Printf("%-20s %6d Services, round %d: all forwarded after %s (per Service p50 %s, p99 %s); node proxy %.2f CPU s, %.0f MiB peak, %.1f MiB kernel; control %.2f CPU s, %.0f MiB peak\n",
						who, n, r+1, m.all.Round(time.Millisecond), m.p50.Round(time.Millisecond), m.p99.Round(time.Millisecond), m.nodeCPU, m.nodeRSS, m.nodeKernel, m.controlCPU, m.controlRSS)
					add := func(c results.Contest, v float64) {
						rec.Add(c, results.Sample{Contender: who, Size: n, Round: r + 1, Value: v})
					}
					add(contestForwarding, m.all.Seconds())
					rec.Distributions = append(rec.Distributions, results.Distribution{Name: "kube-service-latency",
						Title: "One Service created → every node forwards it", Unit: "s", Contender: who, Size: n, Round: r + 1, Values: seconds(m.perService)})
					add(contestServiceP99, m.p99.Seconds())
					add(contestNodeCPU, m.nodeCPU)
					add(contestNodeRSS, m.nodeRSS)
					if len(m.changes) > 0 {
						slices.Sort(m.changes)
						add(contestEndpointChange, m.changes[len(m.changes)/2].Seconds())
						add(contestEndpointChangeMax, m.changes[len(m.changes)-1].Seconds())
					}
					add(contestNodeKernel, m.nodeKernel)
					if isFlowlb(who) {
						add(contestControlCPU, m.controlCPU)
						add(contestControlRSS, m.controlRSS)
					}
					if m.kpOwnP50 > 0 {
						add(contestKPOwnProgramming, m.kpOwnP50)
					}
					if m.conn.ratio > 0 {
						add(contestConnRatio, m.conn.ratio)
						add(contestDirectRate, m.conn.direct)
						add(contestServiceConnectP50, float64(m.conn.viaP50.Microseconds())/1000)
					}
				})
			}
		}
	}
	for _, c := range rec.Contests {
		for _, s := range c.Summarize() {
			fmt.Printf("%-62s %6d %-20s median %8.3f %s (%d rounds) ratio %.2f\n", c.Title, s.Size, s.Contender, s.Median, c.Unit, s.N, s.Ratio)
		}
	}
	if path := os.Getenv("FLOWLB_BENCH_RECORD"); path != "" {
		if err := rec.Write(path); err != nil {
			b.Fatal(err)
		}
	}
}

func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// kubeProgramming is one contender's run at one size.
type kubeProgramming struct {
	all, p50, p99    time.Duration
	perService       []time.Duration // each Service's create → last node, sorted
	nodeCPU, nodeRSS float64         // CPU seconds (mean per node), MiB (largest node)
	// nodeKernel: kernel memory charged to the proxy and its children
	// while the Services were programmed (MiB, largest node).
	nodeKernel             float64
	controlCPU, controlRSS float64 // CPU seconds, MiB (peaks summed)
	// changes: one endpoint added to a Service, until every node
	// forwards to it, with N Services programmed.
	changes []time.Duration
	conn    connRates
	// kpOwnP50: kube-proxy's own programming latency metric over the
	// changes (0 for flowlb, see kubeProxyProgramming).
	kpOwnP50 float64
}

// kubeProxyProgramming reads kube-proxy's own
// kubeproxy_network_programming_duration_seconds histogram from every
// node (its metrics port, 127.0.0.1:10249 in the node's namespace) and
// returns the buckets summed over the nodes. kube-proxy measures from
// the EndpointSlice's last-change-trigger-time annotation, a pod
// condition's time of whole seconds, to its rules written: too coarse
// for flowlb's tens of milliseconds, which is why every contender is also
// timed the same way by traffic.
func kubeProxyProgramming(b *testing.B, e *kubeEnv) []results.Bucket {
	const name = "kubeproxy_network_programming_duration_seconds"
	sum := map[float64]float64{}
	for _, n := range e.lab.Nodes() {
		hc := &http.Client{Transport: &http.Transport{DialContext: n.Dial}, Timeout: 5 * time.Second}
		resp, err := hc.Get("http://127.0.0.1:10249/metrics")
		if err != nil {
			b.Fatal(err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		f, ok := fams[name]
		if !ok {
			continue // nothing observed on this node yet
		}
		for _, m := range f.GetMetric() {
			for _, bk := range m.GetHistogram().GetBucket() {
				sum[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
			}
			sum[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	var out []results.Bucket
	for ub, c := range sum {
		out = append(out, results.Bucket{UpperBound: ub, Count: c})
	}
	return out
}

// connRates are a contender's new-connection rates with N Services
// loaded.
type connRates struct {
	ratio, direct float64 // through the Service ÷ direct (median of the pairs); direct conn/s (median)
	viaP50        time.Duration
}

// measureConnRates loads, from a pod of node 1 and at the same time, the
// Service "one" (one endpoint, see measureEndpointChanges) and its pod
// directly, in slices of 2 s, and pairs each slice's two rates: both
// paths then see the same machine at the same moment, the only fair
// comparison on a shared machine. The direct rate is non-Service
// traffic, which a contender's rules may slow too (iptables' rules are
// walked by every new connection).
func measureConnRates(b *testing.B, e *kubeEnv, pairs int) connRates {
	svc, err := e.k.CoreV1().Services("default").Get(e.ctx, "one", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pods := e.readyPods("one")
	if len(pods) != 1 {
		b.Fatalf("one's ready pods %v, want one", pods)
	}
	via := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80).String()
	direct := netip.AddrPortFrom(netip.MustParseAddr(pods[0]), 8080).String()
	client := e.lab.Pod(1, 1)
	// The endpoint changes before left the Service one pod in
	// Kubernetes; a contender may still send some connections to the
	// pod that left. Measure from when 30 in a row reach the one pod.
	testutil.Eventually(b, time.Minute, "30 connections in a row through "+via+" to "+pods[0], func() (bool, string) {
		for i := range 30 {
			r, err := client.Ask(e.ctx, via, time.Second)
			if err != nil || !strings.HasPrefix(r.Addr, pods[0]+":") {
				return false, fmt.Sprintf("connection %d: %v %v", i+1, r.Addr, err)
			}
		}
		return true, ""
	})
	var ratios, directs []float64
	var viaP50 []time.Duration
	for range pairs {
		var res [2]labload.Result
		var errs [2]error
		var wg sync.WaitGroup
		for i, target := range []string{via, direct} {
			wg.Go(func() {
				res[i], errs[i] = podLoad(b, e, client, target, 2, 2*time.Second)
			})
		}
		wg.Wait()
		for i, r := range res {
			// A few failed connections are the contender's to answer for,
			// not the harness's: they are printed, and only answers count
			// in the rate.
			if errs[i] != nil || r.Count == 0 || r.Errors > r.Count/20 {
				b.Fatalf("load to %s: %v, %d answers, %d errors %v", r.Target, errs[i], r.Count, r.Errors, r.ErrorSample)
			}
			if r.Errors > 0 {
				fmt.Printf("load to %s: %d answers, %d failed connections %v\n", r.Target, r.Count, r.Errors, r.ErrorSample)
			}
		}
		ratios = append(ratios, res[0].Rate/res[1].Rate)
		directs = append(directs, res[1].Rate)
		viaP50 = append(viaP50, res[0].Latency.P50)
	}
	slices.Sort(ratios)
	slices.Sort(directs)
	slices.Sort(viaP50)
	return connRates{ratio: results.Median(ratios), direct: results.Median(directs), viaP50: viaP50[len(viaP50)/2]}
}

// podLoad opens new connections to target for d from `flowlb lab load`
// run in host's namespace and cgroup, as a pod's own process: on the
// eBPF data plane the node's socket programs see its sockets as they see
// the pod's. (The test process's own dials from a pod, on eBPF, take
// each socket from a helper in the pod's cgroup, a round trip per
// connection that halved the rate measured; every contender's load now
// runs the same way.)
func podLoad(b *testing.B, e *kubeEnv, host lab.Host, target string, concurrency int, d time.Duration) (labload.Result, error) {
	var out, errb bytes.Buffer
	err := host.Run(e.ctx, nil, &out, &errb, flowlb(b), "lab", "load", "--name", e.lab.Name(),
		"--state-dir", filepath.Dir(e.lab.Dir()), "--from", host.Name, "--to", target,
		"-c", strconv.Itoa(concurrency), "-d", d.String(), "-o", "json")
	if err != nil {
		return labload.Result{Target: target}, fmt.Errorf("lab load from %s: %v: %s", host.Name, err, errb.String())
	}
	var r labload.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return labload.Result{Target: target}, fmt.Errorf("lab load result: %v: %s", err, out.String())
	}
	return r, nil
}

// measureEndpointChanges adds, changes times, one endpoint to a Service
// of its own (a Deployment of one pod scaled to two, then back) and
// returns for each the time from the EndpointSlice listing the new pod
// ready, as the watch delivers it, until a pod of every node reaches the
// new pod through the Service (each node's pod asks until it does).
func measureEndpointChanges(b *testing.B, e *kubeEnv, changes int) []time.Duration {
	e.deploy("one", 1)
	svc, err := e.k.CoreV1().Services("default").Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "one"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "one"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("tcp")}}}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80).String()
	var clients []lab.Host
	for i := range e.lab.Nodes() {
		clients = append(clients, e.lab.Pod(i+1, 1))
	}
	// reaches waits until every client has been answered by pod ip.
	reaches := func(ip string) (time.Time, error) {
		var mu sync.Mutex
		var last time.Time
		var firstErr error
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() {
				deadline := time.Now().Add(time.Minute)
				for time.Now().Before(deadline) {
					r, err := c.Ask(e.ctx, addr, time.Second)
					if err == nil && strings.HasPrefix(r.Addr, ip+":") {
						mu.Lock()
						if now := time.Now(); now.After(last) {
							last = now
						}
						mu.Unlock()
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
				mu.Lock()
				firstErr = fmt.Errorf("%s never reached pod %s through %s", c.Name, ip, addr)
				mu.Unlock()
			})
		}
		wg.Wait()
		return last, firstErr
	}
	scale := func(n int32) {
		if _, err := e.k.AppsV1().Deployments("default").UpdateScale(e.ctx, "one", &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: n}}, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var first []string
	testutil.Eventually(b, time.Minute, "one's pod ready", func() (bool, string) {
		first = e.readyPods("one")
		return len(first) == 1, fmt.Sprint(first)
	})
	if _, err := reaches(first[0]); err != nil {
		b.Fatal(err)
	}
	var out []time.Duration
	for range changes {
		before := e.readyPods("one")
		ready, newIP := e.nextReadyEndpoint(b, "one", before, func() { scale(2) })
		at, err := reaches(newIP)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, at.Sub(ready))
		scale(1)
		testutil.Eventually(b, time.Minute, "one back to one ready pod", func() (bool, string) {
			got := e.readyPods("one")
			return len(got) == 1, fmt.Sprint(got)
		})
	}
	return out
}

// nextReadyEndpoint runs change, then watches Service name's
// EndpointSlices until one lists a ready endpoint not in before; it
// returns when the watch delivered it, and its address.
func (e *kubeEnv) nextReadyEndpoint(b *testing.B, name string, before []string, change func()) (time.Time, string) {
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name}
	list, err := e.k.DiscoveryV1().EndpointSlices("default").List(e.ctx, sel)
	if err != nil {
		b.Fatal(err)
	}
	sel.ResourceVersion = list.ResourceVersion
	w, err := e.k.DiscoveryV1().EndpointSlices("default").Watch(e.ctx, sel)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	change()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("EndpointSlice watch closed")
			}
			now := time.Now()
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, ep := range s.Endpoints {
				if (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && len(ep.Addresses) > 0 && !slices.Contains(before, ep.Addresses[0]) {
					return now, ep.Addresses[0]
				}
			}
		case <-timeout:
			b.Fatalf("no new ready endpoint of %s within 2 min", name)
		}
	}
}

// isFlowlb says whether a contender is flowlb, on either data plane.
func isFlowlb(who string) bool { return who == contenderFlowlb || who == contenderFlowlbEBPF }

func measureKubeProgramming(b *testing.B, who string, n int) kubeProgramming {
	controllers := 0
	if isFlowlb(who) {
		controllers = 1
	}
	o := kubeEnvOptions{nodes: 2, controllers: controllers}
	if who == contenderFlowlbEBPF {
		o.dataplane = "ebpf"
	}
	if dir := os.Getenv("FLOWLB_BENCH_PROFILE"); dir != "" && isFlowlb(who) {
		// CPU profiles of the control side, written when the lab stops it.
		prefix := ""
		if o.dataplane != "" {
			prefix = o.dataplane + "-"
		}
		o.serverArgs = []string{"--cpuprofile", filepath.Join(dir, fmt.Sprintf("%sserver-%d.pprof", prefix, n))}
		o.controllerArgs = []string{"--cpuprofile", filepath.Join(dir, fmt.Sprintf("%skube-controller-%d.pprof", prefix, n))}
		o.agentArgsOf = func(i int) []string {
			return []string{"--cpuprofile", filepath.Join(dir, fmt.Sprintf("%sagent-%d-node%d.pprof", prefix, n, i))}
		}
	}
	e := newKubeEnvOpts(b, o)
	var proxy string
	switch who {
	case contenderFlowlb, contenderFlowlbEBPF:
		proxy = "agent"
	case contenderKPNFT:
		startKubeProxies(b, e, "nftables")
		proxy = "kube-proxy"
	case contenderKPIPTable:
		startKubeProxies(b, e, "iptables")
		proxy = "kube-proxy"
	default:
		b.Fatalf("unknown contender %q", who)
	}
	e.deploy("web", 10)
	testutil.Eventually(b, 2*time.Minute, "10 ready pods", func() (bool, string) {
		ready := e.readyPods("web")
		return len(ready) == 10, fmt.Sprint(len(ready))
	})
	var nodePIDs, controlPIDs []int
	for _, h := range e.lab.Nodes() {
		nodePIDs = append(nodePIDs, procPID(b, h, proxy))
	}
	if isFlowlb(who) {
		controlPIDs = []int{procPID(b, e.lab.Fabric(), "server"), procPID(b, e.lab.Fabric(), "kube-controller-1")}
	}
	nodeCPU0, controlCPU0 := cpuSeconds(b, nodePIDs), cpuSeconds(b, controlPIDs)
	var kernel []func() float64
	for i, pid := range nodePIDs {
		kernel = append(kernel, kernelMemory(b, fmt.Sprintf("flowlb-bench-%s-%d", strings.ReplaceAll(who, " ", "-"), i+1), pid))
	}

	w := newTableWatcher(b, e.lab, who)
	defer w.stop()
	created := createServices(b, e, n)
	fmt.Printf("%s: %d Services created in %s\n", who, n, time.Since(slices.MinFunc(slices.Collect(maps.Values(created)), func(a, b time.Time) int { return a.Compare(b) })).Round(time.Millisecond))
	limit := 2*time.Minute + time.Duration(n)*50*time.Millisecond
	var lat []time.Duration
	testutil.Eventually(b, limit, fmt.Sprintf("%d Services programmed on every node", n), func() (bool, string) {
		lat = w.lastNode(created)
		return len(lat) == n, fmt.Sprintf("%d of %d", len(lat), n)
	})
	// The watcher reads the tables every 100 ms: not while connections
	// are measured.
	w.stop()
	m := kubeProgramming{}
	start := slices.MinFunc(slices.Collect(maps.Values(created)), func(a, b time.Time) int { return a.Compare(b) })
	for vip, t0 := range created {
		m.all = max(m.all, t0.Sub(start)+w.lastAt(vip).Sub(t0))
	}
	slices.Sort(lat)
	m.perService = lat
	m.p50, m.p99 = lat[len(lat)/2], lat[(len(lat)*99+99)/100-1]
	m.nodeCPU = (cpuSeconds(b, nodePIDs) - nodeCPU0) / float64(len(nodePIDs))
	m.controlCPU = cpuSeconds(b, controlPIDs) - controlCPU0
	if isFlowlb(who) {
		controllerStages(b, e, created, w)
		e.apiTimes(n) // where the control side's time went
		fmt.Printf("control side CPU: server %.2f s, kube-controller %.2f s (with the time before the Services)\n",
			cpuSeconds(b, controlPIDs[:1]), cpuSeconds(b, controlPIDs[1:]))
	}
	for _, pid := range nodePIDs {
		m.nodeRSS = max(m.nodeRSS, peakRSSMiB(b, pid))
	}
	for _, read := range kernel {
		m.nodeKernel = max(m.nodeKernel, read())
	}
	for _, pid := range controlPIDs {
		m.controlRSS += peakRSSMiB(b, pid)
	}
	var kpBefore []results.Bucket
	if proxy == "kube-proxy" {
		kpBefore = kubeProxyProgramming(b, e)
	}
	m.changes = measureEndpointChanges(b, e, 5)
	if proxy == "kube-proxy" {
		m.kpOwnP50 = results.HistogramQuantile(0.5, results.Sub(kubeProxyProgramming(b, e), kpBefore))
		fmt.Printf("%s: its own network_programming_duration_seconds p50 %.3f s during the endpoint changes\n", who, m.kpOwnP50)
	}
	fmt.Printf("%s: one endpoint added → every node forwards to it: %v\n", who, m.changes)
	m.conn = measureConnRates(b, e, 5)
	fmt.Printf("%s: new connections/s through a Service ÷ direct %.3f (direct %.0f/s), through the Service p50 %s\n",
		who, m.conn.ratio, m.conn.direct, m.conn.viaP50)
	if isFlowlb(who) {
		// The control side's work that comes after the Services are
		// forwarded (the endpoint changes above, and what the controller
		// does later of its own) is not in controlCPU: this is the whole.
		whole := cpuSeconds(b, controlPIDs) - controlCPU0
		fmt.Printf("control side CPU: %.2f s while the Services were made (%.2f ms per Service), %.2f s to the end of the round (%.2f ms per Service)\n",
			m.controlCPU, 1000*m.controlCPU/float64(n), whole, 1000*whole/float64(n))
	}
	if o.serverArgs != nil {
		// The profiles are written when the processes end cleanly.
		for _, name := range []string{"kube-controller-1", "server"} {
			if err := e.lab.Fabric().Kill(name, syscall.SIGTERM); err != nil {
				b.Error(err)
			}
		}
		for _, h := range e.lab.Nodes() {
			if err := h.Kill("agent", syscall.SIGTERM); err != nil {
				b.Error(err)
			}
		}
		return m
	}
	// What the tables say is what the kernels do: a few Services answer
	// from a pod of every node.
	vips := slices.Sorted(maps.Keys(created))
	for i := 0; i < len(vips); i += max(1, len(vips)/5) {
		for node := range e.lab.Nodes() {
			pod := e.lab.Pod(node+1, 1)
			if _, err := pod.Ask(e.ctx, netip.AddrPortFrom(netip.MustParseAddr(vips[i]), 80).String(), 3*time.Second); err != nil {
				b.Fatalf("%s: Service %s from %s: %v", who, vips[i], pod.Name, err)
			}
		}
	}
	return m
}

// controllerStages prints where the Services' time went up to the
// kube-controller's view of them (its /debug/stages): from the create
// sent to the informer event (the Kubernetes API accepting it and the
// watch), to a worker taking it (the queue, a new Service's wait for its
// EndpointSlice included), to the API having answered its calls, and
// from there to every node forwarding it (the table watcher) and to the
// controller seeing it ACTIVE; the medians over all Services and over
// the slowest 1 %, and the slowest five.
func controllerStages(b *testing.B, e *kubeEnv, created map[string]time.Time, w *tableWatcher) {
	type stages struct{ Event, Picked, Sent, Active time.Time }
	// Dialled from the lab's fabric, where the controller listens: from
	// the test's own namespace the address may be another lab's.
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: e.lab.Fabric().Dial}}
	resp, err := c.Get("http://" + controllerMetrics(1) + "/debug/stages")
	if err != nil {
		fmt.Printf("controller stages: %v\n", err)
		return
	}
	defer resp.Body.Close()
	var byName map[string]stages
	if err := json.NewDecoder(resp.Body).Decode(&byName); err != nil || resp.StatusCode != http.StatusOK {
		fmt.Printf("controller stages: %s %v\n", resp.Status, err) // a controller without them
		return
	}
	svcs, err := e.k.CoreV1().Services("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	type row struct {
		name                                    string
		total, api, queue, calls, nodes, active time.Duration
	}
	var rows []row
	for _, s := range svcs.Items {
		t0, ok := created[s.Spec.ClusterIP]
		st, known := byName["default/"+s.Name]
		last := w.lastAt(s.Spec.ClusterIP)
		if !ok || !known || last.IsZero() || st.Sent.IsZero() {
			continue
		}
		r := row{name: s.Name, total: last.Sub(t0), api: st.Event.Sub(t0), queue: st.Picked.Sub(st.Event), calls: st.Sent.Sub(st.Picked), nodes: last.Sub(st.Sent)}
		if !st.Active.IsZero() {
			r.active = st.Active.Sub(st.Sent)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		fmt.Println("controller stages: none")
		return
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.total, b.total) })
	median := func(rs []row, f func(row) time.Duration) time.Duration {
		ds := make([]time.Duration, len(rs))
		for i, r := range rs {
			ds[i] = f(r)
		}
		slices.Sort(ds)
		return ds[len(ds)/2].Round(time.Millisecond)
	}
	tail := rows[len(rows)-max(1, len(rows)/100):]
	for _, g := range []struct {
		what string
		rs   []row
	}{{"all", rows}, {"slowest 1 %", tail}} {
		fmt.Printf("stages, median of %s (%d Services): create → every node %s = to the controller's informer %s + queue %s + API calls %s + to every node %s; ACTIVE seen %s after the calls\n",
			g.what, len(g.rs), median(g.rs, func(r row) time.Duration { return r.total }), median(g.rs, func(r row) time.Duration { return r.api }),
			median(g.rs, func(r row) time.Duration { return r.queue }), median(g.rs, func(r row) time.Duration { return r.calls }),
			median(g.rs, func(r row) time.Duration { return r.nodes }), median(g.rs, func(r row) time.Duration { return r.active }))
	}
	for _, r := range rows[max(0, len(rows)-5):] {
		fmt.Printf("  %s: %s = %s + %s + %s + %s; ACTIVE seen after %s\n", r.name, r.total.Round(time.Millisecond), r.api.Round(time.Millisecond),
			r.queue.Round(time.Millisecond), r.calls.Round(time.Millisecond), r.nodes.Round(time.Millisecond), r.active.Round(time.Millisecond))
	}
}

// createServices creates n Services selecting the Deployment web, 8 at a
// time, with a client of its own that Kubernetes' client-side limits do
// not slow down; it returns each Service's cluster IP with the time its
// create was sent.
func createServices(b *testing.B, e *kubeEnv, n int) map[string]time.Time {
	cfg := *e.kc.Config
	cfg.QPS, cfg.Burst = 1000, 2000
	k, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	out := map[string]time.Time{}
	next := make(chan int)
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%05d", i)}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("tcp")}}}}
				t0 := time.Now()
				s, err := k.CoreV1().Services("default").Create(e.ctx, s, metav1.CreateOptions{})
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				out[s.Spec.ClusterIP] = t0
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case err := <-errc:
			close(next)
			wg.Wait()
			b.Fatal(err)
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		b.Fatal(err)
	default:
	}
	return out
}

// tableWatcher reads every node's table of one contender every 100 ms
// and remembers when each cluster IP (port 80) first had endpoints there.
type tableWatcher struct {
	mu    sync.Mutex
	nodes int
	seen  []map[string]time.Time
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func newTableWatcher(b *testing.B, l *lab.Lab, who string) *tableWatcher {
	w := &tableWatcher{nodes: len(l.Nodes()), done: make(chan struct{})}
	for i, h := range l.Nodes() {
		w.seen = append(w.seen, map[string]time.Time{})
		read := programmedReader(b, h, who)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case <-w.done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				vips, err := read()
				if err != nil {
					continue // no table yet
				}
				now := time.Now()
				w.mu.Lock()
				for _, v := range vips {
					if _, ok := w.seen[i][v]; !ok {
						w.seen[i][v] = now
					}
				}
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *tableWatcher) stop() {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
}

// lastAt is when the last node first held vip (zero: not every node yet).
func (w *tableWatcher) lastAt(vip string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for i := range w.nodes {
		at, ok := w.seen[i][vip]
		if !ok {
			return time.Time{}
		}
		if at.After(last) {
			last = at
		}
	}
	return last
}

// lastNode returns, for each VIP of created that every node holds, the
// time from its create to the last node holding it.
func (w *tableWatcher) lastNode(created map[string]time.Time) []time.Duration {
	var out []time.Duration
	for vip, t0 := range created {
		if at := w.lastAt(vip); !at.IsZero() {
			out = append(out, max(at.Sub(t0), 0))
		}
	}
	return out
}

// programmedReader returns a reader of the cluster IPs that node h's
// kernel forwards on port 80 to at least one endpoint, from the
// contender's own table: flowlb's nftables table, kube-proxy's
// service-ips map (a Service without endpoints is in another map), or
// the KUBE-SERVICES chain of iptables' nat table (which jumps to a
// KUBE-SVC chain only for a Service with endpoints).
func programmedReader(b *testing.B, h lab.Host, who string) func() ([]string, error) {
	// Each reader asks the kernel for as little as says "forwarded", so
	// that watching weighs on no contender more than on another: one set
	// per algorithm for flowlb (a service is in one only with a usable
	// backend, written with its slots in one transaction), kube-proxy's
	// service-ips map, the KUBE-SERVICES chain of iptables.
	switch who {
	case contenderFlowlb, contenderFlowlbEBPF:
		return func() ([]string, error) {
			return setVIPs(h, "flowlb", nftables.PickSets...)
		}
	case contenderKPNFT:
		return func() ([]string, error) {
			return setVIPs(h, "kube-proxy", "service-ips")
		}
	case contenderKPIPTable:
		return func() ([]string, error) {
			var stdout, stderr bytes.Buffer
			if err := h.Run(context.Background(), nil, &stdout, &stderr, "iptables", "-t", "nat", "-S", "KUBE-SERVICES"); err != nil {
				return nil, fmt.Errorf("iptables -S: %v: %s", err, stderr.String())
			}
			return kubeServicesWithEndpoints(stdout.Bytes()), nil
		}
	}
	b.Fatalf("unknown contender %q", who)
	return nil
}

// setVIPs reads the named sets (or maps) of IPv4 table in h's namespace,
// keyed ipv4_addr . inet_proto . inet_service first, and returns the
// addresses of their elements on port 80.
func setVIPs(h lab.Host, table string, sets ...string) ([]string, error) {
	f, err := os.Open(lab.NSPath(h.NS))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := gnft.New(gnft.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	var out []string
	for _, name := range sets {
		set, err := c.GetSetByName(&gnft.Table{Name: table, Family: gnft.TableFamilyIPv4}, name)
		if err != nil {
			return nil, err
		}
		els, err := c.GetSetElements(set)
		if err != nil {
			return nil, err
		}
		for _, e := range els {
			// Each field in a 4-byte register: the port's two bytes at 8.
			if len(e.Key) >= 12 && e.Key[8] == 0 && e.Key[9] == 80 {
				out = append(out, netip.AddrFrom4([4]byte(e.Key[:4])).String())
			}
		}
	}
	return out, nil
}

// kubeServicesWithEndpoints parses iptables-save's nat table: the cluster
// IPs that KUBE-SERVICES sends to a KUBE-SVC chain on port 80.
func kubeServicesWithEndpoints(save []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != "-A" || f[1] != "KUBE-SERVICES" || f[2] != "-d" {
			continue
		}
		if i := slices.Index(f, "--dport"); i < 0 || i+1 >= len(f) || f[i+1] != "80" {
			continue
		}
		if i := slices.Index(f, "-j"); i < 0 || i+1 >= len(f) || !strings.HasPrefix(f[i+1], "KUBE-SVC-") {
			continue
		}
		out = append(out, strings.TrimSuffix(f[3], "/32"))
	}
	return out
}

func procPID(b *testing.B, h lab.Host, name string) int {
	p, err := h.Proc(name)
	if err != nil {
		b.Fatal(err)
	}
	return p.PID
}

// cpuSeconds sums the user and system time of pids (/proc/PID/stat).
func cpuSeconds(b *testing.B, pids []int) float64 {
	var sum float64
	for _, pid := range pids {
		f, err := lab.StatFields(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || len(f) < 13 {
			b.Fatalf("stat of %d: %v %v", pid, f, err)
		}
		// utime and stime are fields 14 and 15.
		for _, i := range []int{11, 12} {
			ticks, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += ticks / 100 // USER_HZ
		}
	}
	return sum
}

// kernelMemory moves pid into a memory cgroup (v1, whose kmem counter
// this host keeps) of its own and returns a reader of the kernel memory
// charged to it since: nftables and x_tables objects, like eBPF maps, are
// charged to the cgroup of the process whose request made them, and the
// children a proxy runs (iptables-restore, nft) start in its cgroup. A
// host-wide figure (slab in /proc/meminfo) would count whatever else the
// machine does meanwhile.
func kernelMemory(b *testing.B, name string, pid int) func() float64 {
	const root = "/sys/fs/cgroup/memory"
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatalf("memory cgroup for the node proxy: %v", err)
	}
	b.Cleanup(func() {
		// Back to the root first: a cgroup with tasks cannot be removed
		// (the charges are the parent's once it is). The proxy may have
		// started a child (nft, iptables-restore) in it just before.
		var err error
		for range 100 {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, p := range strings.Fields(string(procs)) {
				if err := os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(p), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
					b.Error(err)
				}
			}
			if err = os.Remove(dir); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.Error(err)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		b.Fatalf("moving %d into %s: %v", pid, dir, err)
	}
	return func() float64 {
		v, err := os.ReadFile(filepath.Join(dir, "memory.kmem.usage_in_bytes"))
		if err != nil {
			b.Fatal(err)
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
		if err != nil {
			b.Fatal(err)
		}
		return n / (1 << 20)
	}
}

// peakRSSMiB is pid's peak resident set size (VmHWM).
func peakRSSMiB(b *testing.B, pid int) float64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("no VmHWM for %d", pid)
	return 0
}

func envInts(name, def string) ([]int, error) {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func headCommit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func TestKubeServicesWithEndpoints(t *testing.T) {
	save := `*nat
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -d 198.19.64.10/32 -p tcp -m comment --comment "default/s00001:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ABC
-A KUBE-SERVICES -d 198.19.64.11/32 -p tcp -m comment --comment "default/s00002:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-DEF
-A KUBE-SERVICES -d 198.19.64.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX
-A KUBE-SERVICES -d 198.19.64.12/32 -p tcp -m comment --comment "default/none:http has no endpoints" -m tcp --dport 80 -j REJECT
-A KUBE-SVC-ABC -d 198.19.64.13/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-X
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
COMMIT
`
	got := kubeServicesWithEndpoints([]byte(save))
	if want := []string{"198.19.64.10", "198.19.64.11"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
