package neutron

import (
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/testutil/transcript"
)

// TestTranscripts replays the Neutron conversations in
// testdata/transcripts (see package transcript) against a fresh subset
// with the default VIP network. The callers are an admin (role admin) or
// a project's member (any other role).
func TestTranscripts(t *testing.T) {
	transcript.Run(t, "testdata/transcripts/*.txtar", func(t *testing.T) transcript.Server {
		st := memstore.New()
		// A fresh server process: the transcripts' ids repeat from run to
		// run (seeded), and so would the allocation hints of their subnets.
		processHints.m.Clear()
		if _, _, err := EnsureDefault(t.Context(), st, "flowlb-vip", "198.19.0.0/17"); err != nil {
			t.Fatal(err)
		}
		h := NewHandler(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
		return transcript.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := identity.Caller{ProjectID: r.Header.Get("X-Test-Project"), IsAdmin: r.Header.Get("X-Test-Roles") == "admin"}
			h.ServeHTTP(w, r.WithContext(identity.WithCaller(r.Context(), c)))
		})}
	})
}
