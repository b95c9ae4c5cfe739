package l7proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// TestProxyDrain: a proxy that drains refuses new connections at once,
// and answers the request it was serving, which its member answers
// after the drain began; the drain returns once it has.
func TestProxyDrain(t *testing.T) { forEngines(t, testProxyDrain) }

func testProxyDrain(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	arrived := make(chan struct{}, 1)
	m := startMember(t, "slow", func(http.ResponseWriter, *http.Request) {
		arrived <- struct{}{}
		<-release
	})
	// Cleanups run last first: the member's handler is freed before the
	// member's server waits for it, also when the test fails.
	t.Cleanup(free)
	p, lp := startProxy(t)
	if err := p.Set(map[uint16]Listener{20000: {VIP: vip, Config: flows.L7{DefaultPool: "web",
		Pools: []flows.L7Pool{{ID: "web", Algorithm: flows.RoundRobin, Backends: []flows.Backend{m.backend()}}}}}}); err != nil {
		t.Fatal(err)
	}
	at := lp.addr(20000)
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + at.String() + "/slow")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the member")
	}
	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drained <- p.Drain(ctx)
	}()
	// New connections are refused once the ports are closed.
	deadline := time.Now().Add(2 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", at.String(), 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the steering port still takes connections 2 s into the drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-drained:
		t.Fatalf("the drain ended (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	free()
	r := <-done
	if r.err != nil || r.status != 200 {
		t.Fatalf("the request in flight: %d %q, %v", r.status, r.body, r.err)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the drain did not end after the last request was answered")
	}
}
