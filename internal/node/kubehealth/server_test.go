package kubehealth

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// freePort is a TCP port of the loopback nobody listens on just now.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, url string) (answer, error) {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return answer{}, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return answer{r.StatusCode, r.Header, string(b)}, err
}

// TestServerAnswers: real HTTP on the loopback, through the checks'
// lifecycle: 200 with the count and kube-proxy's body and headers while
// the node has endpoints, 503 without or while the proxy is unhealthy,
// nothing once the check is gone.
func TestServerAnswers(t *testing.T) {
	var unhealthy atomic.Bool
	healthy := func() error {
		if unhealthy.Load() {
			return errors.New("out of sync")
		}
		return nil
	}
	s := NewServer(loopback, healthy, slog.New(slog.DiscardHandler))
	defer s.Close()
	p := freePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(int(p)) + "/any/path"

	if _, err := get(t, url); err == nil {
		t.Fatal("a port is answered before any check")
	}
	s.SetChecks(map[uint16]Check{p: {Namespace: "ns", Name: "web", LocalEndpoints: 2}})
	if got := s.Ports(); !slices.Equal(got, []uint16{p}) {
		t.Fatalf("ports %v", got)
	}
	a, err := get(t, url)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
	if a.status != 200 || a.body != want {
		t.Errorf("with 2 local endpoints: %d\n%s\nwant 200\n%s", a.status, a.body, want)
	}
	for h, v := range map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff", "X-Load-Balancing-Endpoint-Weight": "2"} {
		if got := a.header.Get(h); got != v {
			t.Errorf("header %s: %q, want %q", h, got, v)
		}
	}

	// The count changes without a restart of the server.
	s.SetChecks(map[uint16]Check{p: {Namespace: "ns", Name: "web"}})
	a, err = get(t, url)
	if err != nil {
		t.Fatal(err)
	}
	var b serviceBody
	if err := json.Unmarshal([]byte(a.body), &b); err != nil {
		t.Fatal(err)
	}
	if a.status != 503 || b.LocalEndpoints != 0 || !b.ServiceProxyHealthy || a.header.Get("X-Load-Balancing-Endpoint-Weight") != "0" {
		t.Errorf("with no local endpoint: %d %s", a.status, a.body)
	}

	s.SetChecks(map[uint16]Check{p: {Namespace: "ns", Name: "web", LocalEndpoints: 1}})
	unhealthy.Store(true)
	a, err = get(t, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(a.body), &b); err != nil {
		t.Fatal(err)
	}
	if a.status != 503 || b.LocalEndpoints != 1 || b.ServiceProxyHealthy {
		t.Errorf("unhealthy proxy: %d %s", a.status, a.body)
	}
	unhealthy.Store(false)

	s.SetChecks(nil)
	if got := s.Ports(); len(got) != 0 {
		t.Errorf("ports %v after the checks went", got)
	}
	if a, err := get(t, url); err == nil {
		t.Errorf("the port still answers after its check went: %d", a.status)
	}
}

// A port that cannot be listened on is tried again at the next update.
func TestServerRetriesBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := uint16(ln.Addr().(*net.TCPAddr).Port)
	s := NewServer(loopback, func() error { return nil }, slog.New(slog.DiscardHandler))
	defer s.Close()
	checks := map[uint16]Check{p: {Namespace: "ns", Name: "web", LocalEndpoints: 1}}
	s.SetChecks(checks)
	if got := s.Ports(); len(got) != 0 {
		t.Fatalf("ports %v while another holds the port", got)
	}
	ln.Close()
	s.SetChecks(checks)
	if got := s.Ports(); !slices.Equal(got, []uint16{p}) {
		t.Fatalf("ports %v once the port is free", got)
	}
	if a, err := get(t, "http://127.0.0.1:"+strconv.Itoa(int(p))+"/"); err != nil || a.status != 200 {
		t.Errorf("%+v %v", a, err)
	}
}

// Moving to other addresses restarts the servers there.
func TestServerSetAddresses(t *testing.T) {
	s := NewServer(loopback, func() error { return nil }, slog.New(slog.DiscardHandler))
	defer s.Close()
	p := freePort(t)
	s.SetChecks(map[uint16]Check{p: {Name: "web", LocalEndpoints: 1}})
	other := "127.0.0.2"
	s.SetAddresses([]netip.Addr{netip.MustParseAddr(other)})
	if _, err := get(t, "http://127.0.0.1:"+strconv.Itoa(int(p))+"/"); err == nil {
		t.Error("the old address still answers")
	}
	if a, err := get(t, "http://"+other+":"+strconv.Itoa(int(p))+"/"); err != nil || a.status != 200 {
		t.Errorf("the new address: %+v %v", a, err)
	}
	// nil: every address, as kube-proxy without --nodeport-addresses.
	s.SetAddresses(nil)
	for _, h := range []string{"127.0.0.1", other} {
		if a, err := get(t, "http://"+h+":"+strconv.Itoa(int(p))+"/"); err != nil || a.status != 200 {
			t.Errorf("every address, %s: %+v %v", h, a, err)
		}
	}
}

func TestNodeHandler(t *testing.T) {
	var err error
	last := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := NodeHandler(func() error { return err }, func() time.Time { return last })
	for _, tc := range []struct {
		path    string
		err     error
		status  int
		healthy bool
	}{
		{"/healthz", nil, 200, true},
		{"/livez", nil, 200, true},
		{"/healthz", errors.New("no snapshot"), 503, false},
		{"/livez", errors.New("no snapshot"), 503, false},
		{"/other", nil, 404, false},
	} {
		err = tc.err
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.status {
			t.Errorf("%s (err %v): %d, want %d", tc.path, tc.err, rec.Code, tc.status)
			continue
		}
		if tc.status == 404 {
			continue
		}
		var b nodeBody
		if e := json.Unmarshal(rec.Body.Bytes(), &b); e != nil {
			t.Fatalf("%s: %v: %s", tc.path, e, rec.Body)
		}
		if b.Healthy != tc.healthy || !b.NodeEligible || b.LastUpdated != last.String() || b.CurrentTime == "" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %+v %v", tc.path, b, rec.Header())
		}
	}
}
