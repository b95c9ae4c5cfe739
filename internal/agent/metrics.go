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
}

// newMetrics registers the agent's metrics on reg (nil: unregistered).
// Revision lag is flowlb_agent_received_revision minus
// flowlb_agent_programmed_revision.
func newMetrics(reg prometheus.Registerer) *metrics {
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
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.server, m.switches, m.received, m.programmed, m.services, m.syncSeconds, m.errors)
	}
	return m
}
