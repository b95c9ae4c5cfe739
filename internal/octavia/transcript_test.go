package octavia

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/provider/flow"
	"github.com/flowlb/flowlb/internal/store/memstore"
)

var updateTranscripts = flag.Bool("update-transcripts", false, "rewrite testdata/transcripts/*.txtar with the responses the API gives now")

// TestTranscripts replays the API conversations in testdata/transcripts
// and compares every response, status, content type and body byte for
// byte (shown indented), with ids and timestamps replaced by placeholders.
// Each archive has a "requests" file — one request per line:
// METHOD PATH [JSON BODY], where $idN names the Nth id the server
// answered with; "as PROJECT ROLE..." changes the caller (default p1,
// admin); "release" completes every change waiting for the provider —
// and a "transcript" file, the conversation as recorded. The archives
// were recorded before the typed-request refactoring: they pin the
// API's behaviour across it.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/transcripts/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts (%v)", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var requests []byte
			var want string
			for _, f := range ar.Files {
				switch f.Name {
				case "requests":
					requests = f.Data
				case "transcript":
					want = string(f.Data)
				}
			}
			got := replay(t, requests)
			if *updateTranscripts {
				ar.Files = []txtar.File{{Name: "requests", Data: requests}, {Name: "transcript", Data: []byte(got)}}
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("transcript differs (run with -update-transcripts to see the new one in git diff):\n%s", firstDifference(want, got))
			}
		})
	}
}

// acceptAll is a provider that serves everything, so that transcripts can
// reach the rules the flow provider refuses first (L7, TLS, HTTP).
type acceptAll struct{ held *heldRealizer }

func (acceptAll) Name() string            { return "accept" }
func (acceptAll) Description() string     { return "accepts every option (tests)" }
func (acceptAll) Check(*lbaas.Tree) error { return nil }
func (p acceptAll) Realize(id string, rev int64, done func(error)) {
	p.held.Realize(id, rev, done)
}
func (acceptAll) FlavorCapabilities() []lbaas.Capability {
	return []lbaas.Capability{{Name: "size", Description: "a test capability"}}
}
func (acceptAll) AZCapabilities() []lbaas.Capability { return nil }
func (acceptAll) CheckFlavor(map[string]any) error   { return nil }
func (acceptAll) CheckAZ(map[string]any) error       { return nil }

var (
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?`)
	idRef  = regexp.MustCompile(`\$id\d+`)
)

// replay runs the requests against a fresh API and returns the transcript.
func replay(t *testing.T, requests []byte) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	held := &heldRealizer{}
	svc, err := lbaas.New(memstore.New(), &fakeVIPs{}, []lbaas.Provider{flow.New(held), acceptAll{held}},
		lbaas.Config{DefaultProvider: flow.Name}, log)
	if err != nil {
		t.Fatal(err)
	}
	pol := identity.Policy{Personas: identity.Advanced}
	api := New(svc, nil, log, Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := identity.Caller{ProjectID: r.Header.Get("X-Test-Project"), Roles: strings.Fields(r.Header.Get("X-Test-Roles"))}
		api.ServeHTTP(w, r.WithContext(identity.WithCaller(r.Context(), pol.Resolve(c))))
	}))
	defer srv.Close()

	ids := map[string]string{}   // real id → $idN
	names := map[string]string{} // $idN → real id
	placeholders := func(s string) string {
		s = uuidRE.ReplaceAllStringFunc(s, func(id string) string {
			if n, ok := ids[id]; ok {
				return n
			}
			n := fmt.Sprintf("$id%d", len(ids)+1)
			ids[id], names[n] = n, id
			return n
		})
		s = strings.ReplaceAll(s, srv.URL, "<server>")
		return timeRE.ReplaceAllString(s, "<time>")
	}
	project, roles := "p1", "admin"
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(requests))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.SplitN(line, " ", 3)
		switch fields[0] {
		case "release":
			held.release()
			continue
		case "as":
			as := strings.Fields(line)
			project, roles = as[1], strings.Join(as[2:], " ")
			fmt.Fprintf(&out, "# as %s %s\n", project, roles)
			continue
		}
		if len(fields) < 2 {
			t.Fatalf("bad request line %q", line)
		}
		real := idRef.ReplaceAllStringFunc(line, func(n string) string {
			if id, ok := names[n]; ok {
				return id
			}
			t.Fatalf("%q names %s before any response did", line, n)
			return n
		})
		parts := strings.SplitN(real, " ", 3)
		var body io.Reader
		if len(parts) == 3 {
			body = strings.NewReader(parts[2])
		}
		req, _ := http.NewRequest(parts[0], srv.URL+parts[1], body)
		req.Header.Set("X-Test-Project", project)
		req.Header.Set("X-Test-Roles", roles)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&out, "> %s\n< %d %s\n", line, resp.StatusCode, resp.Header.Get("Content-Type"))
		if len(raw) > 0 {
			out.WriteString(placeholders(indent(raw)))
		}
	}
	return out.String()
}

// indent shows a compact JSON body indented (a faithful view: the
// encoder's output has no other whitespace), anything else as it is.
func indent(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, bytes.TrimRight(raw, "\n"), "", "  ") != nil {
		return string(raw)
	}
	if !bytes.HasSuffix(raw, []byte("\n")) {
		b.WriteString(" (no newline)")
	}
	return b.String() + "\n"
}

func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			lo := max(i-6, 0)
			return fmt.Sprintf("line %d:\nwant: %q\n got: %q\ncontext (got):\n%s", i+1, wl, gl, strings.Join(g[lo:min(i+3, len(g))], "\n"))
		}
	}
	return "(same lines)"
}
