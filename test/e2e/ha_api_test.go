package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
)

// replicaAPI reaches the Octavia API through every replica in turn, as an
// operator's load balancer in front of the replicas would: each request
// goes to the next replica, and a caller whose replica is unreachable or
// answers 503 goes on with the next one.
type replicaAPI struct {
	addrs []netip.AddrPort
	http  *http.Client
	next  atomic.Uint64
	// What the replicas answered: 503s (database unavailable, in
	// Octavia's fault body), connections refused (a killed replica),
	// transport errors after the request went out (the outcome unknown).
	unavailable, refused, broken atomic.Int64
	// badFaults counts 503s whose body is not Octavia's fault, and
	// serverErrors other 5xx answers; lastBad is one of them.
	badFaults, serverErrors atomic.Int64
	lastBad                 atomic.Value
}

// errRefused: no replica got the request, it can be sent again as is.
var errRefused = errors.New("connection refused")

func newReplicaAPI(t testing.TB, l *lab.Lab, ks []int) *replicaAPI {
	a := &replicaAPI{}
	for _, k := range ks {
		a.addrs = append(a.addrs, lab.ReplicaAPI(k))
	}
	// A fresh connection per request: a request never goes out on a kept
	// connection to a replica that died meanwhile, so a refused
	// connection means the request was not sent.
	roots, err := l.APIRoots()
	if err != nil {
		t.Fatal(err)
	}
	a.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: l.Fabric().Dial, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots}}}
	return a
}

// send makes one request to the next replica and decodes the answer.
func (a *replicaAPI) send(method, path string, body any) (int, map[string]any, error) {
	addr := a.addrs[int(a.next.Add(1))%len(a.addrs)]
	return a.sendTo(addr, method, path, body)
}

// sendTo makes one request to the replica at addr.
func (a *replicaAPI) sendTo(addr netip.AddrPort, method, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, lab.APIURL(addr)+path, rd)
	req.Header.Set("X-Project-Id", "e2e")
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			a.refused.Add(1)
			return 0, nil, fmt.Errorf("%s: %w", addr, errRefused)
		}
		a.broken.Add(1)
		return 0, nil, fmt.Errorf("%s %s on %s: %w", method, path, addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		a.broken.Add(1)
		return 0, nil, fmt.Errorf("%s %s on %s: reading the answer: %w", method, path, addr, err)
	}
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	switch s, _ := out["faultstring"].(string); {
	case resp.StatusCode == http.StatusServiceUnavailable:
		a.unavailable.Add(1)
		if out["faultcode"] != "Server" || !strings.Contains(s, "database") {
			a.badFaults.Add(1)
			a.lastBad.Store(fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, raw))
		}
	case resp.StatusCode >= 500:
		a.serverErrors.Add(1)
		a.lastBad.Store(fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, raw))
	}
	return resp.StatusCode, out, nil
}

// read GETs path through whichever replica answers with the database up
// (anything but 5xx or a lost connection), trying for at most within.
func (a *replicaAPI) read(path string, within time.Duration) (int, map[string]any, error) {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		code, out, err := a.send("GET", path, nil)
		if err == nil && code < 500 {
			return code, out, nil
		}
		if last = err; err == nil {
			last = fmt.Errorf("GET %s: %d %v", path, code, out["faultstring"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, nil, fmt.Errorf("no replica answered within %s: %w", within, last)
}

// metrics reads a replica's /metrics.
func (a *replicaAPI) metrics(k int) (string, error) {
	resp, err := a.http.Get(lab.APIURL(lab.ReplicaAPI(k)) + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metricValue is the value of the series named name (with its labels, as
// the text format writes them) in a /metrics text.
func metricValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// agentServer is the replica whose stream node n's agent has now
// (flowlb_agent_server_info), "" between streams.
func agentServer(ctx context.Context, n lab.Host) (string, error) {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return n.Dial(ctx, network, addr)
	}, DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1:9878/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, `flowlb_agent_server_info{server="`); ok {
			if server, value, ok := strings.Cut(rest, `"} `); ok && value == "1" {
				return server, nil
			}
		}
	}
	return "", nil
}
