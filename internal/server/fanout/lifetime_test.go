package fanout

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

type noTrees struct{}

func (noTrees) Trees(context.Context) ([]*lbaas.Tree, error) { return nil, nil }
func (noTrees) TreesByID(context.Context, []string) (map[string]*lbaas.Tree, error) {
	return map[string]*lbaas.Tree{}, nil
}

func quietHub(t *testing.T) *Hub {
	t.Helper()
	h, err := NewHub(context.Background(), memstore.New(), noTrees{}, Options{Replica: "r1", AckTimeout: time.Second,
		Poll: 20 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// running reports the goroutines whose stack names fn.
func running(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), fn)
}

// Run ends every loop of the hub, the health and statistics loops among
// them (before, those ran from the first SetHealthSink and
// SetStatsSink for the life of the process: one each per server start).
func TestRunEndsEveryLoop(t *testing.T) {
	before := running("fanout.(*Hub).healthLoop") + running("fanout.(*Hub).statsLoop")
	h := quietHub(t)
	h.SetHealthSink(func(context.Context, string, string) (string, int64, error) { return "", 0, nil })
	h.SetStatsSink(func(context.Context, string, []store.ListenerCounts, time.Duration) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
	testutil.Eventually(t, 5*time.Second, "the health and statistics loops run", func() (bool, string) {
		n := running("fanout.(*Hub).healthLoop") + running("fanout.(*Hub).statsLoop") - before
		return n == 2, ""
	})
	cancel()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if n := running("fanout.(*Hub).healthLoop") + running("fanout.(*Hub).statsLoop") - before; n != 0 {
		t.Fatalf("%d of the hub's loops outlive Run", n)
	}
}

// A stream's receiver that finds the health or statistics queue full
// waits for room only while its stream lasts (before, it waited for
// ever, holding its stream's goroutine after the stream ended).
func TestReportsWaitOnlyWhileTheStreamLasts(t *testing.T) {
	h := quietHub(t)
	h.verdicts = newVerdicts(1)
	h.stats = newStatsReports(1)
	h.SetHealthSink(func(context.Context, string, string) (string, int64, error) { return "", 0, nil })
	h.SetStatsSink(func(context.Context, string, []store.ListenerCounts, time.Duration) error { return nil })
	h.probes.set(map[string][]flows.Probe{"lb": {testProbe("m1", "n1")}})
	h.probes.nodes = func() []string { return []string{"n1"} }
	h.probes.reassign("")
	// No loop runs: the queues fill.
	verdict := &agentv1.HealthReport{Results: []*agentv1.MemberHealth{{MemberId: "m1", Status: lbaas.OpError}}}
	for name, report := range map[string]func(context.Context) error{
		"health": func(ctx context.Context) error { return h.report(ctx, "n1", verdict) },
		"stats":  func(ctx context.Context) error { return h.reportStats(ctx, "n1", &agentv1.StatsReport{}) },
	} {
		if err := report(context.Background()); err != nil {
			t.Fatalf("%s: the first report: %v", name, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan error, 1)
		go func() { returned <- report(ctx) }()
		select {
		case err := <-returned:
			t.Fatalf("%s: a report into a full queue returned at once: %v", name, err)
		case <-time.After(50 * time.Millisecond):
		}
		cancel()
		select {
		case err := <-returned:
			if err == nil {
				t.Fatalf("%s: no error from a report its stream's end cut short", name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the report waits on after its stream ended", name)
		}
	}
}

// At the end of Run, the statistics still queued are recorded (counts
// are deltas: one dropped is lost); the health verdicts are not, their
// agents report them again.
func TestStopDrainsStatsNotVerdicts(t *testing.T) {
	h := quietHub(t)
	var verdicts, reports int
	h.SetHealthSink(func(context.Context, string, string) (string, int64, error) { verdicts++; return "", 0, nil })
	h.SetStatsSink(func(context.Context, string, []store.ListenerCounts, time.Duration) error { reports++; return nil })
	for range 3 {
		h.verdicts.q <- healthEvent{member: "m1", status: lbaas.Online}
		h.stats.q <- statsEvent{node: "n1"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.healthLoop(ctx)
	h.statsLoop(ctx)
	if reports != 3 {
		t.Errorf("%d of 3 queued statistics reports recorded at the end", reports)
	}
	if verdicts != 0 {
		t.Errorf("%d of 3 queued verdicts recorded after the end", verdicts)
	}
}
