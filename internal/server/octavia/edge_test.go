package octavia

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/neutron"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// edgeServer is the Octavia API with the Neutron subset on st, as
// flowlb server mounts them.
func edgeServer(t *testing.T, st store.Store) *httptest.Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := lbaas.New(st, &fakeVIPs{}, []lbaas.Provider{flow.New(flow.Immediate{})}, lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(identity.NoAuth("p-default", New(svc, neutron.NewHandler(st, log), log, Config{})))
	t.Cleanup(srv.Close)
	return srv
}

// answer is a response as a raw client sees it.
type answer struct {
	code   int
	header http.Header
	body   map[string]any
}

// octaviaFault is the Octavia fault's message, or "" if the body is not
// one (wrong shape or faultcode).
func (a answer) octaviaFault() string {
	s, _ := a.body["faultstring"].(string)
	_, hasDebug := a.body["debuginfo"]
	if a.body["faultcode"] != "Client" || !hasDebug || len(a.body) != 3 {
		return ""
	}
	return s
}

// neutronFault is the NeutronError's type, or "" if the body is not one.
func (a answer) neutronFault() string {
	e, _ := a.body["NeutronError"].(map[string]any)
	if typ, _ := e["type"].(string); typ != "" && e["message"] != nil {
		return typ
	}
	return ""
}

// raw writes req as bytes on a fresh connection, closes the sending
// side (so a body shorter than announced ends there) and reads the
// answer.
func raw(t *testing.T, srv *httptest.Server, req string) answer {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	defer resp.Body.Close()
	return decodeAnswer(t, resp)
}

func decodeAnswer(t *testing.T, resp *http.Response) answer {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header}
	if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &a.body) != nil {
		t.Errorf("answer %d is not JSON: %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return a
}

func send(t *testing.T, srv *httptest.Server, method, path, contentType string, body []byte) answer {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return decodeAnswer(t, resp)
}

const lbBody = `{"loadbalancer": {"name": "lb", "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`

// TestTransportErrorsAreClientFaults drives a real server over raw TCP:
// bodies shorter than announced and broken chunked encodings are the
// client's errors, answered in the format of the API they were sent to.
func TestTransportErrorsAreClientFaults(t *testing.T) {
	srv := edgeServer(t, memstore.New())
	head := func(method, path, more string) string {
		return method + " " + path + " HTTP/1.1\r\nHost: flowlb\r\nContent-Type: application/json\r\nConnection: close\r\n" + more + "\r\n"
	}
	for _, tc := range []struct {
		name, req string
		code      int
		neutron   bool
	}{
		{"truncated", head("POST", "/v2/lbaas/loadbalancers", "Content-Length: 400\r\n") + lbBody[:30], 400, false},
		{"truncated update", head("PUT", "/v2/lbaas/pools/p/members", "Content-Length: 50\r\n") + `{"members": [`, 400, false},
		{"bad chunk size", head("POST", "/v2/lbaas/loadbalancers", "Transfer-Encoding: chunked\r\n") + "zz\r\n{}\r\n0\r\n\r\n", 400, false},
		{"chunk longer than sent", head("POST", "/v2/lbaas/listeners", "Transfer-Encoding: chunked\r\n") + "ff\r\n{\"listener\"", 400, false},
		{"chunk without CRLF", head("POST", "/v2/lbaas/loadbalancers", "Transfer-Encoding: chunked\r\n") + "2\r\n{}XX0\r\n\r\n", 400, false},
		{"neutron truncated", head("POST", "/v2.0/networks", "Content-Length: 300\r\n") + `{"network": {`, 400, true},
		{"neutron bad chunking", head("PUT", "/v2.0/networks/x", "Transfer-Encoding: chunked\r\n") + "-1\r\n", 400, true},
	} {
		a := raw(t, srv, tc.req)
		ok := a.octaviaFault() != ""
		if tc.neutron {
			ok = a.neutronFault() == "HTTPBadRequest"
		}
		if a.code != tc.code || !ok {
			t.Errorf("%s: %d %v, want %d in the API's fault format", tc.name, a.code, a.body, tc.code)
		}
	}
}

// TestRoutingAndMediaErrors: unknown routes are JSON 404s, wrong methods
// 405s with an Allow header, and a body that is not JSON a 415 as wsme
// answers it.
func TestRoutingAndMediaErrors(t *testing.T) {
	srv := edgeServer(t, memstore.New())
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
		neutron      bool
	}{
		{"GET", "/nowhere", 404, "", false},
		{"GET", "/v3/lbaas/loadbalancers", 404, "", false},
		{"GET", "/v2/lbaas", 404, "", false},
		{"GET", "/v2/lbaas/nothing", 404, "", false},
		{"PATCH", "/v2/lbaas/loadbalancers", 405, "GET, POST", false},
		{"POST", "/v2/lbaas/loadbalancers/x", 405, "GET, PUT, DELETE", false},
		{"HEAD", "/v2/lbaas/listeners", 405, "GET, POST", false},
		{"DELETE", "/v2/lbaas/pools/x/members", 405, "GET, POST, PUT", false},
		{"PATCH", "/v2.0/networks", 405, "GET, POST", true},
		{"POST", "/v2.0/subnets/x", 405, "GET, PUT, DELETE", true},
		{"GET", "/v2.0/networks/x/nothing", 404, "", true},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if tc.method == "HEAD" {
			// No body to read: the status, type and Allow say it.
			resp.Body.Close()
			if resp.StatusCode != tc.code || resp.Header.Get("Allow") != tc.allow || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("HEAD %s: %d %v", tc.path, resp.StatusCode, resp.Header)
			}
			continue
		}
		a := decodeAnswer(t, resp)
		resp.Body.Close()
		format := a.octaviaFault() != ""
		if tc.neutron {
			format = a.neutronFault() != ""
		}
		if a.code != tc.code || a.header.Get("Allow") != tc.allow || !format {
			t.Errorf("%s %s: %d Allow=%q %v, want %d Allow=%q", tc.method, tc.path, a.code, a.header.Get("Allow"), a.body, tc.code, tc.allow)
		}
	}
	for ct, code := range map[string]int{"text/plain": 415, "application/x-www-form-urlencoded": 415, "application/xml": 415, "application/json; charset=utf-8": 201, "": 201} {
		a := send(t, srv, "POST", "/v2/lbaas/loadbalancers", ct, []byte(lbBody))
		if a.code != code || (code == 415 && a.octaviaFault() != "Unknown mimetype: "+strings.SplitN(ct, ";", 2)[0]) {
			t.Errorf("Content-Type %q: %d %v, want %d", ct, a.code, a.body, code)
		}
	}
}

// TestBadTextRefusedOnEveryEngine: NUL characters and invalid UTF-8 in
// any string, in bodies and URLs, are refused with 400 before they reach
// the database (PostgreSQL would refuse NUL with a 500).
func TestBadTextRefusedOnEveryEngine(t *testing.T) {
	for _, en := range storetest.Engines(t) {
		t.Run(en.Name, func(t *testing.T) {
			srv := edgeServer(t, en.Store)
			for _, tc := range []struct {
				method, path, body string
				neutron            bool
			}{
				{"POST", "/v2/lbaas/loadbalancers", `{"loadbalancer": {"name": "a\u0000b", "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`, false},
				{"POST", "/v2/lbaas/loadbalancers", `{"loadbalancer": {"name": "lb", "tags": ["x\u0000"], "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`, false},
				{"POST", "/v2/lbaas/loadbalancers", "{\"loadbalancer\": {\"name\": \"\xff\xfe\", \"vip_subnet_id\": \"8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11\"}}", false},
				{"PUT", "/v2/lbaas/quotas/a%00b", `{"quota": {"loadbalancer": 5}}`, false},
				{"GET", "/v2/lbaas/loadbalancers/a%00b", "", false},
				{"GET", "/v2/lbaas/loadbalancers?name=a%00b", "", false},
				{"GET", "/v2/lbaas/loadbalancers/%ff", "", false},
				{"POST", "/v2.0/networks", `{"network": {"name": "n\u0000"}}`, true},
				{"POST", "/v2.0/networks", "{\"network\": {\"name\": \"\xc3\"}}", true},
				{"GET", "/v2.0/ports/a%00b", "", true},
			} {
				var body []byte
				if tc.body != "" {
					body = []byte(tc.body)
				}
				a := send(t, srv, tc.method, tc.path, "application/json", body)
				format := a.octaviaFault() != ""
				if tc.neutron {
					format = a.neutronFault() != ""
				}
				if a.code != 400 || !format {
					t.Errorf("%s %s %q: %d %v, want 400", tc.method, tc.path, tc.body, a.code, a.body)
				}
			}
			if a := send(t, srv, "POST", "/v2/lbaas/loadbalancers", "application/json", []byte(`{"loadbalancer": {"name": "a\u0000b", "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`)); a.octaviaFault() != "Invalid input for field/attribute name. Value: 'a\x00b'. Value should not contain NUL characters" {
				t.Errorf("NUL in a name: %q", a.octaviaFault())
			}
			// The same requests without the bad characters are served.
			if a := send(t, srv, "POST", "/v2/lbaas/loadbalancers", "application/json", []byte(`{"loadbalancer": {"name": "ab", "vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`)); a.code != 201 {
				t.Errorf("clean create: %d %v", a.code, a.body)
			}
			if a := send(t, srv, "POST", "/v2.0/networks", "application/json", []byte(`{"network": {"name": "n"}}`)); a.code != 201 {
				t.Errorf("clean network create: %d %v", a.code, a.body)
			}
		})
	}
}
