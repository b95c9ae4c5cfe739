package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
)

// program takes u, translated as the stream translates it, into the
// desired state and runs one round of the reconciler: nil means the
// kernel holds it.
func (a *Agent) program(ctx context.Context, u *agentv1.Update) error {
	a.desire(ctx, flowpb.UpdateFromProto(u))
	return a.kernelRound(ctx, false)
}

// TestKernelStatusWrite: what `flowlb agent dump` prints of the agent's
// status.
func TestKernelStatusWrite(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		s    KernelStatus
		want string
	}{
		{"in step, never repaired", KernelStatus{Received: 7, Programmed: 7, LastVerified: at, LastScope: "generation", VerifyInterval: "10s", Repairs: map[string]uint64{"table": 0}},
			"kernel: holds revision 7, the newest received\n" +
				"kernel: last checked 2026-11-29T08:00:00Z (generation), every 10s; 0 writes refused since the agent started\n" +
				"kernel: nothing repaired: no other process changed flowlb's tables or maps\n"},
		{"refusing, repaired", KernelStatus{Received: 9, Programmed: 7, Behind: "revision 9 received, 7 programmed", Refusing: true, RefusingSince: at,
			RefusedAttempts: 3, LastRefusal: "operation not permitted", Refusals: 5, VerifyInterval: "off",
			Repairs: map[string]uint64{"table": 2, "element": 1}, LastRepair: at, LastRepairWhat: "ip flowlb: table rebuilt (table missing)"},
			"kernel: BEHIND: revision 9 received, 7 programmed\n" +
				"kernel: refuses the agent's writes since 2026-11-29T08:00:00Z (3 attempts, retried with backoff): operation not permitted\n" +
				"kernel: last checked never yet, every off; 5 writes refused since the agent started\n" +
				"kernel: 3 repaired (element 1, table 2), the last at 2026-11-29T08:00:00Z: ip flowlb: table rebuilt (table missing)\n"},
	} {
		var b strings.Builder
		tc.s.Write(&b)
		if b.String() != tc.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tc.name, b.String(), tc.want)
		}
	}
}

// TestBackoff: the wait after refusals doubles from kernelMinBackoff to
// kernelMaxBackoff, each drawn from half to one and a half times its step.
func TestBackoff(t *testing.T) {
	var steps []time.Duration
	b := time.Duration(0)
	for range 8 {
		b = nextBackoff(b)
		steps = append(steps, b)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 50 * time.Millisecond}, {0.5, 100 * time.Millisecond}, {0.999, 149900 * time.Microsecond}} {
		if got := jitter(100*time.Millisecond, tc.r); got != tc.want {
			t.Errorf("jitter(100ms, %v) = %s, want %s", tc.r, got, tc.want)
		}
	}
}
