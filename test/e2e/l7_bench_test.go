package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Environment of TestL7ProxyBench.
const (
	l7BenchEnv        = "FLOWLB_L7_BENCH"         // set: run it
	l7BenchRoundsEnv  = "FLOWLB_L7_BENCH_ROUNDS"  // rounds per mode (default 3)
	l7BenchSecondsEnv = "FLOWLB_L7_BENCH_SECONDS" // seconds per measurement (default 10)
	l7BenchConcEnv    = "FLOWLB_L7_BENCH_CLIENTS" // concurrent clients (default 16)
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// loadResult is what one measurement saw.
type loadResult struct {
	ok, failed int
	took       time.Duration
	latencies  []time.Duration
}

func (r loadResult) rps() float64 { return float64(r.ok) / r.took.Seconds() }

func (r loadResult) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// httpLoad sends GETs to url from clients goroutines, each with its own
// connection (kept alive, or a new one for every request), for d; an
// answer counts when it is a 200 read to its end.
func httpLoad(dial func(context.Context, string, string) (net.Conn, error), url string, clients int, keepAlive bool, d time.Duration) loadResult {
	return httpsLoad(dial, url, nil, clients, keepAlive, d)
}

// httpsLoad is httpLoad with the clients' TLS configuration for an
// https URL.
func httpsLoad(dial func(context.Context, string, string) (net.Conn, error), url string, tlsConf *tls.Config, clients int, keepAlive bool, d time.Duration) loadResult {
	var mu sync.Mutex
	out := loadResult{}
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			tr := &http.Transport{DialContext: dial, DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 1, TLSClientConfig: tlsConf}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			var lat []time.Duration
			ok, failed := 0, 0
			for time.Now().Before(deadline) {
				t0 := time.Now()
				resp, err := hc.Get(url)
				if err != nil {
					failed++
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					failed++
					continue
				}
				ok++
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			out.ok += ok
			out.failed += failed
			out.latencies = append(out.latencies, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	out.took = time.Since(start)
	return out
}

// haproxyConfig is the Amphora's way of one HTTP listener in front of
// members, as Octavia's templates write it: HTTP mode, round robin,
// X-Forwarded-For, keep-alive on both sides, its default timeouts. Its
// maxconn is the amphora's 50,000 cut to 4,000: HAProxy raises its file
// limit to about 2.5 times maxconn, and a process here may not pass the hard
// limit (20,000, no CAP_SYS_RESOURCE); the benchmark opens far fewer.
func haproxyConfig(bind string, members []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n    maxconn 4000\n\ndefaults\n    retries 3\n    option redispatch\n    option splice-request\n    option splice-response\n    option http-keep-alive\n\n")
	fmt.Fprintf(&b, "frontend listener\n    maxconn 4000\n    bind %s\n    mode http\n    default_backend pool\n    timeout client 50000\n\n", bind)
	fmt.Fprintf(&b, "backend pool\n    mode http\n    balance roundrobin\n    option forwardfor\n    timeout check 10s\n    timeout connect 5000\n    timeout server 50000\n    fullconn 4000\n")
	for i, m := range members {
		fmt.Fprintf(&b, "    server member%d %s weight 1\n", i+1, m)
	}
	return b.String()
}

// startHAProxy runs HAProxy with configuration conf in host's namespace
// (the lab stops it), and shows its log if the test fails.
func (c *cluster) startHAProxy(host lab.Host, conf string) {
	c.t.Helper()
	cfg := filepath.Join(c.t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		c.t.Fatal(err)
	}
	if _, err := host.Start("haproxy", []string{"/usr/sbin/haproxy", "-db", "-f", cfg}); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if c.t.Failed() {
			b, _ := os.ReadFile(c.lab.LogPath(host.Name, "haproxy"))
			c.t.Logf("HAProxy's log:\n%s", b)
		}
	})
}

// TestL7ProxyBench compares an HTTP listener served by the proxy on the
// client's node with the same members behind one HAProxy (Debian's, as
// the amphora runs it) in a namespace of its own one hop away: requests
// per second and latency with kept-alive and with new connections, 1 KiB
// answers, the contenders alternating in one run.
func TestL7ProxyBench(t *testing.T) {
	if os.Getenv(l7BenchEnv) == "" {
		t.Skip(l7BenchEnv + " not set")
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err != nil {
		t.Skip("no /usr/sbin/haproxy (hack/install-deps.sh --test)")
	}
	rounds, secs, clients := envInt(l7BenchRoundsEnv, 3), envInt(l7BenchSecondsEnv, 10), envInt(l7BenchConcEnv, 16)
	c := newL7Cluster(t)
	client, amphora := c.lab.Pod(1, 3), c.lab.Pod(1, 2)
	memberPods := []lab.Host{c.lab.Pod(2, 1), c.lab.Pod(2, 2)}
	var memberAddrs []string
	for _, p := range memberPods {
		memberAddrs = append(memberAddrs, net.JoinHostPort(p.Addr.String(), "80"))
	}
	_, _, vip := c.createHTTPLB(map[string]any{"insert_headers": map[string]any{"X-Forwarded-For": "true"}}, httpMembers(memberPods))
	flowlbURL := "http://" + vip + "/?pad=1024"

	haproxyAt := net.JoinHostPort(amphora.Addr.String(), "8000")
	c.startHAProxy(amphora, haproxyConfig(haproxyAt, memberAddrs))
	haproxyURL := "http://" + haproxyAt + "/?pad=1024"
	probe := &http.Client{Transport: &http.Transport{DialContext: client.Dial, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	for _, u := range []string{flowlbURL, haproxyURL} {
		testutil.Eventually(t, 20*time.Second, u+" answers", func() (bool, string) {
			resp, err := probe.Get(u)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status
		})
	}

	d := time.Duration(secs) * time.Second
	versusHAProxy(t, rounds, fmt.Sprintf("%d clients, 1 KiB answers, median of %d rounds of %d s", clients, rounds, secs), flowlbURL, haproxyURL,
		benchMode{"keep-alive", func(u string) loadResult { return httpLoad(client.Dial, u, clients, true, d) }},
		benchMode{"new connection per request", func(u string) loadResult { return httpLoad(client.Dial, u, clients, false, d) }})
}

// benchMode is one way of loading a listener: name, and what loading the
// URL measured.
type benchMode struct {
	name string
	load func(url string) loadResult
}

// versusHAProxy measures each mode against flowlb's listener and
// HAProxy's, alternating (the first of each round in turn), logs every
// measurement and the table of medians with flowlb's ratio to HAProxy,
// and returns how many requests failed in all.
func versusHAProxy(t *testing.T, rounds int, title, flowlbURL, haproxyURL string, modes ...benchMode) (failed int) {
	type row struct {
		mode, who string
		results   []loadResult
	}
	var rows []*row
	for _, m := range modes {
		fl, ha := &row{mode: m.name, who: "flowlb proxy on the client's node"}, &row{mode: m.name, who: "HAProxy one hop away"}
		rows = append(rows, fl, ha)
		for r := range rounds {
			order := []*row{fl, ha}
			if r%2 == 1 {
				order = []*row{ha, fl}
			}
			for _, x := range order {
				u := flowlbURL
				if x == ha {
					u = haproxyURL
				}
				t.Logf("%s, round %d, %s: measuring", m.name, r+1, x.who)
				res := m.load(u)
				x.results = append(x.results, res)
				t.Logf("%s, round %d, %s: %.0f requests/s, p50 %v, p99 %v, %d failed", m.name, r+1, x.who, res.rps(), res.percentile(0.5), res.percentile(0.99), res.failed)
			}
		}
	}
	median := func(rs []loadResult, f func(loadResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| %s | requests/s | p50 | p99 | failed |\n|---|---|---|---|---|\n", title)
	for _, r := range rows {
		f := 0
		for _, x := range r.results {
			f += x.failed
		}
		failed += f
		fmt.Fprintf(&sb, "| %s: %s | %.0f | %.2f ms | %.2f ms | %d |\n", r.mode, r.who,
			median(r.results, loadResult.rps),
			median(r.results, func(x loadResult) float64 { return float64(x.percentile(0.5).Microseconds()) / 1000 }),
			median(r.results, func(x loadResult) float64 { return float64(x.percentile(0.99).Microseconds()) / 1000 }), f)
	}
	for i := 0; i+1 < len(rows); i += 2 {
		fmt.Fprintf(&sb, "\n%s: flowlb ÷ HAProxy = %.2f (target ≥ 0.8)", rows[i].mode, median(rows[i].results, loadResult.rps)/median(rows[i+1].results, loadResult.rps))
	}
	t.Log(sb.String())
	return failed
}
