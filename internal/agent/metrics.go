package agent

import "github.com/prometheus/client_golang/prometheus"

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
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_program_errors_total", Help: "Updates the kernel refused."}),
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
	reg.MustRegister(m.connected, m.server, m.switches, m.received, m.programmed, m.services, m.syncSeconds, m.errors, m.statsErrors, m.statsRead, m.statsWait)
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
