package fanout

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/server/store"
)

// metrics are the hub's, on the server's /metrics.
type metrics struct {
	timeouts        prometheus.Counter
	agents          prometheus.Gauge
	lagRevisions    prometheus.Gauge
	lagSeconds      prometheus.Gauge
	realized        prometheus.Histogram
	programmed      prometheus.Histogram
	healthResults   *prometheus.CounterVec
	statsErrors     prometheus.Counter
	healthReaction  prometheus.Histogram
	authFailures    prometheus.Counter
	identities      *prometheus.CounterVec
	bindingRefusals *prometheus.CounterVec
	keyConflicts    prometheus.Counter
	keyMoves        prometheus.Counter
	trees           *prometheus.CounterVec
	// catchUps count the agents that subscribed by what they were sent
	// (caughtUp), catchUpSize the load balancers of the entries' and the
	// services of the snapshots'.
	catchUps    [snapshot + 1]atomic.Uint64
	catchUpSize [snapshot + 1]atomic.Uint64
	h           *Hub
}

// catchUpKinds name the caughtUp values in the metrics.
var catchUpKinds = [snapshot + 1]string{upToDate: "none", entries: "entries", snapshot: "snapshot"}

// caughtUp counts an agent that subscribed and what it was sent.
func (m *metrics) caughtUp(sent caughtUp, size int) {
	m.catchUps[sent].Add(1)
	m.catchUpSize[sent].Add(uint64(size))
}

func newMetrics(h *Hub, reg prometheus.Registerer) *metrics {
	m := &metrics{h: h,
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_fanout_ack_timeouts_total", Help: "Changes completed without every agent's ack."}),
		agents:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_fanout_agents", Help: "Agents connected to this replica."}),
		lagRevisions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_fanout_log_lag_revisions",
			Help: "Revisions of the change log this replica's fan-out has not applied yet (at the last poll)."}),
		lagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_fanout_log_lag_seconds",
			Help: "From the writing of the newest entry applied to its application."}),
		realized: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_fanout_realize_seconds",
			Help:    "From a change handed to the fan-out to every live agent of the cluster having programmed it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		programmed: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_fanout_agent_program_seconds",
			Help:    "From this replica's table taking a revision to an agent of this replica acknowledging it programmed (per ack, the oldest revision it newly covers).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		healthResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_health_transitions_total",
			Help: "Member health transitions reported by the agents, by new status."}, []string{"status"}),
		healthReaction: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_health_reaction_seconds",
			Help:    "From an agent's health verdict to every agent having programmed the resulting flow change.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		statsErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_fanout_stats_errors_total",
			Help: "Agents' statistics reports that could not be recorded (their counts are lost)."}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_fanout_agent_auth_failures_total",
			Help: "Agent calls refused: no or another node's identity, bad bootstrap token."}),
		identities: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_fanout_identities_issued_total",
			Help: "Node identities issued, by kind (enrollment with the bootstrap token, renewal)."}, []string{"kind"}),
		bindingRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_fanout_identity_refusals_total",
			Help: "Node identities refused because the name is bound to another: by kind, enrollment (the bootstrap token asked for a name whose identity is valid) or renewal (by an identity the name is no longer bound to)."}, []string{"kind"}),
		keyConflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_fanout_key_conflicts_total",
			Help: "Claims of a VIP, protocol and port that a senior load balancer holds: the claimant's service is not programmed (each counted when it starts to lose)."}),
		trees: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_fanout_trees_total",
			Help: "Load balancer trees the tail compiled, by where it took them: as the write on this replica handed it over (write) or read from the store (store)."}, []string{"from"}),
		keyMoves: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_fanout_key_owner_changes_total",
			Help: "Contested VIPs, protocols and ports that changed hands: taken by a senior claimant, or handed to a waiting one when the holder let go."}),
	}
	if reg != nil {
		reg.MustRegister(m.timeouts, m.agents, m.lagRevisions, m.lagSeconds, m.realized, m.programmed, m.healthResults, m.healthReaction, m.statsErrors,
			m.authFailures, m.identities, m.bindingRefusals, m.keyConflicts, m.keyMoves, m.trees,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flowlb_fanout_acks_pending", Help: "Changes waiting for the agents' acks."}, func() float64 {
				return float64(h.acks.pending())
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flowlb_fanout_cluster_agents", Help: "Agents connected to any live replica."}, func() float64 {
				return float64(len(h.acks.revisions()))
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flowlb_fanout_key_conflicts",
				Help: "Services not programmed now because a senior load balancer holds their VIP, protocol and port."}, func() float64 {
				return float64(h.served.waitingClaims())
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flowlb_fanout_revision", Help: "The log revision this replica's flow table holds."}, func() float64 {
				return float64(h.Revision())
			}),
			catchUpCollector{m: m, count: prometheus.NewDesc("flowlb_fanout_catchups_total",
				"Agents that subscribed, by what they were sent to catch up: none (they held this replica's revision or more), entries (the load balancers changed since their revision) or snapshot (the whole table).",
				[]string{"kind"}, nil), size: prometheus.NewDesc("flowlb_fanout_catchup_size_total",
				"What the catch-ups held, by kind: load balancers (entries), services (snapshot).", []string{"kind"}, nil)},
			lagCollector{h: h, desc: prometheus.NewDesc("flowlb_fanout_agent_lag_revisions",
				"Revisions each agent of this replica has not acknowledged yet, by node.", []string{"node"}, nil)},
			memberCollector{p: h.probes, desc: prometheus.NewDesc("flowlb_health_members", "Monitored members by health verdict.", []string{"status"}, nil)})
	}
	return m
}

// tailed records the application of a batch ending with entry e.
func (m *metrics) tailed(e store.LogEntry) {
	m.lagSeconds.Set(max(0, time.Since(e.At).Seconds()))
}

// observeHead measures how far the log's head is ahead of the table.
func (m *metrics) observeHead(ctx context.Context) {
	if _, head, err := m.h.st.LogBounds(ctx); err == nil {
		m.lagRevisions.Set(float64(max(0, head-m.h.Revision())))
	}
}

// catchUpCollector exports the catch-up counts.
type catchUpCollector struct {
	m           *metrics
	count, size *prometheus.Desc
}

func (c catchUpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.count; ch <- c.size }

func (c catchUpCollector) Collect(ch chan<- prometheus.Metric) {
	for k, name := range catchUpKinds {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.CounterValue, float64(c.m.catchUps[k].Load()), name)
		if k != int(upToDate) {
			ch <- prometheus.MustNewConstMetric(c.size, prometheus.CounterValue, float64(c.m.catchUpSize[k].Load()), name)
		}
	}
}

// CatchUps counts what this replica sent the agents that subscribed to
// catch up, since it started.
type CatchUps struct {
	// UpToDate were sent nothing: they held the table's revision or more.
	UpToDate uint64
	// Entries were sent the services of the load balancers changed since
	// their revision, LoadBalancers of them in all.
	Entries, LoadBalancers uint64
	// Snapshots were sent the whole table, Services in all.
	Snapshots, Services uint64
}

// CatchUps returns what this replica sent the agents that subscribed.
func (h *Hub) CatchUps() CatchUps {
	m := h.m
	return CatchUps{UpToDate: m.catchUps[upToDate].Load(),
		Entries: m.catchUps[entries].Load(), LoadBalancers: m.catchUpSize[entries].Load(),
		Snapshots: m.catchUps[snapshot].Load(), Services: m.catchUpSize[snapshot].Load()}
}
