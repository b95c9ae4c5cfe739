// Package failover spreads an HTTP client over several replicas of one
// API: an http.RoundTripper that sends each request to the replica in use
// and, when that replica cannot be reached or answers 503, to the next
// one, as long as sending the request again is safe (see Retry). The
// replica that answered stays in use for the next requests.
package failover

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Transport is the failover http.RoundTripper. Requests may name any host:
// the transport replaces scheme and host with the chosen replica's and
// keeps the path, which is why all replicas share one base path.
type Transport struct {
	base      http.RoundTripper
	endpoints []*url.URL
	m         *metrics

	mu      sync.Mutex
	current int // index into endpoints of the replica in use
}

// New returns a Transport over endpoints (URLs with the same path, the
// first one in use at start), sending through base (nil:
// http.DefaultTransport). Its metrics go to reg (nil: unregistered).
func New(endpoints []string, base http.RoundTripper, reg prometheus.Registerer) (*Transport, error) {
	parsed, err := parseEndpoints(endpoints)
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, endpoints: parsed, m: newMetrics(reg)}
	t.m.inUse(t.endpoints[0].String())
	return t, nil
}

// URL is the base URL to build requests on: the first endpoint's, without
// a trailing slash.
func (t *Transport) URL() string { return t.endpoints[0].String() }

// Current is the URL of the replica in use.
func (t *Transport) Current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endpoints[t.current].String()
}

// RoundTrip sends req to the replica in use, then to the others in their
// order while the outcome allows (Retry) and the body can be sent again
// (req.GetBody). It returns the last replica's result.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	first := t.currentIndex()
	var resp *http.Response
	var err error
	last := first
	for i := range len(t.endpoints) {
		index := (first + i) % len(t.endpoints)
		attempt, ok := t.rewrite(req, index, i > 0)
		if !ok {
			break
		}
		discard(resp)
		last = index
		resp, err = t.base.RoundTrip(attempt)
		outcome := Classify(resp, err)
		if outcome == Answered {
			t.settle(first, index)
			return resp, nil
		}
		if req.Context().Err() != nil || !Retry(req.Method, outcome) {
			break
		}
	}
	if err != nil {
		// The caller's error names the request's URL, not the replica's.
		return nil, fmt.Errorf("API endpoint %s: %w", t.endpoints[last], err)
	}
	return resp, nil
}

// rewrite copies req for the replica at index. A retry needs a fresh body:
// false if the request has one and cannot make another.
func (t *Transport) rewrite(req *http.Request, index int, retry bool) (*http.Request, bool) {
	attempt := req.Clone(req.Context())
	if retry && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, false
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, false
		}
		attempt.Body = body
	}
	endpoint := t.endpoints[index]
	attempt.URL.Scheme, attempt.URL.Host, attempt.Host = endpoint.Scheme, endpoint.Host, endpoint.Host
	return attempt, true
}

func (t *Transport) currentIndex() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.current
}

// settle makes the replica at index the one in use after it answered a
// request that started on first. If another request moved on from first
// meanwhile, its choice stands, so that concurrent requests do not bounce
// the transport between replicas.
func (t *Transport) settle(first, index int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if index == first || t.current != first {
		return
	}
	t.current = index
	t.m.switched(t.endpoints[index].String())
}

// discard releases a 503 response that a retry replaces.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
