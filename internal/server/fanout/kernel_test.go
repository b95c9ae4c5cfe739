package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// refuser is a data plane that refuses writes while told to, and reports
// a repair at its next check when told to.
type refuser struct {
	recorder
	fmu      sync.Mutex
	refusing bool
	repair   bool
}

func (r *refuser) set(refusing, repair bool) {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	r.refusing, r.repair = refusing, repair
}

func (r *refuser) refuses() bool {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	return r.refusing
}

func (r *refuser) Sync(ctx context.Context, t flows.Table) error {
	if r.refuses() {
		return errors.New("the kernel says no")
	}
	return r.recorder.Sync(ctx, t)
}

func (r *refuser) Apply(ctx context.Context, ups []flows.Service, dels []flows.Key) error {
	if r.refuses() {
		return errors.New("the kernel says no")
	}
	return r.recorder.Apply(ctx, ups, dels)
}

func (r *refuser) Verify(context.Context) (dataplane.Check, error) {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	var c dataplane.Check
	if r.repair {
		c.Repair(dataplane.Table, 1, time.Now(), "ip flowlb: table rebuilt")
		r.repair = false
	}
	return c, nil
}

// TestKernelStatusReported: the hub keeps each of its nodes' kernel
// status as the agent reports it: a kernel refusing the agent's writes
// (with why and since when), taking them again, a repair; and forgets it
// when the node leaves.
func TestKernelStatusReported(t *testing.T) {
	w := newWorld(memstore.New(), tree("a", "198.19.0.1", "198.18.17.2"))
	hub, addr, _ := serve(t, w, "r1", 5*time.Second)
	dp := &refuser{}
	dp.set(true, false)
	a := agent.New(agent.Config{Server: addr, Token: token, Node: "n1", NoHealth: true, VerifyInterval: 50 * time.Millisecond},
		dp, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	status := func(want func(fanout.KernelStatus, bool) bool) func() (bool, string) {
		return func() (bool, string) {
			ks, ok := hub.KernelStatuses()["n1"]
			return want(ks, ok), fmt.Sprintf("%+v %v", ks, ok)
		}
	}
	testutil.Eventually(t, 5*time.Second, "the refusal reported", status(func(ks fanout.KernelStatus, ok bool) bool {
		return ok && strings.Contains(ks.Refusal, "the kernel says no") && !ks.RefusingSince.IsZero()
	}))
	// A change while the kernel refuses: not acknowledged.
	w.set(t, "b", tree("b", "198.19.0.2", "198.18.18.2"))
	testutil.Eventually(t, 5*time.Second, "the hub at the change", func() (bool, string) { return hub.Revision() > 0, "" })
	// (The hub is not told of each retry: the agent is asked.)
	testutil.Eventually(t, 5*time.Second, "the change received and retried", func() (bool, string) {
		ks := a.KernelStatus()
		return ks.Received == hub.Revision() && ks.RefusedAttempts >= 3, fmt.Sprintf("%+v", ks)
	})
	if agents := hub.Agents(); agents["n1"] >= hub.Revision() {
		t.Errorf("acknowledged %v while the kernel refuses, hub at %d", agents, hub.Revision())
	}
	dp.set(false, false)
	testutil.Eventually(t, 10*time.Second, "the refusal over", status(func(ks fanout.KernelStatus, ok bool) bool {
		return ok && ks.Refusal == "" && ks.RefusedAttempts == 0
	}))
	testutil.Eventually(t, 5*time.Second, "the change acknowledged", func() (bool, string) {
		return hub.Agents()["n1"] == hub.Revision(), fmt.Sprint(hub.Agents())
	})
	dp.set(false, true)
	testutil.Eventually(t, 5*time.Second, "the repair reported", status(func(ks fanout.KernelStatus, ok bool) bool {
		return ok && ks.Repairs == 1 && ks.LastRepairWhat == "ip flowlb: table rebuilt" && !ks.LastRepair.IsZero()
	}))
	if n := a.Sessions(); n != 1 {
		t.Errorf("%d sessions, want 1: the refusals ended the stream", n)
	}
	cancel()
	<-done
	testutil.Eventually(t, 5*time.Second, "the status forgotten with the node", status(func(_ fanout.KernelStatus, ok bool) bool { return !ok }))
}
