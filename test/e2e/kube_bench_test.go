package e2e

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// BenchmarkServiceToForwarding measures, on the lab with the real
// Kubernetes control plane, the time from creating each of 100 Services
// until every node's kernel forwards its cluster IP to the pods, and from
// an endpoint change (scaling 3 → 4) until every node forwards every
// Service to the new pod. Anchors: kube-proxy nftables network programming
// latency p50 1.5 s / p99 6.8 s (100-node test); Octavia Amphora minutes
// per Service.
//
//	go test -run '^$' -bench ServiceToForwarding -benchtime 1x ./test/e2e/
func BenchmarkServiceToForwarding(b *testing.B) {
	const services = 100
	for range b.N {
		e := newKubeEnv(b, 1)
		e.deploy("web", 3)
		testutil.Eventually(b, 30*time.Second, "3 ready pods", func() (bool, string) {
			ready := e.readyPods("web")
			return len(ready) == 3, fmt.Sprint(ready)
		})
		w := newWatcher(b, e.lab)
		defer w.stop()

		created := map[string]time.Time{}
		for i := range services {
			name := fmt.Sprintf("s%03d", i)
			t0 := time.Now()
			s := e.service(name, nil)
			created[s.Spec.ClusterIP] = t0
		}
		lat := w.waitAll(b, created, 3, 2*time.Minute)
		report(b, "Service created → every node forwards", lat)

		scaled := time.Now()
		if _, err := e.k.AppsV1().Deployments("default").UpdateScale(e.ctx, "web", &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: 4}}, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		// When each Service's EndpointSlice first lists the new pod as
		// ready: the change flowlb reacts to.
		ready := e.sliceReadyTimes(b, created, 4, scaled, 2*time.Minute)
		lat = w.waitAll(b, ready, 4, 2*time.Minute)
		report(b, "EndpointSlice gains a ready pod → every node forwards to it, per Service", lat)
		e.apiTimes(len(created))
	}
}

// apiTimes prints where the server spent its time, by route, with each
// route's calls per Service (services, the Services the run made): every
// route, as a route that costs little time may still be called often.
func (e *kubeEnv) apiTimes(services int) {
	resp, err := e.http.Get(e.api + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sums, counts := map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		for suffix, m := range map[string]map[string]float64{"_sum{": sums, "_count{": counts} {
			if rest, ok := strings.CutPrefix(line, "flowlb_api_request_duration_seconds"+suffix); ok {
				labels, val, _ := strings.Cut(rest, "} ")
				v, _ := strconv.ParseFloat(val, 64)
				m[labels] += v
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(sums), func(a, b string) int { return cmp.Compare(sums[b], sums[a]) })
	var rows []string
	total := 0.0
	for _, k := range keys {
		total += counts[k]
		rows = append(rows, fmt.Sprintf("%8.2f s %6.0f calls %6.2f/Service %7.2f ms/call  %s", sums[k], counts[k], counts[k]/float64(services), 1000*sums[k]/max(counts[k], 1), k))
	}
	fmt.Printf("API time by route (total, calls, calls per Service, mean; %.2f calls per Service in all):\n  %s\n", total/float64(services), strings.Join(rows, "\n  "))
}

func report(b *testing.B, what string, lat []time.Duration) {
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	fmt.Printf("%s: p50 %s, p99 %s, max %s over %d Services (anchor: kube-proxy nftables p50 1.5 s, p99 6.8 s)\n",
		what, p50.Round(time.Millisecond), p99.Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat))
}

// watcher polls every node's flowlb table and remembers when each VIP
// (port 80) first had n backends on that node.
type watcher struct {
	mu    sync.Mutex
	nodes []lab.Host
	seen  []map[string]map[int]time.Time // per node: VIP → backends → first seen
	done  chan struct{}
	wg    sync.WaitGroup
}

func newWatcher(b *testing.B, l *lab.Lab) *watcher {
	w := &watcher{nodes: l.Nodes(), done: make(chan struct{})}
	for i, n := range w.nodes {
		w.seen = append(w.seen, map[string]map[int]time.Time{})
		f, err := os.Open(lab.NSPath(n.NS))
		if err != nil {
			b.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer f.Close()
			for {
				select {
				case <-w.done:
					return
				case <-time.After(5 * time.Millisecond):
				}
				dp, err := nftables.Open(int(f.Fd()))
				if err != nil {
					continue // no table yet
				}
				now := time.Now()
				dump := dp.Dump()
				_ = dp.Close()
				w.mu.Lock()
				for _, s := range dump {
					if s.Key.Port != 80 {
						continue
					}
					vip := s.Key.VIP.String()
					if w.seen[i][vip] == nil {
						w.seen[i][vip] = map[int]time.Time{}
					}
					if _, ok := w.seen[i][vip][len(s.Slots)]; !ok {
						w.seen[i][vip][len(s.Slots)] = now
					}
				}
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *watcher) stop() { close(w.done); w.wg.Wait() }

// waitAll waits until every VIP of since has n backends on every node and
// returns, per VIP, the time from since to the last node. A VIP that every
// node forwarded to n backends before its since (the test sees an
// EndpointSlice change through the API later than the controller may)
// counts as 0, and how many did is printed.
func (w *watcher) waitAll(b *testing.B, since map[string]time.Time, n int, limit time.Duration) []time.Duration {
	var out []time.Duration
	early := 0
	testutil.Eventually(b, limit, fmt.Sprintf("every Service forwarded to %d backends on every node", n), func() (bool, string) {
		out, early = w.lastNodeTimes(since, n)
		return len(out) == len(since), fmt.Sprintf("%d of %d Services", len(out), len(since))
	})
	if early > 0 {
		fmt.Printf("%d of %d Services forwarded to %d backends on every node before the test saw the change (counted as 0)\n", early, len(out), n)
	}
	return out
}

// lastNodeTimes returns, for each VIP of since that every node forwards
// to n backends, the time from since to the last node doing so (0 if
// before), and how many VIPs were that early.
func (w *watcher) lastNodeTimes(since map[string]time.Time, n int) (out []time.Duration, early int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for vip, t0 := range since {
		last := time.Time{}
		for i := range w.nodes {
			at, ok := w.seen[i][vip][n]
			if !ok {
				last = time.Time{}
				break
			}
			if at.After(last) {
				last = at
			}
		}
		if !last.IsZero() {
			if last.Before(t0) {
				early++
			}
			out = append(out, max(last.Sub(t0), 0))
		}
	}
	return out, early
}

// sliceReadyTimes watches the EndpointSlices until every Service (by
// cluster IP) lists n ready endpoints, and returns when each first did, as
// the watch event arrived.
func (e *kubeEnv) sliceReadyTimes(b *testing.B, services map[string]time.Time, n int, after time.Time, limit time.Duration) map[string]time.Time {
	byName := map[string]string{}
	svcs, err := e.k.CoreV1().Services("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range svcs.Items {
		if _, ok := services[s.Spec.ClusterIP]; ok {
			byName[s.Name] = s.Spec.ClusterIP
		}
	}
	out := map[string]time.Time{}
	see := func(s *discoveryv1.EndpointSlice, now time.Time) {
		vip, ok := byName[s.Labels[discoveryv1.LabelServiceName]]
		if _, done := out[vip]; !ok || done {
			return
		}
		ready := 0
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ready++
			}
		}
		if ready == n && now.After(after) {
			out[vip] = now
		}
	}
	sl, err := e.k.DiscoveryV1().EndpointSlices("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i := range sl.Items {
		see(&sl.Items[i], now)
	}
	w, err := e.k.DiscoveryV1().EndpointSlices("default").Watch(e.ctx, metav1.ListOptions{ResourceVersion: sl.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(limit)
	for len(out) < len(services) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("EndpointSlice watch closed")
			}
			if s, ok := ev.Object.(*discoveryv1.EndpointSlice); ok {
				see(s, time.Now())
			}
		case <-timeout:
			b.Fatalf("%d of %d EndpointSlices reached %d ready endpoints", len(out), len(services), n)
		}
	}
	return out
}
