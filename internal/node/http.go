package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/announce"
	"github.com/flowlb/flowlb/internal/node/l2"
)

// ReadyHandler serves ready: 200 "ok" when it returns nil, else 503 with
// the reason (the agent's /readyz).
func ReadyHandler(ready func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// Status is the agent's /status: how the kernel stands against the
// flows (its fields at the top level), what the node announces, and
// what it answers ARP and neighbour discovery for.
type Status struct {
	agent.KernelStatus
	// Announcements and L2 are absent from an agent older than them.
	Announcements *announce.Status `json:"announcements,omitempty"`
	L2            *l2.Status       `json:"l2,omitempty"`
}

// Write renders the status for `flowlb agent dump`: the kernel, the
// announcements, then L2.
func (s Status) Write(w io.Writer) {
	s.KernelStatus.Write(w)
	if s.Announcements != nil {
		s.Announcements.Write(w)
	}
	if s.L2 != nil {
		s.L2.Write(w)
	}
}

// StatusHandler serves the status as JSON (the agent's /status, which
// `flowlb agent dump` reads).
func StatusHandler(status func() Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status())
	})
}
