package apimetrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/server/store"
)

// Levels of the statistics series: one per listener and one per member
// (the most), one per listener, one per load balancer (its listeners
// summed), or none, for clouds whose load balancers are too many for one
// series each.
const (
	StatsMember       = "member"
	StatsListener     = "listener"
	StatsLoadBalancer = "loadbalancer"
	StatsNone         = "none"
)

// StatsLister lists every listener's statistics (store.Stats.AllStats).
type StatsLister func(ctx context.Context) ([]store.ListenerCounts, error)

// MemberStatsLister lists every member's statistics
// (store.Stats.AllMemberStats).
type MemberStatsLister func(ctx context.Context) ([]store.MemberCounts, error)

// RegisterStats exports Octavia's statistics, summed over the nodes, at
// level: flowlb_listener_* with loadbalancer and listener labels, or
// flowlb_loadbalancer_* with a loadbalancer label; at member level, the
// listeners' and flowlb_member_* with loadbalancer and member labels.
func RegisterStats(reg prometheus.Registerer, level string, list StatsLister, members MemberStatsLister) error {
	switch level {
	case StatsNone:
		return nil
	case StatsMember:
		if err := reg.Register(newMemberCollector(members)); err != nil {
			return err
		}
		level = StatsListener
	case StatsListener, StatsLoadBalancer:
	default:
		return fmt.Errorf("statistics metrics %q: want %s, %s, %s or %s", level, StatsMember, StatsListener, StatsLoadBalancer, StatsNone)
	}
	labels := []string{"loadbalancer"}
	if level == StatsListener {
		labels = append(labels, "listener")
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("flowlb_"+level+"_"+name, help, labels, nil)
	}
	c := &statsCollector{list: list, level: level,
		bytesIn:  d("bytes_in_total", "IP bytes from clients, summed over the nodes."),
		bytesOut: d("bytes_out_total", "IP bytes to clients, summed over the nodes."),
		conns:    d("connections_total", "Connections admitted, summed over the nodes."),
		errors:   d("request_errors_total", "Connection attempts refused (no member, allowed_cidrs, connection limit)."),
		active:   d("active_connections", "Connections open now, as the nodes last reported."),
	}
	return reg.Register(c)
}

type statsCollector struct {
	list                                     StatsLister
	level                                    string
	bytesIn, bytesOut, conns, errors, active *prometheus.Desc
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytesIn, c.bytesOut, c.conns, c.errors, c.active} {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := c.list(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.conns, err)
		return
	}
	for _, s := range aggregate(all, c.level) {
		labels := []string{s.LoadBalancerID}
		if c.level == StatsListener {
			labels = append(labels, s.ListenerID)
		}
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
		counter(c.bytesIn, s.BytesIn)
		counter(c.bytesOut, s.BytesOut)
		counter(c.conns, s.TotalConnections)
		counter(c.errors, s.RequestErrors)
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(s.ActiveConnections), labels...)
	}
}

// aggregate sums listeners by load balancer at that level (their
// listener ids then empty), in order of first appearance.
func aggregate(all []store.ListenerCounts, level string) []store.ListenerCounts {
	if level != StatsLoadBalancer {
		return all
	}
	idx := map[string]int{}
	var out []store.ListenerCounts
	for _, s := range all {
		i, ok := idx[s.LoadBalancerID]
		if !ok {
			i = len(out)
			idx[s.LoadBalancerID] = i
			out = append(out, store.ListenerCounts{LoadBalancerID: s.LoadBalancerID})
		}
		o := &out[i].Counts
		o.BytesIn += s.BytesIn
		o.BytesOut += s.BytesOut
		o.TotalConnections += s.TotalConnections
		o.RequestErrors += s.RequestErrors
		o.ActiveConnections += s.ActiveConnections
	}
	return out
}

// memberCollector exports each member's counters.
type memberCollector struct {
	list                    MemberStatsLister
	bytesIn, bytesOut, conn *prometheus.Desc
}

func newMemberCollector(list MemberStatsLister) *memberCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("flowlb_member_"+name, help, []string{"loadbalancer", "member"}, nil)
	}
	return &memberCollector{list: list,
		bytesIn:  d("bytes_in_total", "IP bytes from clients to the member, summed over the nodes."),
		bytesOut: d("bytes_out_total", "IP bytes from the member to clients, summed over the nodes."),
		conn:     d("connections_total", "Connections sent to the member, summed over the nodes."),
	}
}

func (c *memberCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytesIn, c.bytesOut, c.conn} {
		ch <- d
	}
}

func (c *memberCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := c.list(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.conn, err)
		return
	}
	for _, m := range all {
		for d, v := range map[*prometheus.Desc]int64{c.bytesIn: m.BytesIn, c.bytesOut: m.BytesOut, c.conn: m.TotalConnections} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), m.LoadBalancerID, m.MemberID)
		}
	}
}
