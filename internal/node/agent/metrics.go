package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/node/dataplane"
)

type metrics struct {
	connected   prometheus.Gauge
	server      *prometheus.GaugeVec
	switches    prometheus.Counter
	received    prometheus.Gauge
	programmed  prometheus.Gauge
	services    prometheus.Gauge
	syncSeconds *prometheus.HistogramVec
	errors      prometheus.Counter
	renewals    prometheus.Counter
	renewErrors prometheus.Counter
	statsErrors prometheus.Counter
	statsRead   prometheus.Histogram
	statsWait   prometheus.Gauge
	// The reconciler's.
	retries       prometheus.Counter
	behind        prometheus.Gauge
	repairs       *prometheus.CounterVec
	repairSeconds prometheus.Histogram
	lastVerified  prometheus.Gauge
	verifications *prometheus.CounterVec
	verifySeconds prometheus.Histogram
}

// newMetrics registers the agent's metrics on reg (nil: unregistered).
// Revision lag is flowlb_agent_received_revision minus
// flowlb_agent_programmed_revision.
func newMetrics(reg prometheus.Registerer, id *Identity) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_connected", Help: "1 while the agent stream to the server is up."}),
		server: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flowlb_agent_server_info",
			Help: "1 for the server (address) of the live stream; no series between streams."}, []string{"server"}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_server_switches_total",
			Help: "Streams opened to another server than the previous stream's."}),
		received: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_received_revision", Help: "Newest revision received from the server."}),
		programmed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_programmed_revision",
			Help: "Newest revision programmed into the kernel and acknowledged."}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_services", Help: "Services (VIP, protocol, port) programmed."}),
		syncSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flowlb_agent_sync_duration_seconds",
			Help: "Time to program one (merged) update, by kind.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"kind"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_program_errors_total",
			Help: "Writes and repairs the kernel refused, each attempt (retried with backoff on the same stream)."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_program_retries_total",
			Help: "Attempts to write or repair again after the kernel refused."}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_kernel_refusing",
			Help: "1 while the kernel refuses the agent's writes or repairs (the kernel is behind; /readyz says why)."}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_agent_kernel_repairs_total",
			Help: "Objects another process removed or changed in the kernel and the agent wrote again, by kind: table, chain, set, element, ebpf_map, ebpf_attach."}, []string{"kind"}),
		repairSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_agent_kernel_repair_seconds",
			Help: "Time from the detection of another process's change (its notification, or the check that found it) to its repair.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		lastVerified: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_kernel_last_verified_timestamp_seconds",
			Help: "When the kernel was last checked against what the agent programmed, with nothing left to repair."}),
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_agent_kernel_verifications_total",
			Help: "Checks of the kernel, by what they read (docs/dataplane.md, The reconciler)."}, []string{"scope"}),
		verifySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_agent_kernel_verify_duration_seconds",
			Help: "Time of one check of the kernel, repairs included.", Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18)}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_identity_renewals_total",
			Help: "Times the node's TLS identity was renewed."}),
		renewErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_identity_renewal_errors_total",
			Help: "Renewals of the node's TLS identity that failed (retried)."}),
		statsRead: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowlb_agent_stats_read_duration_seconds",
			Help: "Time to read (and zero) the kernel's counters once.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		statsWait: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_stats_interval_seconds",
			Help: "Time until the next counter read: --stats-interval, or longer when a read costs more than a twentieth of it."}),
		statsErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_stats_read_errors_total",
			Help: "Reads of the kernel's counters that failed."}),
	}
	if reg == nil {
		return m
	}
	for _, kind := range dataplane.Kinds {
		m.repairs.WithLabelValues(kind) // every kind shows, from 0
	}
	reg.MustRegister(m.connected, m.server, m.switches, m.received, m.programmed, m.services, m.syncSeconds, m.errors, m.statsErrors, m.statsRead, m.statsWait,
		m.retries, m.behind, m.repairs, m.repairSeconds, m.lastVerified, m.verifications, m.verifySeconds)
	if id != nil {
		reg.MustRegister(m.renewals, m.renewErrors, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "flowlb_agent_identity_expiry_timestamp_seconds",
			Help: "When the node's TLS identity expires (0 before enrollment)."}, func() float64 {
			if c := id.current(); c != nil && c.Leaf != nil {
				return float64(c.Leaf.NotAfter.Unix())
			}
			return 0
		}))
	}
	return m
}
