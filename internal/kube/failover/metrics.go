package failover

import "github.com/prometheus/client_golang/prometheus"

// The metric names carry no prefix of their own: the user registers them
// through prometheus.WrapRegistererWithPrefix (the kube-controller as
// flowlb_kube_controller_api_endpoint_*).
type metrics struct {
	endpoint *prometheus.GaugeVec
	switches prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		endpoint: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "api_endpoint_info",
			Help: "1 for the API endpoint (replica) in use."}, []string{"endpoint"}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{Name: "api_endpoint_switches_total",
			Help: "Moves to another API endpoint after the one in use failed."}),
	}
	if reg != nil {
		reg.MustRegister(m.endpoint, m.switches)
	}
	return m
}

func (m *metrics) inUse(endpoint string) {
	m.endpoint.Reset()
	m.endpoint.WithLabelValues(endpoint).Set(1)
}

func (m *metrics) switched(to string) {
	m.switches.Inc()
	m.inUse(to)
}
