package failover

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// replica is an httptest server that records what reached it.
type replica struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // "METHOD path body"
}

func (r *replica) record(req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, strings.TrimSpace(req.Method+" "+req.URL.Path+" "+string(body)))
}

func (r *replica) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

func newReplica(t *testing.T, answer func(w http.ResponseWriter)) *replica {
	r := &replica{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.record(req)
		answer(w)
	}))
	t.Cleanup(r.Close)
	return r
}

func healthy(t *testing.T) *replica {
	return newReplica(t, func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) })
}

func unavailable(t *testing.T) *replica {
	return newReplica(t, func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"faultstring": "database unreachable"}`))
	})
}

// resetting reads the request, then resets the connection instead of
// answering: the request may have been processed, the client cannot know.
func resetting(t *testing.T) *replica {
	r := &replica{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.record(req)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}))
	t.Cleanup(r.Close)
	return r
}

// closedURL is a loopback address that refuses connections.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func newTransport(t *testing.T, endpoints ...string) (*Transport, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	tr, err := New(endpoints, &http.Transport{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.base.(*http.Transport).CloseIdleConnections() })
	return tr, reg
}

func do(t *testing.T, tr *Transport, method, url, body string) (*http.Response, error) {
	t.Helper()
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, reader)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func expectSeen(t *testing.T, name string, r *replica, want ...string) {
	t.Helper()
	if got := r.seen(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s got %q, want %q", name, got, want)
	}
}

func expectMetrics(t *testing.T, reg *prometheus.Registry, endpoint string, switches int) {
	t.Helper()
	want := `# HELP api_endpoint_info 1 for the API endpoint (replica) in use.
# TYPE api_endpoint_info gauge
api_endpoint_info{endpoint="` + endpoint + `"} 1
# HELP api_endpoint_switches_total Moves to another API endpoint after the one in use failed.
# TYPE api_endpoint_switches_total counter
api_endpoint_switches_total ` + strconv.Itoa(switches) + "\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestSwitchAndStick: the first replica refuses connections, the second
// answers 503, the third works. Requests end on the third, and stay there.
func TestSwitchAndStick(t *testing.T) {
	closed, down, up := closedURL(t), unavailable(t), healthy(t)
	tr, reg := newTransport(t, closed+"/lb", down.URL+"/lb", up.URL+"/lb/")
	expectMetrics(t, reg, closed+"/lb", 0)
	if tr.URL() != closed+"/lb" {
		t.Errorf("URL() = %s, want the first endpoint", tr.URL())
	}

	resp, err := do(t, tr, http.MethodGet, tr.URL()+"/v2/lbaas/loadbalancers", "")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %v, want 200 from the third replica", resp, err)
	}
	if tr.Current() != up.URL+"/lb" {
		t.Errorf("in use: %s, want %s", tr.Current(), up.URL+"/lb")
	}
	expectMetrics(t, reg, up.URL+"/lb", 1)

	for _, body := range []string{`{"a": 1}`, `{"b": 2}`} {
		if resp, err := do(t, tr, http.MethodPost, tr.URL()+"/v2/lbaas/pools", body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST: %v %v", resp, err)
		}
	}
	expectSeen(t, "the 503 replica", down, "GET /lb/v2/lbaas/loadbalancers")
	expectSeen(t, "the healthy replica", up, "GET /lb/v2/lbaas/loadbalancers",
		`POST /lb/v2/lbaas/pools {"a": 1}`, `POST /lb/v2/lbaas/pools {"b": 2}`)
	expectMetrics(t, reg, up.URL+"/lb", 1)
}

// TestPostRetriedWhenNotProcessed: a POST refused before it was sent, or
// refused with 503, goes to the next replica with its body.
func TestPostRetriedWhenNotProcessed(t *testing.T) {
	for name, first := range map[string]func(t *testing.T) string{
		"connection refused": closedURL,
		"503":                func(t *testing.T) string { return unavailable(t).URL },
	} {
		t.Run(name, func(t *testing.T) {
			up := healthy(t)
			tr, reg := newTransport(t, first(t), up.URL)
			resp, err := do(t, tr, http.MethodPost, tr.URL()+"/v2/lbaas/loadbalancers", `{"loadbalancer": {}}`)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("POST: %v %v, want 200 from the second replica", resp, err)
			}
			expectSeen(t, "the healthy replica", up, `POST /v2/lbaas/loadbalancers {"loadbalancer": {}}`)
			expectMetrics(t, reg, up.URL, 1)
		})
	}
}

// TestResetPostNotRetried: a POST whose connection is reset after the
// replica read it may have created the object: it is not sent again, the
// caller gets the error. A GET cut the same way is idempotent and moves on.
func TestResetPostNotRetried(t *testing.T) {
	cut, up := resetting(t), healthy(t)
	tr, reg := newTransport(t, cut.URL, up.URL)
	if resp, err := do(t, tr, http.MethodPost, tr.URL()+"/v2/lbaas/loadbalancers", `{"loadbalancer": {}}`); err == nil {
		t.Fatalf("POST reset mid-request: %v, want an error", resp.Status)
	} else if !strings.Contains(err.Error(), cut.URL) {
		t.Errorf("error %q does not name the replica %s", err, cut.URL)
	}
	expectSeen(t, "the resetting replica", cut, `POST /v2/lbaas/loadbalancers {"loadbalancer": {}}`)
	expectSeen(t, "the healthy replica", up)
	expectMetrics(t, reg, cut.URL, 0)

	if resp, err := do(t, tr, http.MethodGet, tr.URL()+"/v2/lbaas/loadbalancers", ""); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %v, want 200 from the second replica", resp, err)
	}
	expectSeen(t, "the healthy replica", up, "GET /v2/lbaas/loadbalancers")
	expectMetrics(t, reg, up.URL, 1)
}

// TestBodyWithoutGetBodyNotRetried: a body that cannot be read again is
// not replayed, even where a retry would be safe.
func TestBodyWithoutGetBodyNotRetried(t *testing.T) {
	closed, up := closedURL(t), healthy(t)
	tr, _ := newTransport(t, closed, up.URL)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, tr.URL()+"/v2/lbaas/pools/p1",
		io.NopCloser(bytes.NewReader([]byte(`{"pool": {}}`))))
	if err != nil {
		t.Fatal(err)
	}
	if req.GetBody != nil {
		t.Fatal("the request can replay its body; the test needs one that cannot")
	}
	if _, err := (&http.Client{Transport: tr}).Do(req); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("PUT with a one-shot body: %v, want the first replica's connection refused", err)
	}
	expectSeen(t, "the healthy replica", up)
}

// TestAllUnavailable: when no replica answers, the caller gets the last
// replica's answer, and the replica in use stays.
func TestAllUnavailable(t *testing.T) {
	closed, down := closedURL(t), unavailable(t)
	tr, reg := newTransport(t, closed, down.URL)
	resp, err := do(t, tr, http.MethodDelete, tr.URL()+"/v2/lbaas/loadbalancers/l1", "")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("DELETE: %v %v, want the 503", resp, err)
	}
	expectMetrics(t, reg, closed, 0)

	tr, _ = newTransport(t, down.URL, closed)
	if _, err := do(t, tr, http.MethodGet, tr.URL()+"/", ""); err == nil || !strings.Contains(err.Error(), "API endpoint "+closed) {
		t.Errorf("GET: %v, want the last replica's connection error", err)
	}
}

// TestSettleKeepsAnotherRequestsChoice: two requests that start on a
// failed replica and end on different ones do not bounce the transport.
func TestSettleKeepsAnotherRequestsChoice(t *testing.T) {
	tr, reg := newTransport(t, "http://a", "http://b", "http://c")
	tr.settle(0, 2)
	tr.settle(0, 1)
	tr.settle(2, 2)
	if tr.Current() != "http://c" {
		t.Errorf("in use: %s, want http://c", tr.Current())
	}
	expectMetrics(t, reg, "http://c", 1)
}
