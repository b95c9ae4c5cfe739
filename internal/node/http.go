package node

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/flowlb/flowlb/internal/agent"
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

// StatusHandler serves the kernel's status as JSON (the agent's /status,
// which `flowlb agent dump` reads).
func StatusHandler(status func() agent.KernelStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status())
	})
}
