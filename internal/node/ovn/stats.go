package ovn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Counting on the chassis. ovn-controller realizes each VIP:port of a
// Load_Balancer row as an OpenFlow flow that matches the VIP's new
// connections (ct_state=+new+trk, nw_dst or ipv6_dst, tp_dst) and sends
// them to a select group with one bucket per backend, each bucket a
// ct(commit, nat(dst=backend)). Established packets never reach the
// group: the flow's n_packets and each bucket's packet_count count the
// first packets of the connections (a retransmitted SYN meets the
// connection's conntrack entry and is not new), per VIP:port and per
// backend. A group is shared by every VIP:port whose backends and
// hashing are the same, so its buckets are a member's counts only when
// one service alone uses it.
// The userspace conntrack keeps no byte counters, and the flows of
// established packets are per VIP and direction, not per backend: no
// bytes are counted.

// OpenFlowRunner runs an ovs-ofctl command on a bridge and returns its
// output.
type OpenFlowRunner func(ctx context.Context, args ...string) (string, error)

// OVSOfctl runs ovs-ofctl.
func OVSOfctl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ovs-ofctl", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return "", fmt.Errorf("ovs-ofctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("ovs-ofctl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// LBFlow is a flow that sends a VIP:port's new connections to a group.
type LBFlow struct {
	ID       string // table, priority and match: the flow's identity
	Dst      netip.Addr
	Protocol flows.Protocol
	Port     uint16
	Group    uint32
	Packets  uint64
	Duration time.Duration
}

// GroupStats are a group's counters, by bucket id.
type GroupStats struct {
	Duration time.Duration
	Buckets  map[uint32]uint64
}

var (
	reGroupID  = regexp.MustCompile(`group_id=(\d+)`)
	reBucketID = regexp.MustCompile(`^bucket_id:(\d+)`)
	reNAT      = regexp.MustCompile(`nat\(dst=([^)]*)\)`)
	reBucketPk = regexp.MustCompile(`bucket(\d+):packet_count=(\d+)`)
	reDuration = regexp.MustCompile(`duration=([0-9.]+)s`)
	reGroupAct = regexp.MustCompile(`(?:^|[,:])group:(\d+)(?:,|$)`)
	reNPackets = regexp.MustCompile(`n_packets=(\d+)`)
)

// flowProtocols are the protocols of an OpenFlow match, IPv4 and IPv6.
var flowProtocols = map[string]flows.Protocol{"tcp": flows.TCP, "udp": flows.UDP, "sctp": flows.SCTP,
	"tcp6": flows.TCP, "udp6": flows.UDP, "sctp6": flows.SCTP}

// ParseGroups reads `ovs-ofctl -O OpenFlow15 dump-groups`: each group's
// buckets that NAT to a backend, by bucket id. Groups that NAT nowhere
// (ECMP routes) are left out.
func ParseGroups(out string) map[uint32]map[uint32]netip.AddrPort {
	groups := map[uint32]map[uint32]netip.AddrPort{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		head, rest, ok := strings.Cut(line, ",bucket=")
		m := reGroupID.FindStringSubmatch(head)
		if !ok || m == nil || !strings.Contains(head, "type=select") {
			continue
		}
		id, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			continue
		}
		buckets := map[uint32]netip.AddrPort{}
		for _, b := range strings.Split(rest, ",bucket=") {
			bm, nm := reBucketID.FindStringSubmatch(b), reNAT.FindStringSubmatch(b)
			if bm == nil || nm == nil {
				continue
			}
			bid, err := strconv.ParseUint(bm[1], 10, 32)
			if err != nil {
				continue
			}
			ap, err := netip.ParseAddrPort(nm[1])
			if err != nil {
				continue // a backend without a port: not flowlb's
			}
			buckets[uint32(bid)] = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		if len(buckets) > 0 {
			groups[uint32(id)] = buckets
		}
	}
	return groups
}

// ParseGroupStats reads `ovs-ofctl -O OpenFlow15 dump-group-stats`.
func ParseGroupStats(out string) map[uint32]GroupStats {
	stats := map[uint32]GroupStats{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		m := reGroupID.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		id, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			continue
		}
		g := GroupStats{Duration: parseDuration(line), Buckets: map[uint32]uint64{}}
		for _, bm := range reBucketPk.FindAllStringSubmatch(line, -1) {
			b, err1 := strconv.ParseUint(bm[1], 10, 32)
			n, err2 := strconv.ParseUint(bm[2], 10, 64)
			if err1 == nil && err2 == nil {
				g.Buckets[uint32(b)] = n
			}
		}
		stats[uint32(id)] = g
	}
	return stats
}

// ParseLBFlows reads `ovs-ofctl -O OpenFlow15 dump-flows BRIDGE
// ct_state=+new+trk`: the flows that match new connections to one
// destination address and port and send them to a group.
func ParseLBFlows(out string) []LBFlow {
	var fs []LBFlow
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		stats, actions, ok := strings.Cut(line, " actions=")
		if !ok {
			continue
		}
		gm := reGroupAct.FindStringSubmatch(actions)
		if gm == nil {
			continue
		}
		group, err := strconv.ParseUint(gm[1], 10, 32)
		if err != nil {
			continue
		}
		f := LBFlow{Group: uint32(group), Duration: parseDuration(stats)}
		if m := reNPackets.FindStringSubmatch(stats); m != nil {
			f.Packets, _ = strconv.ParseUint(m[1], 10, 64)
		}
		var table, priority, match string
		for _, field := range strings.Split(stats, ", ") {
			if v, ok := strings.CutPrefix(field, "table="); ok {
				table = v
			}
			if v, ok := strings.CutPrefix(field, "priority="); ok {
				priority, match, _ = strings.Cut(v, ",")
			}
		}
		if !strings.Contains(match, "+new") {
			continue
		}
		for _, m := range strings.Split(match, ",") {
			k, v, _ := strings.Cut(m, "=")
			switch {
			case v == "" && flowProtocols[k] != "":
				f.Protocol = flowProtocols[k]
			case k == "nw_dst" || k == "ipv6_dst":
				if a, err := netip.ParseAddr(v); err == nil {
					f.Dst = a.Unmap()
				}
			case k == "tp_dst":
				if p, err := strconv.ParseUint(v, 10, 16); err == nil {
					f.Port = uint16(p)
				}
			}
		}
		if !f.Dst.IsValid() || f.Protocol == "" || f.Port == 0 {
			continue
		}
		f.ID = "table=" + table + ",priority=" + priority + "," + match
		fs = append(fs, f)
	}
	return fs
}

func parseDuration(s string) time.Duration {
	m := reDuration.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// counter is a cumulative counter as last read.
type counter struct {
	n   uint64
	age time.Duration
}

// delta is what a cumulative counter counted since it was last read: all
// of it if it is new since then, or was made again (younger than it was,
// or lower: a flow or group written again, ovs-vswitchd restarted), and
// nothing at the first read of a bridge (what it counted before the
// agent started is not known to be unreported).
func delta(prev map[string]counter, first bool, id string, n uint64, age time.Duration) uint64 {
	p, ok := prev[id]
	switch {
	case !ok && first:
		return 0
	case !ok, n < p.n, age < p.age:
		return n
	}
	return n - p.n
}

// BridgeCounts is one read of a bridge's load-balancing counters.
type BridgeCounts struct {
	Flows  []LBFlow
	Groups map[uint32]map[uint32]netip.AddrPort
	Stats  map[uint32]GroupStats
}

// Counter turns the cumulative counters of the chassis' bridges into
// the connections each service and member got since the last read.
type Counter struct {
	prev map[string]map[string]counter // by bridge
	// Unattributed counts the connections whose backend is known only
	// to a group several services share, or a service and a load
	// balancer not flowlb's (their members get none of it).
	Unattributed uint64
}

// NewCounter returns a Counter that has read no bridge.
func NewCounter() *Counter { return &Counter{prev: map[string]map[string]counter{}} }

// Add counts a bridge's read into out: connections by service (the
// addresses maps a flow's destination to its service: the VIP's own and
// its floating IPs'), and by backend when one service alone uses the
// group (no other service, and no load balancer that is not flowlb's).
func (c *Counter) Add(out map[flows.Key]flows.Stats, bridge string, r BridgeCounts, addrs map[flows.Key]flows.Key) {
	prev, seen := c.prev[bridge]
	first := !seen
	now := map[string]counter{}
	users := map[uint32]map[flows.Key]bool{}
	for _, f := range r.Flows {
		if users[f.Group] == nil {
			users[f.Group] = map[flows.Key]bool{}
		}
		// Another's load balancer (the zero key) may share the group.
		k, ok := addrs[flows.Key{VIP: f.Dst, Protocol: f.Protocol, Port: f.Port}]
		users[f.Group][k] = true
		if !ok {
			continue
		}
		id := "flow:" + f.ID
		n := delta(prev, first, id, f.Packets, f.Duration)
		now[id] = counter{f.Packets, f.Duration}
		if n > 0 {
			s := out[k]
			s.Connections += n
			out[k] = s
		}
	}
	for g, by := range users {
		st, ok := r.Stats[g]
		if !ok || (len(by) == 1 && by[flows.Key{}]) {
			continue // not flowlb's
		}
		var only flows.Key
		for k := range by {
			only = k
		}
		for b, ap := range r.Groups[g] {
			pk, ok := st.Buckets[b]
			if !ok {
				continue
			}
			id := fmt.Sprintf("group:%d:%d:%s", g, b, ap)
			n := delta(prev, first, id, pk, st.Duration)
			now[id] = counter{pk, st.Duration}
			if n == 0 {
				continue
			}
			if len(by) != 1 {
				c.Unattributed += n
				continue
			}
			s := out[only]
			if s.Members == nil {
				s.Members = map[netip.AddrPort]flows.Counters{}
			}
			m := s.Members[ap]
			m.Connections += n
			s.Members[ap] = m
			out[only] = s
		}
	}
	c.prev[bridge] = now
}

// ReadBridge reads a bridge's load-balancing flows, groups and group
// counters (four ovs-ofctl commands). The groups are read before and
// after the counters: one whose buckets changed between (ovn-controller
// reuses the id of a group it removed) is left out of this read, and
// counted whole at the next as a group new since.
func ReadBridge(ctx context.Context, run OpenFlowRunner, bridge string) (BridgeCounts, error) {
	var r BridgeCounts
	var out [4]string
	for i, cmd := range []string{"dump-groups", "dump-group-stats", "dump-flows", "dump-groups"} {
		args := []string{"-O", "OpenFlow15", cmd, bridge}
		if cmd == "dump-flows" {
			args = append(args, "ct_state=+new+trk")
		}
		var err error
		if out[i], err = run(ctx, args...); err != nil {
			return r, err
		}
	}
	before, after := ParseGroups(out[0]), ParseGroups(out[3])
	for g, b := range after {
		if !maps.Equal(b, before[g]) {
			delete(after, g)
		}
	}
	return BridgeCounts{Flows: ParseLBFlows(out[2]), Groups: after, Stats: ParseGroupStats(out[1])}, nil
}

// ChassisStats reads the counters of the chassis' integration bridges
// and counts them under the services the data plane wrote: an
// agent.StatsReader.
type ChassisStats struct {
	d       *Dataplane
	bridges []string
	run     OpenFlowRunner
	timeout time.Duration

	mu      sync.Mutex // guards counter
	counter *Counter
}

// Counting returns a reader of the counters of the bridges (ovs-ofctl
// targets: unix:/run/openvswitch/br-int.mgmt, tcp:IP:PORT) through run
// (OVSOfctl if nil).
func (d *Dataplane) Counting(bridges []string, run OpenFlowRunner) *ChassisStats {
	if run == nil {
		run = OVSOfctl
	}
	return &ChassisStats{d: d, bridges: bridges, run: run, timeout: d.timeout, counter: NewCounter()}
}

// Unattributed is the number of connections counted so far whose member
// is unknown: their group serves several services.
func (s *ChassisStats) Unattributed() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counter.Unattributed
}

// ReadStats returns the connections each service and member got since
// the previous read, summed over the bridges. A bridge that cannot be
// read is logged and counted at its next read (its counters are
// cumulative); the read fails only when no bridge could be read, so
// that a chassis out of reach does not hold back the others' counts.
func (s *ChassisStats) ReadStats() (map[flows.Key]flows.Stats, error) {
	addrs := s.d.addresses()
	out := map[flows.Key]flows.Stats{}
	var errs []error
	for _, b := range s.bridges {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		r, err := ReadBridge(ctx, s.run, b)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b, err))
			continue
		}
		s.mu.Lock()
		s.counter.Add(out, b, r, addrs)
		s.mu.Unlock()
	}
	if len(errs) == len(s.bridges) && len(errs) > 0 {
		return out, errors.Join(errs...)
	}
	for _, err := range errs {
		s.d.log.Warn("OVS counters not read; counted at the next read", "err", err)
	}
	return out, nil
}

// addresses maps the destinations of the chassis' flows to the services
// written: each VIP:port of a row, and its floating IPs' (WithFloatingIPs).
func (d *Dataplane) addresses() map[flows.Key]flows.Key {
	d.mu.Lock()
	defer d.mu.Unlock()
	return addressesOf(d.services, d.fips)
}

// addressesOf maps each VIP:port of the services OVN serves, and its
// floating IPs' unless another service holds that address as its VIP, to
// the service.
func addressesOf(services map[flows.Key]flows.Service, fips map[netip.Addr][]netip.Addr) map[flows.Key]flows.Key {
	out := map[flows.Key]flows.Key{}
	var served []flows.Key
	for k, s := range services {
		if _, ok := protocols[k.Protocol]; !s.OwnVIP || k.NodePort() || !ok {
			continue
		}
		served = append(served, k)
		out[flows.Key{VIP: k.VIP.Unmap(), Protocol: k.Protocol, Port: k.Port}] = k
	}
	for _, k := range served {
		for _, f := range fips[k.VIP.Unmap()] {
			fk := flows.Key{VIP: f, Protocol: k.Protocol, Port: k.Port}
			if _, taken := out[fk]; !taken {
				out[fk] = k
			}
		}
	}
	return out
}
