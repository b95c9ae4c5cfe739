package agent

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/flowlb/flowlb/internal/node/dataplane/nftables"
	"github.com/flowlb/flowlb/internal/node/dataplane/nftables/nftfake"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// observations counts what a histogram observed.
func observations(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// kernelHolds reports whether the data plane's kernel holds a service of
// vip with n backends.
func kernelHolds(dp *nftables.Dataplane, vip string, n int) (bool, string) {
	got := fmt.Sprint(dp.Dump())
	for _, d := range dp.Dump() {
		if d.Key.VIP.String() == vip && len(d.Slots) == n {
			return true, got
		}
	}
	return false, got
}

// TestRefusedWriteRetried: a kernel that refuses the agent's writes (the
// in-memory kernel told to) does not end the session: the agent retries
// with backoff on the same stream, says why it is not ready, acknowledges
// nothing the kernel does not hold, and once the kernel takes writes
// again the change lands and is acknowledged, on the same session.
func TestRefusedWriteRetried(t *testing.T) {
	conn := nftfake.New()
	dp, err := nftables.NewWithConn(conn, "n1")
	if err != nil {
		t.Fatal(err)
	}
	log := newChangeLog("db-1")
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1", "198.18.17.2")))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, log, ln)
	reg := prometheus.NewRegistry()
	a := New(Config{Servers: []string{r.addr}, Node: "n1", NoHealth: true, Metrics: reg}, dp, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	acked := func(rev int64) func() (bool, string) {
		return func() (bool, string) {
			acks := r.acked()
			return slices.Contains(acks, rev), fmt.Sprint(acks)
		}
	}
	testutil.Eventually(t, 5*time.Second, "revision 1 acknowledged", acked(1))
	if ok, got := kernelHolds(dp, "198.19.0.1", 1); !ok {
		t.Fatalf("revision 1 acknowledged, kernel holds %s", got)
	}

	conn.FailFraction(1, 1) // every transaction refused
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1", "198.18.17.2", "198.18.17.3")))
	testutil.Eventually(t, 5*time.Second, "three refusals", func() (bool, string) {
		_, refused := conn.Flushes()
		return refused >= 3, fmt.Sprint(refused, " refused")
	})
	if acks := r.acked(); slices.Contains(acks, 2) {
		t.Fatalf("revision 2 acknowledged while the kernel refuses it: acks %v", acks)
	}
	if err := a.Ready(); err == nil || !strings.Contains(err.Error(), "refuses") || !strings.Contains(err.Error(), nftfake.ErrInjected.Error()) {
		t.Errorf("Ready while the kernel refuses: %v", err)
	}
	if ok, got := kernelHolds(dp, "198.19.0.1", 1); !ok {
		t.Errorf("kernel after refused writes: %s", got)
	}

	conn.FailFraction(0, 1)
	testutil.Eventually(t, 10*time.Second, "revision 2 acknowledged once the kernel takes it", acked(2))
	if ok, got := kernelHolds(dp, "198.19.0.1", 2); !ok {
		t.Errorf("revision 2 acknowledged, kernel holds %s", got)
	}
	if n := a.Sessions(); n != 1 {
		t.Errorf("%d sessions: the refusals ended the stream", n)
	}
	if err := a.Ready(); err != nil {
		t.Errorf("not ready once the kernel took the change: %v", err)
	}
	if refused, retries := promtest.ToFloat64(a.m.errors), promtest.ToFloat64(a.m.retries); refused < 3 || retries < refused {
		t.Errorf("%v refusals and %v retries counted, want at least 3 and as many retries", refused, retries)
	}
}

// TestAgentRepairsFakeKernel: the periodic check repairs what another
// process removed from the (in-memory) kernel, counts it under its kind
// with the time from detection to repair, and records when it last
// checked; the agent stays ready and acknowledges on.
func TestAgentRepairsFakeKernel(t *testing.T) {
	conn := nftfake.New()
	dp, err := nftables.NewWithConn(conn, "n1")
	if err != nil {
		t.Fatal(err)
	}
	log := newChangeLog("db-1")
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1", "198.18.17.2", "198.18.17.3")))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, log, ln)
	a := New(Config{Servers: []string{r.addr}, Node: "n1", NoHealth: true, Metrics: prometheus.NewRegistry(), VerifyInterval: 50 * time.Millisecond}, dp, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 5*time.Second, "revision 1 in the kernel", func() (bool, string) { return kernelHolds(dp, "198.19.0.1", 2) })
	testutil.Eventually(t, 5*time.Second, "a check", func() (bool, string) {
		return promtest.ToFloat64(a.m.lastVerified) > 0, ""
	})

	// Another process deletes the table.
	tab, err := conn.ListTableOfFamily("flowlb", 2 /* ip */)
	if err != nil {
		t.Fatal(err)
	}
	conn.DelTable(tab)
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the table repaired", func() (bool, string) {
		n := promtest.ToFloat64(a.m.repairs.WithLabelValues("table"))
		return n == 1, fmt.Sprint(n, " table repairs")
	})
	if ok, got := kernelHolds(dp, "198.19.0.1", 2); !ok {
		t.Errorf("kernel after the repair: %s", got)
	}
	if n := observations(t, a.m.repairSeconds); n != 1 {
		t.Errorf("repair time histogram: %d observations, want 1", n)
	}
	st := a.KernelStatus()
	if st.Repairs["table"] != 1 || !strings.Contains(st.LastRepairWhat, "table rebuilt") || st.Behind != "" {
		t.Errorf("status after the repair: %+v", st)
	}
	log.publish(wireLB("a", lbSvc("a", "198.19.0.1", "198.18.17.2")))
	testutil.Eventually(t, 5*time.Second, "revision 2 acknowledged", func() (bool, string) {
		return slices.Contains(r.acked(), 2), fmt.Sprint(r.acked())
	})
}
