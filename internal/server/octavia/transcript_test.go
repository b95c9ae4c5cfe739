package octavia

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/provider/flow"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/testutil/transcript"
)

// TestTranscripts replays the API conversations in testdata/transcripts
// (see package transcript) against a fresh server whose changes wait for
// the "release" command. They were recorded before the typed-request
// refactoring and pin the API's behaviour, byte for byte.
func TestTranscripts(t *testing.T) {
	transcript.Run(t, "testdata/transcripts/*.txtar", func(t *testing.T) transcript.Server {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		held := &heldRealizer{}
		svc, err := lbaas.New(memstore.New(), &fakeVIPs{}, []lbaas.Provider{flow.New(held), acceptAll{held}},
			lbaas.Config{DefaultProvider: flow.Name}, log)
		if err != nil {
			t.Fatal(err)
		}
		pol := identity.Policy{Personas: identity.Advanced}
		api := New(svc, nil, log, Config{})
		return transcript.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c := identity.Caller{ProjectID: r.Header.Get("X-Test-Project"), Roles: strings.Fields(r.Header.Get("X-Test-Roles"))}
				api.ServeHTTP(w, r.WithContext(identity.WithCaller(r.Context(), pol.Resolve(c))))
			}),
			Commands: map[string]transcript.Command{"release": func(*testing.T, []string) { held.release() }},
		}
	})
}

// acceptAll is a provider that serves everything, so that transcripts can
// reach the rules the flow provider refuses first (L7, TLS, HTTP).
type acceptAll struct{ held *heldRealizer }

func (acceptAll) Name() string            { return "accept" }
func (acceptAll) Description() string     { return "accepts every option (tests)" }
func (acceptAll) Check(*lbaas.Tree) error { return nil }
func (p acceptAll) Realize(id string, change int64, done func(error)) {
	p.held.Realize(id, change, done)
}
func (acceptAll) AZCapabilities() []lbaas.Capability { return nil }
func (acceptAll) CheckFlavor(map[string]any) error   { return nil }
func (acceptAll) CheckAZ(map[string]any) error       { return nil }
func (acceptAll) FlavorCapabilities() []lbaas.Capability {
	return []lbaas.Capability{{Name: "size", Description: "a test capability"}}
}
