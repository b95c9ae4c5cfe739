package agent

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// KernelStatus is how the node's kernel stands against the flows the
// agent was sent: the agent's /status, which `flowlb agent dump` shows,
// and, in short, the server's dashboard.
type KernelStatus struct {
	Received   int64 `json:"received_revision"`
	Programmed int64 `json:"programmed_revision"`
	// Behind says why the kernel does not hold what was received (Ready's
	// error); empty when it does.
	Behind string `json:"behind,omitempty"`
	// The kernel refuses writes: since when, how many, the last error.
	Refusing        bool      `json:"refusing"`
	RefusingSince   time.Time `json:"refusing_since,omitzero"`
	RefusedAttempts int       `json:"refused_attempts,omitempty"`
	LastRefusal     string    `json:"last_refusal,omitempty"`
	// Totals since the agent started.
	Refusals uint64            `json:"refusals"`
	Repairs  map[string]uint64 `json:"repairs"`
	// The last repair of another's change, and the last check.
	LastRepair     time.Time `json:"last_repair,omitzero"`
	LastRepairWhat string    `json:"last_repair_what,omitempty"`
	LastVerified   time.Time `json:"last_verified,omitzero"`
	LastScope      string    `json:"last_verify_scope,omitempty"`
	VerifyInterval string    `json:"verify_interval"`
}

// KernelStatus reports the kernel's state.
func (a *Agent) KernelStatus() KernelStatus {
	_, recv := a.received()
	a.stMu.Lock()
	s := KernelStatus{Received: recv, Programmed: a.ks.rev, Refusing: a.ks.refusing, Refusals: a.ks.refusals,
		Repairs: maps.Clone(a.ks.repaired), LastRepair: a.ks.lastRepair, LastRepairWhat: a.ks.lastRepairWhat,
		LastVerified: a.ks.lastVerified, LastScope: a.ks.lastScope, VerifyInterval: "off"}
	if a.ks.refusing {
		s.RefusingSince, s.RefusedAttempts = a.ks.since, a.ks.attempts
		if a.ks.lastErr != nil {
			s.LastRefusal = a.ks.lastErr.Error()
		}
	}
	a.stMu.Unlock()
	if every := a.verifyInterval(); every > 0 {
		s.VerifyInterval = every.String()
	}
	if err := a.Ready(); err != nil {
		s.Behind = err.Error()
	}
	return s
}

// Write renders the status for `flowlb agent dump`, one line each: the
// revisions and whether the kernel holds them, the refusals, the last
// check and the repairs.
func (s KernelStatus) Write(w io.Writer) {
	switch {
	case s.Behind == "":
		fmt.Fprintf(w, "kernel: holds revision %d, the newest received\n", s.Programmed)
	default:
		fmt.Fprintf(w, "kernel: BEHIND: %s\n", s.Behind)
	}
	if s.Refusing {
		fmt.Fprintf(w, "kernel: refuses the agent's writes since %s (%d attempts, retried with backoff): %s\n",
			s.RefusingSince.Format(time.RFC3339), s.RefusedAttempts, s.LastRefusal)
	}
	checked := "never yet"
	if !s.LastVerified.IsZero() {
		checked = s.LastVerified.Format(time.RFC3339)
		if s.LastScope != "" {
			checked += " (" + s.LastScope + ")"
		}
	}
	fmt.Fprintf(w, "kernel: last checked %s, every %s; %d writes refused since the agent started\n", checked, s.VerifyInterval, s.Refusals)
	var kinds []string
	total := uint64(0)
	for _, k := range slices.Sorted(maps.Keys(s.Repairs)) {
		if n := s.Repairs[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			total += n
		}
	}
	if total == 0 {
		fmt.Fprintln(w, "kernel: nothing repaired: no other process changed flowlb's tables or maps")
		return
	}
	fmt.Fprintf(w, "kernel: %d repaired (%s), the last at %s: %s\n", total, strings.Join(kinds, ", "), s.LastRepair.Format(time.RFC3339), s.LastRepairWhat)
}
