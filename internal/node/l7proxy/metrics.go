package l7proxy

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's own: what it answered, and what it holds.
type metrics struct {
	answers     *prometheus.CounterVec
	handoffs    prometheus.Counter
	connections atomic.Int64
	// counted are answers' counters by status class (0: other) and by
	// who answered (0: the proxy, 1: a member), made on first use.
	counted [6][2]atomic.Pointer[prometheus.Counter]
}

func newMetrics() *metrics {
	return &metrics{answers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_agent_l7_requests_total",
		Help: "Requests the node's L7 proxy answered, by status class (2xx, 3xx, 4xx, 5xx) and by who answered: a member, or the proxy itself (a policy's redirect or reject, no member, a member that failed)."},
		[]string{"class", "by"}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowlb_agent_l7_handoffs_total",
			Help: "Client connections the node's L7 proxy served with its net/http engine rather than its lean one: h2 agreed in a TLS handshake, a protocol upgrade, a PROXY or TLS pool, a request the lean engine does not parse."})}
}

// answered counts one answer.
func (m *metrics) answered(status int, byMember bool) {
	class := 0
	if status >= 100 && status < 600 {
		class = status / 100
	}
	by := 0
	if byMember {
		by = 1
	}
	// The counter of a class is looked up once: an answer is counted
	// without a label lookup or an allocation.
	slot := &m.counted[class][by]
	c := slot.Load()
	if c == nil {
		name := "other"
		if class > 0 {
			name = strconv.Itoa(class) + "xx"
		}
		counter := m.answers.WithLabelValues(name, [2]string{"proxy", "member"}[by])
		slot.Store(&counter)
		c = &counter
	}
	(*c).Inc()
}

// Collector is the proxy's metrics, for the agent's registry.
func (p *Proxy) Collector() prometheus.Collector { return (*collector)(p) }

type collector Proxy

var (
	connectionsDesc = prometheus.NewDesc("flowlb_agent_l7_connections", "Client connections open to the node's L7 proxy.", nil, nil)
	listenersDesc   = prometheus.NewDesc("flowlb_agent_l7_listeners", "L7 listeners (VIP and port each) the node's proxy serves.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.m.answers.Describe(ch)
	c.m.handoffs.Describe(ch)
	ch <- connectionsDesc
	ch <- listenersDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.m.answers.Collect(ch)
	c.m.handoffs.Collect(ch)
	ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(c.m.connections.Load()))
	ch <- prometheus.MustNewConstMetric(listenersDesc, prometheus.GaugeValue, float64(len(*c.routes.Load())))
}
