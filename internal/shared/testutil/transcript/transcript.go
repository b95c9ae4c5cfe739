// Package transcript replays recorded HTTP conversations against a
// handler and compares every answer, status, content type and body byte
// for byte (shown indented), with ids and timestamps replaced by
// placeholders, so that a change to an API's behaviour shows as a diff.
//
// A transcript is a txtar archive with a "requests" file — one request per
// line, METHOD PATH [BODY], where $idN names the Nth id the server has
// answered with; "as PROJECT ROLE..." sets the caller's X-Test-Project
// and X-Test-Roles headers (default p1, admin); other lines are commands
// of the test — and a "transcript" file, the conversation as recorded.
// Run the test with -update-transcripts to record it anew.
package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update-transcripts", false, "rewrite the transcripts with the answers the handler gives now")

// Command is a test's own request-file command: it gets the line's
// arguments.
type Command func(t *testing.T, args []string)

// Server is one fresh API for one transcript, and its commands.
type Server struct {
	Handler  http.Handler
	Commands map[string]Command
}

// Run replays every transcript matching glob against a fresh server.
func Run(t *testing.T, glob string, newServer func(t *testing.T) Server) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts match %s (%v)", glob, err)
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
			// Ids from a seeded source: lists ordered by id come out in the
			// same order at every run.
			uuid.SetRand(rand.New(rand.NewSource(1)))
			defer uuid.SetRand(nil)
			got := replay(t, newServer(t), requests)
			if *update {
				ar.Files = []txtar.File{{Name: "requests", Data: requests}, {Name: "transcript", Data: []byte(got)}}
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("%s: the conversation differs (run with -update-transcripts and see git diff):\n%s", file, firstDifference(want, got))
			}
		})
	}
}

var (
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?`)
	macRE  = regexp.MustCompile(`\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b`)
	idRef  = regexp.MustCompile(`\$id\d+`)
)

// conversation is one replay's state: the server, the caller, and the
// ids seen so far.
type conversation struct {
	t             *testing.T
	srv           *httptest.Server
	ids           map[string]string // real id → $idN
	names         map[string]string // $idN → real id
	project, role string
	out           strings.Builder
}

func replay(t *testing.T, s Server, requests []byte) string {
	t.Helper()
	srv := httptest.NewServer(s.Handler)
	defer srv.Close()
	c := &conversation{t: t, srv: srv, ids: map[string]string{}, names: map[string]string{}, project: "p1", role: "admin"}
	sc := bufio.NewScanner(bytes.NewReader(requests))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		words := strings.Fields(line)
		if cmd, ok := s.Commands[words[0]]; ok {
			cmd(t, words[1:])
			continue
		}
		if words[0] == "as" {
			c.project, c.role = words[1], strings.Join(words[2:], " ")
			fmt.Fprintf(&c.out, "# as %s %s\n", c.project, c.role)
			continue
		}
		c.request(line)
	}
	return c.out.String()
}

// request sends one request line and records the answer.
func (c *conversation) request(line string) {
	real := idRef.ReplaceAllStringFunc(line, func(n string) string {
		if id, ok := c.names[n]; ok {
			return id
		}
		c.t.Fatalf("%q names %s before any answer did", line, n)
		return n
	})
	parts := strings.SplitN(real, " ", 3)
	if len(parts) < 2 {
		c.t.Fatalf("bad request line %q", line)
	}
	var body io.Reader
	if len(parts) == 3 {
		body = strings.NewReader(parts[2])
	}
	req, err := http.NewRequest(parts[0], c.srv.URL+parts[1], body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("X-Test-Project", c.project)
	req.Header.Set("X-Test-Roles", c.role)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Fprintf(&c.out, "> %s\n< %d %s\n", line, resp.StatusCode, resp.Header.Get("Content-Type"))
	if len(raw) > 0 {
		c.out.WriteString(c.placeholders(indent(raw)))
	}
}

// placeholders replaces ids (each by $idN, N in order of first
// appearance), timestamps, MAC addresses and the server's address.
func (c *conversation) placeholders(s string) string {
	s = uuidRE.ReplaceAllStringFunc(s, func(id string) string {
		if n, ok := c.ids[id]; ok {
			return n
		}
		n := fmt.Sprintf("$id%d", len(c.ids)+1)
		c.ids[id], c.names[n] = n, id
		return n
	})
	s = strings.ReplaceAll(s, c.srv.URL, "<server>")
	s = macRE.ReplaceAllString(s, "<mac>")
	return timeRE.ReplaceAllString(s, "<time>")
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
