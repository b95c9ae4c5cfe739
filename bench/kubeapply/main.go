// Command kubeapply measures what one kube-controller reconciliation costs
// the LBaaS API: with N load balancers in an in-process flowlb server
// (SQLite, changes completing at once), it applies R endpoint changes (a
// member more or fewer, round the load balancers) through kubelb.Octavia,
// as the controller does, and reports the time per Apply and per API route.
//
//	go run ./bench/kubeapply -n 100 -r 100
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/octavia"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
)

// timing records each request's duration, to its response headers, by
// method and route.
type timing struct {
	mu  sync.Mutex
	by  map[string][]time.Duration
	rt  http.RoundTripper
	ids *regexp.Regexp
}

func (t *timing) RoundTrip(r *http.Request) (*http.Response, error) {
	t0 := time.Now()
	resp, err := t.rt.RoundTrip(r) // timed to the response headers
	route := r.Method + " " + t.ids.ReplaceAllString(r.URL.Path, "{id}")
	if q := r.URL.Query(); len(q) > 0 {
		keys := []string{}
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		route += fmt.Sprintf("?%v", keys)
	}
	t.mu.Lock()
	t.by[route] = append(t.by[route], time.Since(t0))
	t.mu.Unlock()
	return resp, err
}

func member(i, j int) kubelb.Member {
	a := fmt.Sprintf("198.18.%d.%d", 16+j, 2+i%250)
	return kubelb.Member{Name: a, Address: a, Port: 8080, Tags: []string{"flowlb:node=n1"}}
}

func desired(i, members int, subnet string) *kubelb.LB {
	ms := []kubelb.Member{}
	for j := range members {
		ms = append(ms, member(i, j))
	}
	return &kubelb.LB{Name: fmt.Sprintf("kube_service_bench_default_s%04d", i), Tags: []string{"flowlb:kube-cluster=bench"},
		VIP: kubelb.VIP{SubnetID: subnet, Address: fmt.Sprintf("198.19.%d.%d", 64+i/250, 2+i%250)},
		Listeners: []kubelb.Listener{{Name: "http", Protocol: "TCP", Port: 80, Timeouts: kubelb.DefaultTimeouts,
			Pool: kubelb.Pool{Name: "http", Protocol: "TCP", Algorithm: "ROUND_ROBIN", Members: ms}}}}
}

func main() {
	n := flag.Int("n", 100, "load balancers in the server")
	r := flag.Int("r", 100, "endpoint changes applied, one after the other")
	flag.Parse()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, err := os.MkdirTemp("", "kubeapply-")
	check(err)
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "flowlb.db"), log)
	check(err)
	defer st.Close()
	_, sub, err := neutron.EnsureDefault(ctx, st, "bench-vip", "198.19.64.0/18")
	check(err)
	svc, err := lbaas.New(st, neutron.Allocator{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	check(err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	srv := &http.Server{Handler: identity.NoAuth("bench", octavia.New(svc, nil, log, octavia.Config{}))}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	endpoint := "http://" + ln.Addr().String()
	tm := &timing{by: map[string][]time.Duration{}, rt: http.DefaultTransport,
		ids: regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)}
	client := &gophercloud.ServiceClient{ProviderClient: &gophercloud.ProviderClient{HTTPClient: http.Client{Transport: tm}},
		Endpoint: endpoint + "/", ResourceBase: endpoint + "/v2.0/"}
	o := &kubelb.Octavia{Client: client}

	t0 := time.Now()
	for i := range *n {
		_, _, err := o.Apply(ctx, desired(i, 3, sub.ID))
		check(err)
	}
	fmt.Printf("%d load balancers created in %s\n", *n, time.Since(t0).Round(time.Millisecond))
	tm.by = map[string][]time.Duration{}
	var per []time.Duration
	for k := range *r {
		// One member more, then (on a second pass over the same load
		// balancers) one fewer again.
		i := k % *n
		want := desired(i, 4-(k / *n)%2, sub.ID)
		t := time.Now()
		_, calls, err := o.Apply(ctx, want)
		check(err)
		per = append(per, time.Since(t))
		if calls != 1 {
			check(fmt.Errorf("endpoint change took %d changing calls, want 1", calls))
		}
	}
	slices.Sort(per)
	fmt.Printf("endpoint change, Apply until ACTIVE: p50 %s p99 %s over %d\n", per[len(per)/2].Round(10*time.Microsecond), per[len(per)*99/100].Round(10*time.Microsecond), len(per))
	var routes []string
	for k := range tm.by {
		routes = append(routes, k)
	}
	slices.Sort(routes)
	for _, k := range routes {
		d := tm.by[k]
		slices.Sort(d)
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		fmt.Printf("  %-70s %5d calls  %5.2f per Apply  p50 %7.2f ms  mean %7.2f ms\n", k, len(d), float64(len(d))/float64(len(per)),
			float64(d[len(d)/2].Microseconds())/1000, float64(sum.Microseconds())/1000/float64(len(d)))
	}
	resync(ctx, o, *n, sub.ID)
}

// resync compares, alternately, what the kube-controller's resync of N
// unchanged Services costs the API: the list of the cluster's load
// balancers that finds drift now (every page), against the full read of
// each load balancer (kubelb.Octavia.Load) that it made before.
func resync(ctx context.Context, o *kubelb.Octavia, n int, subnet string) {
	var list, reads []time.Duration
	for range 3 {
		t := time.Now()
		lbs, err := o.Owned(ctx, "flowlb:kube-cluster=bench")
		check(err)
		list = append(list, time.Since(t))
		if len(lbs) != n {
			check(fmt.Errorf("listed %d load balancers, want %d", len(lbs), n))
		}
		t = time.Now()
		for i := range n {
			_, err := o.Load(ctx, desired(i, 3, subnet))
			check(err)
		}
		reads = append(reads, time.Since(t))
	}
	fmt.Printf("resync of %d unchanged Services: the list %v, each read in full %v (3 rounds, alternately)\n", n, round(list), round(reads))
}

func round(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
