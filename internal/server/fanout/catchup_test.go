package fanout_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/node/agent"
	"github.com/flowlb/flowlb/internal/server/fanout"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// An agent whose replica dies resumes on another: it is sent nothing
// when it is up to date, and the catch-ups are counted by kind, also on
// /metrics. Its first subscription, with no revision, was a snapshot.
func TestReconnectUpToDateIsSentNothing(t *testing.T) {
	w := newWorld(memstore.New(), tree("a", "198.19.0.1", "198.18.17.2"))
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var hubs []*fanout.Hub
	var addrs []string
	var stops []func()
	for i, id := range []string{"r1", "r2"} {
		h, addr, stop := serveWith(t, w, id, 5*time.Second, regs[i])
		hubs, addrs, stops = append(hubs, h), append(addrs, addr), append(stops, stop)
	}
	rec := &recorder{}
	a := agent.New(agent.Config{Servers: addrs, Token: token, Node: "n1"}, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	rev := hubs[0].Revision()
	on := -1
	testutil.Eventually(t, 5*time.Second, "n1 connected and at the table's revision", func() (bool, string) {
		for i, h := range hubs {
			if got, ok := h.Agents()["n1"]; ok && got == rev {
				on = i
				return true, ""
			}
		}
		return false, ""
	})
	if got := hubs[on].CatchUps(); got != (fanout.CatchUps{Snapshots: 1, Services: 1}) {
		t.Fatalf("first subscription: %+v, want one snapshot of 1 service", got)
	}
	stops[on]()
	other := 1 - on
	testutil.Eventually(t, 10*time.Second, "n1 resumed on the other replica", func() (bool, string) {
		got, ok := hubs[other].Agents()["n1"]
		return ok && got == rev, ""
	})
	if got := hubs[other].CatchUps(); got != (fanout.CatchUps{UpToDate: 1}) {
		t.Errorf("resuming up to date: %+v, want nothing sent", got)
	}
	mfs, err := regs[other].Gather()
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "flowlb_fanout_catchups_total" {
			for _, m := range mf.GetMetric() {
				byKind[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if byKind["none"] != 1 || byKind["entries"] != 0 || byKind["snapshot"] != 0 {
		t.Errorf("flowlb_fanout_catchups_total by kind: %v, want none 1", byKind)
	}
}
