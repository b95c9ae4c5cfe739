// Package load generates traffic against an address at a bounded rate or
// concurrency for a bounded time and reports count, errors, latency
// percentiles and which echo server (pod) answered.
//
// Each operation opens a fresh connection (TCP, HTTP) or socket (UDP), so
// a load balancer sees one new flow per operation. Workers can run inside
// a network namespace: Config.Enter is called on each worker's own OS
// thread before it dials.
package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flowlb/flowlb/internal/lab/echo"
)

// Config of a load run. Zero values get the defaults in the field comments.
type Config struct {
	Proto       string        // "tcp" (default), "udp" or "http"
	Target      string        // host:port; an IPv6 address in brackets, [2001:2:0:4002::2]:8080
	Concurrency int           // parallel workers, default 1
	Rate        float64       // operations per second over all workers; 0 = as fast as the workers go
	Duration    time.Duration // default 1s; the run also stops after Requests operations if set
	Requests    int           // 0 = no limit
	Timeout     time.Duration // per operation, default 1s
	Path        string        // HTTP path, default "/"
	// Enter, if set, runs on each worker's locked OS thread before the
	// worker dials, typically to enter a network namespace. back, called
	// when the worker ends, undoes that and reports success; on failure
	// the thread stays locked and the runtime discards it.
	Enter func() (back func() bool, err error)
	// Control, if set, is every dial's net.Dialer Control (the lab's
	// sockets made in a node's cgroup).
	Control func(network, address string, c syscall.RawConn) error
}

// Latency percentiles of successful operations.
type Latency struct {
	P50  time.Duration `json:"p50"`
	P90  time.Duration `json:"p90"`
	P99  time.Duration `json:"p99"`
	Max  time.Duration `json:"max"`
	Mean time.Duration `json:"mean"`
}

// Result of a run.
type Result struct {
	Proto   string         `json:"proto"`
	Target  string         `json:"target"`
	Count   int            `json:"count"`  // successful operations
	Errors  int            `json:"errors"` // failed operations
	ByError map[string]int `json:"by_error,omitempty"`
	// ErrorSample holds one error message per ByError bucket.
	ErrorSample map[string]string `json:"error_sample,omitempty"`
	ByPod       map[string]int    `json:"by_pod"` // successful answers per echo server
	Peers       map[string]int    `json:"peers,omitempty"`
	Elapsed     time.Duration     `json:"elapsed"`
	Rate        float64           `json:"rate"` // successes per second
	Latency     Latency           `json:"latency"`
	Attempts    int               `json:"attempts"`
}

// Run generates the load and blocks until the run ends or ctx is done.
func Run(ctx context.Context, c Config) (Result, error) {
	if err := c.fillDefaults(); err != nil {
		return Result{}, err
	}
	// One clock for the whole run: the context's deadline and the
	// workers' end check must agree, or operations started in between
	// fail at once with "i/o timeout" and count as errors.
	start := time.Now()
	end := start.Add(c.Duration)
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	workers, err := runWorkers(ctx, &c, start, end)
	elapsed := time.Since(start)
	if err != nil {
		return Result{}, err
	}
	return merge(&c, workers, elapsed), nil
}

// fillDefaults checks the protocol and target and sets the defaults the
// field comments of Config name.
func (c *Config) fillDefaults() error {
	if c.Proto == "" {
		c.Proto = "tcp"
	}
	switch c.Proto {
	case "tcp", "udp", "http":
	default:
		return fmt.Errorf("proto %q: want tcp, udp or http", c.Proto)
	}
	if _, _, err := net.SplitHostPort(c.Target); err != nil {
		return fmt.Errorf("target %q: %w", c.Target, err)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.Duration <= 0 {
		c.Duration = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.Path == "" {
		c.Path = "/"
	}
	return nil
}

// runWorkers runs c.Concurrency workers, each on its own OS thread inside
// whatever c.Enter enters, until the run ends; the error is one of
// c.Enter's.
func runWorkers(ctx context.Context, c *Config, start, end time.Time) ([]worker, error) {
	var (
		seq     atomic.Int64 // operations handed out
		workers = make([]worker, c.Concurrency)
		wg      sync.WaitGroup
		enterMu sync.Mutex
		enterE  error
	)
	for w := range workers {
		wg.Go(func() {
			if c.Enter != nil {
				runtime.LockOSThread()
				back, err := c.Enter()
				if err != nil {
					enterMu.Lock()
					enterE = err
					enterMu.Unlock()
					return
				}
				defer func() {
					if back() {
						runtime.UnlockOSThread()
					}
				}()
			}
			workers[w].run(ctx, c, &seq, start, end)
		})
	}
	wg.Wait()
	return workers, enterE
}

// merge adds the workers' counts up into the run's result.
func merge(c *Config, workers []worker, elapsed time.Duration) Result {
	r := Result{Proto: c.Proto, Target: c.Target, ByPod: map[string]int{}, ByError: map[string]int{},
		ErrorSample: map[string]string{}, Peers: map[string]int{}, Elapsed: elapsed}
	var lat []time.Duration
	for _, w := range workers {
		r.Count += len(w.lat)
		r.Errors += w.errs
		lat = append(lat, w.lat...)
		for k, v := range w.byPod {
			r.ByPod[k] += v
		}
		for k, v := range w.byErr {
			r.ByError[k] += v
		}
		for k, v := range w.sample {
			r.ErrorSample[k] = v
		}
		for k, v := range w.peers {
			r.Peers[k] += v
		}
	}
	r.Attempts = r.Count + r.Errors
	if elapsed > 0 {
		r.Rate = float64(r.Count) / elapsed.Seconds()
	}
	r.Latency = percentiles(lat)
	return r
}

func percentiles(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(lat))+0.5) - 1
		return lat[max(0, min(i, len(lat)-1))]
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return Latency{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: lat[len(lat)-1], Mean: sum / time.Duration(len(lat))}
}

type worker struct {
	lat    []time.Duration
	errs   int
	byPod  map[string]int
	byErr  map[string]int
	sample map[string]string
	peers  map[string]int // peer host (client address) seen by the server
}

func (w *worker) run(ctx context.Context, c *Config, seq *atomic.Int64, start, end time.Time) {
	w.byPod, w.byErr, w.peers, w.sample = map[string]int{}, map[string]int{}, map[string]int{}, map[string]string{}
	for {
		n := seq.Add(1) - 1
		if c.Requests > 0 && n >= int64(c.Requests) {
			return
		}
		if c.Rate > 0 {
			// Operation n is due at start + n/rate: a fixed schedule, so a
			// slow answer does not lower the offered rate.
			due := start.Add(time.Duration(float64(n) / c.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		// The clock, not only ctx.Err: the context's timer may fire late,
		// and until then every dial fails at once with "i/o timeout".
		if ctx.Err() != nil || !time.Now().Before(end) {
			return
		}
		t0 := time.Now()
		rep, err := once(ctx, c)
		if err != nil {
			if ctx.Err() != nil || !time.Now().Before(end) {
				return // the run ended mid-operation; not the target's fault
			}
			w.errs++
			k := classify(err)
			w.byErr[k]++
			w.sample[k] = err.Error()
			continue
		}
		w.lat = append(w.lat, time.Since(t0))
		w.byPod[rep.Pod]++
		if h, _, err := net.SplitHostPort(rep.Peer); err == nil {
			w.peers[h]++
		}
	}
}

// HTTPStatusError is an answer with a status other than 200.
type HTTPStatusError struct{ Code int }

func (e HTTPStatusError) Error() string { return fmt.Sprintf("http %d", e.Code) }

// once performs one operation on a fresh socket.
func once(ctx context.Context, c *Config) (echo.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	network := "tcp"
	if c.Proto == "udp" {
		network = "udp"
	}
	conn, err := (&net.Dialer{Control: c.Control}).DialContext(ctx, network, c.Target)
	if err != nil {
		return echo.Reply{}, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	switch c.Proto {
	case "tcp", "udp":
		if _, err := conn.Write([]byte("hello\n")); err != nil {
			return echo.Reply{}, err
		}
		var line string
		if c.Proto == "udp" {
			buf := make([]byte, 512)
			n, err := conn.Read(buf)
			if err != nil {
				return echo.Reply{}, err
			}
			line = string(buf[:n])
		} else {
			line, err = bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				return echo.Reply{}, err
			}
		}
		return echo.Parse(line)
	default: // http, by hand: http.Transport dials on other goroutines,
		// which would leave the worker's network namespace.
		host, _, _ := net.SplitHostPort(c.Target)
		if strings.Contains(host, ":") {
			host = "[" + host + "]" // an IPv6 literal
		}
		req := "GET " + c.Path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: flowlb-load\r\nConnection: close\r\n\r\n"
		if _, err := io.WriteString(conn, req); err != nil {
			return echo.Reply{}, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return echo.Reply{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil {
			return echo.Reply{}, err
		}
		if resp.StatusCode != http.StatusOK {
			return echo.Reply{}, HTTPStatusError{resp.StatusCode}
		}
		return echo.Parse(string(body))
	}
}

// classify turns an error into a short, stable bucket name for reports.
func classify(err error) string {
	var hs HTTPStatusError
	switch {
	case errors.As(err, &hs):
		return hs.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "unreachable"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no local port"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	s := err.Error()
	if strings.Contains(s, "not an echo reply") {
		return "bad reply"
	}
	return "other"
}

// Format writes a human-readable report.
func (r Result) Format(w io.Writer) {
	fmt.Fprintf(w, "%s %s: %d ok, %d errors in %s (%.0f/s)\n", r.Proto, r.Target, r.Count, r.Errors, r.Elapsed.Round(time.Millisecond), r.Rate)
	fmt.Fprintf(w, "latency p50 %s  p90 %s  p99 %s  max %s  mean %s\n",
		r.Latency.P50.Round(time.Microsecond), r.Latency.P90.Round(time.Microsecond), r.Latency.P99.Round(time.Microsecond),
		r.Latency.Max.Round(time.Microsecond), r.Latency.Mean.Round(time.Microsecond))
	if len(r.ByError) > 0 {
		fmt.Fprintf(w, "errors:")
		for _, k := range sortedKeys(r.ByError) {
			fmt.Fprintf(w, " %s=%d", k, r.ByError[k])
		}
		fmt.Fprintln(w)
		for _, k := range sortedKeys(r.ByError) {
			fmt.Fprintf(w, "  e.g. %s\n", r.ErrorSample[k])
		}
	}
	if len(r.ByPod) > 0 {
		fmt.Fprintln(w, "answered by:")
		for _, k := range sortedKeys(r.ByPod) {
			fmt.Fprintf(w, "  %-10s %6d  %5.1f%%\n", k, r.ByPod[k], 100*float64(r.ByPod[k])/float64(max(r.Count, 1)))
		}
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
