package load

import (
	"context"
	"errors"
	"net"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab/echo"
)

func startEcho(t *testing.T) *echo.Server { return startEchoOn(t, "127.0.0.1") }

func startEchoOn(t *testing.T, bind string) *echo.Server {
	t.Helper()
	s, err := echo.Listen(echo.Config{Name: "e1", Bind: bind, TCP: []int{0}, UDP: []int{0}, HTTP: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// TestRunProtocols: every protocol against IPv4 and IPv6 targets.
func TestRunProtocols(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "::1"} {
		t.Run(addr, func(t *testing.T) { testRunProtocols(t, addr) })
	}
}

// testRunProtocols loads an echo server bound to addr, which also sees
// the client at addr.
func testRunProtocols(t *testing.T, addr string) {
	s := startEchoOn(t, addr)
	cases := []struct {
		proto, target string
	}{
		{"tcp", s.TCPAddrs()[0]},
		{"udp", s.UDPAddrs()[0]},
		{"http", s.HTTPAddrs()[0]},
	}
	for _, c := range cases {
		t.Run(c.proto, func(t *testing.T) {
			r, err := Run(context.Background(), Config{Proto: c.proto, Target: c.target, Requests: 50, Concurrency: 4, Duration: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if r.Count != 50 || r.Errors != 0 || r.Attempts != 50 {
				t.Fatalf("count %d errors %d attempts %d (%v), want 50/0/50", r.Count, r.Errors, r.Attempts, r.ErrorSample)
			}
			if r.ByPod["e1"] != 50 || r.Peers[addr] != 50 {
				t.Errorf("by pod %v peers %v", r.ByPod, r.Peers)
			}
			if r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
				t.Errorf("latency not ordered: %+v", r.Latency)
			}
		})
	}
}

// TestRunRate checks that the rate bounds the work: 100/s for 300 ms is
// about 30 operations, far below what loopback allows.
func TestRunRate(t *testing.T) {
	s := startEcho(t)
	r, err := Run(context.Background(), Config{Target: s.TCPAddrs()[0], Rate: 100, Concurrency: 4, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count < 15 || r.Count > 32 {
		t.Errorf("%d operations at 100/s in 300ms, want about 30", r.Count)
	}
}

// TestRunEndsCleanly: a time-bounded run at full speed must not count the
// operations cut off by its own end as errors.
func TestRunEndsCleanly(t *testing.T) {
	s := startEcho(t)
	for i := 0; i < 3; i++ {
		r, err := Run(context.Background(), Config{Target: s.TCPAddrs()[0], Concurrency: 4, Duration: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.Count == 0 || r.Errors != 0 {
			t.Fatalf("run %d: %d ok, %d errors %v", i, r.Count, r.Errors, r.ErrorSample)
		}
	}
}

func TestRunErrors(t *testing.T) {
	// A port nobody listens on: bind one, note it, close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r, err := Run(context.Background(), Config{Target: addr, Requests: 5, Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != 0 || r.Errors != 5 || r.ByError["refused"] != 5 {
		t.Errorf("count %d errors %v, want 5 refused", r.Count, r.ByError)
	}
	if _, err := Run(context.Background(), Config{Proto: "sctp", Target: addr}); err == nil {
		t.Error("unknown protocol accepted")
	}
}

func TestEnterIsUsed(t *testing.T) {
	s := startEcho(t)
	var entered, left int
	ch := make(chan int, 8)
	r, err := Run(context.Background(), Config{Target: s.TCPAddrs()[0], Requests: 4, Concurrency: 2, Duration: 5 * time.Second,
		Enter: func() (func() bool, error) { ch <- 1; return func() bool { ch <- -1; return true }, nil }})
	if err != nil {
		t.Fatal(err)
	}
	close(ch)
	for v := range ch {
		if v > 0 {
			entered++
		} else {
			left++
		}
	}
	if entered != 2 || left != 2 || r.Count != 4 {
		t.Errorf("entered %d left %d count %d, want 2 2 4", entered, left, r.Count)
	}
	_, err = Run(context.Background(), Config{Target: s.TCPAddrs()[0], Enter: func() (func() bool, error) { return nil, errors.New("no") }})
	if err == nil {
		t.Error("Enter failure not reported")
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{HTTPStatusError{500}, "http 500"},
		{context.DeadlineExceeded, "timeout"},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "refused"},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, "reset"},
		{&net.OpError{Op: "dial", Err: syscall.ENETUNREACH}, "unreachable"},
		{errors.New(`not an echo reply: "x"`), "bad reply"},
		{errors.New("strange"), "other"},
	}
	for _, c := range cases {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(lat)
	want := Latency{P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond}
	if got != want {
		t.Errorf("percentiles = %+v, want %+v", got, want)
	}
	if (percentiles(nil) != Latency{}) {
		t.Error("empty input should give zero latency")
	}
}

func TestFillDefaults(t *testing.T) {
	tests := []struct {
		name    string
		in      Config
		want    Config
		wantErr bool
	}{
		{"zero gets every default", Config{Target: "198.18.0.1:80"},
			Config{Proto: "tcp", Target: "198.18.0.1:80", Concurrency: 1, Duration: time.Second, Timeout: time.Second, Path: "/"}, false},
		{"set values stay", Config{Proto: "http", Target: "198.18.0.1:80", Concurrency: 3, Duration: 2 * time.Second, Timeout: 3 * time.Second, Path: "/x"},
			Config{Proto: "http", Target: "198.18.0.1:80", Concurrency: 3, Duration: 2 * time.Second, Timeout: 3 * time.Second, Path: "/x"}, false},
		{"unknown protocol", Config{Proto: "sctp", Target: "198.18.0.1:80"}, Config{}, true},
		{"target without port", Config{Target: "198.18.0.1"}, Config{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.in
			err := c.fillDefaults()
			if (err != nil) != tc.wantErr {
				t.Fatalf("fillDefaults() = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(c, tc.want) {
				t.Errorf("fillDefaults() gave %+v, want %+v", c, tc.want)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	workers := []worker{
		{lat: []time.Duration{1 * time.Millisecond, 3 * time.Millisecond}, errs: 1,
			byPod: map[string]int{"a": 2}, byErr: map[string]int{"timeout": 1}, sample: map[string]string{"timeout": "i/o timeout"}, peers: map[string]int{"198.18.17.2": 2}},
		{lat: []time.Duration{2 * time.Millisecond}, errs: 0,
			byPod: map[string]int{"a": 1}, byErr: map[string]int{}, sample: map[string]string{}, peers: map[string]int{"198.18.17.2": 1}},
	}
	r := merge(&Config{Proto: "tcp", Target: "198.19.0.1:80"}, workers, 2*time.Second)
	if r.Count != 3 || r.Errors != 1 || r.Attempts != 4 {
		t.Errorf("count %d errors %d attempts %d, want 3/1/4", r.Count, r.Errors, r.Attempts)
	}
	if r.ByPod["a"] != 3 || r.Peers["198.18.17.2"] != 3 || r.ByError["timeout"] != 1 || r.ErrorSample["timeout"] != "i/o timeout" {
		t.Errorf("merged maps: by pod %v peers %v by error %v samples %v", r.ByPod, r.Peers, r.ByError, r.ErrorSample)
	}
	if r.Rate != 1.5 {
		t.Errorf("rate %v, want 1.5 (3 successes in 2s)", r.Rate)
	}
	if r.Latency.P50 != 2*time.Millisecond || r.Latency.Max != 3*time.Millisecond || r.Latency.Mean != 2*time.Millisecond {
		t.Errorf("latency %+v, want p50 2ms, max 3ms, mean 2ms", r.Latency)
	}
	if r.Proto != "tcp" || r.Target != "198.19.0.1:80" || r.Elapsed != 2*time.Second {
		t.Errorf("header %s %s %s", r.Proto, r.Target, r.Elapsed)
	}
}
