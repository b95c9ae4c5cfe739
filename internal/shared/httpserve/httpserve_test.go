package httpserve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// blocked counts the requests waiting in the handler on /block.
var blocked atomic.Int32

// start serves a handler that reads the body and answers its length, or
// waits on block when the path is /block.
func start(t *testing.T, l Limits, block chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			blocked.Add(1)
			defer blocked.Add(-1)
			<-block
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprint(w, n)
	})}
	go func() { _ = srv.Serve(Serve(srv, ln, l, nil)) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes conn within d (reading
// and discarding whatever it sends).
func closedWithin(conn net.Conn, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

func TestSlowAndIdleClientsCutOff(t *testing.T) {
	l := Limits{ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond, Idle: 300 * time.Millisecond, MaxConns: 100}
	addr := start(t, l, nil)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("slow header", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n") // never ends
		if !closedWithin(c, 2*time.Second) {
			t.Fatal("a client that never finishes its headers is kept")
		}
	})
	t.Run("slow body", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // a byte every 100 ms: 10 s for the body
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		closed := closedWithin(c, 3*time.Second)
		close(stop)
		wg.Wait()
		if !closed {
			t.Fatal("a client sending its body a byte at a time is kept past the read timeout")
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request: %v %v", resp, err)
		}
		resp.Body.Close()
		if !closedWithin(c, 2*time.Second) {
			t.Fatal("an idle keep-alive connection is kept past the idle timeout")
		}
	})
	t.Run("others served meanwhile", func(t *testing.T) {
		resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "5" {
			t.Fatalf("answer %q", b)
		}
	})
}

// At the cap, a flood of connections that send nothing does not keep a
// real client out: the newcomer takes the place of one of them.
func TestCapEvictsIdleConnections(t *testing.T) {
	addr := start(t, Limits{ReadHeader: time.Minute, Idle: time.Minute, MaxConns: 20}, nil)
	var flood []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	testutil.Eventually(t, 5*time.Second, "a real client served under the flood", func() (bool, string) {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
}

// When every connection is busy, a newcomer is closed at once rather than
// left waiting.
func TestCapRefusesWhenAllBusy(t *testing.T) {
	block := make(chan struct{})
	addr := start(t, Limits{MaxConns: 3}, block)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + "/block")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	defer func() { close(block); wg.Wait() }()
	testutil.Eventually(t, 5*time.Second, "three requests in their handlers", func() (bool, string) {
		n := blocked.Load()
		return n == 3, fmt.Sprint(n)
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedWithin(c, 2*time.Second) {
		t.Fatal("a connection past the cap with every one busy was kept waiting")
	}
}

func TestConnsForDescriptors(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		want  int
	}{{256, 64}, {1024, 768}, {65536, 65280}} {
		if got := connsForDescriptors(tc.limit); got != tc.want {
			t.Errorf("%d descriptors: %d connections, want %d", tc.limit, got, tc.want)
		}
	}
}
