package l2

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	vipsDesc = prometheus.NewDesc("flowlb_agent_l2_vips",
		"External VIPs this node answers ARP (ipv4) or neighbour discovery (ipv6) for (--l2-interface).", []string{"family"}, nil)
	announcementsDesc = prometheus.NewDesc("flowlb_agent_l2_announcements_total",
		"Gratuitous ARPs (ipv4) and unsolicited neighbour advertisements (ipv6) sent, one per VIP taken.", []string{"family"}, nil)
	repliesDesc = prometheus.NewDesc("flowlb_agent_l2_replies_total",
		"ARP replies (ipv4) and solicited neighbour advertisements (ipv6) sent for the VIPs answered.", []string{"family"}, nil)
)

// Collector is the responder's metrics, read from its state at each
// scrape.
func (r *Responder) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Responder }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- vipsDesc
	ch <- announcementsDesc
	ch <- repliesDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range metricsOf(c.r.State()) {
		ch <- m
	}
}

// metricsOf is a state's metrics: both families always, so that a
// family's series exists at zero.
func metricsOf(st State) []prometheus.Metric {
	var v4, v6 float64
	for v := range st.Owned {
		if v.Is4() {
			v4++
		} else {
			v6++
		}
	}
	c := st.Counts
	return []prometheus.Metric{
		prometheus.MustNewConstMetric(vipsDesc, prometheus.GaugeValue, v4, "ipv4"),
		prometheus.MustNewConstMetric(vipsDesc, prometheus.GaugeValue, v6, "ipv6"),
		prometheus.MustNewConstMetric(announcementsDesc, prometheus.CounterValue, float64(c.GratuitousARP), "ipv4"),
		prometheus.MustNewConstMetric(announcementsDesc, prometheus.CounterValue, float64(c.UnsolicitedNA), "ipv6"),
		prometheus.MustNewConstMetric(repliesDesc, prometheus.CounterValue, float64(c.ARPReplies), "ipv4"),
		prometheus.MustNewConstMetric(repliesDesc, prometheus.CounterValue, float64(c.NDPReplies), "ipv6"),
	}
}
