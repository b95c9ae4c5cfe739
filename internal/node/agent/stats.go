package agent

import (
	"context"
	"net/netip"
	"slices"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// StatsReader is a data plane that counts: each read returns what the
// kernel counted since the previous one, and on an error what it read
// before it (nftables.Dataplane).
type StatsReader interface {
	ReadStats() (map[flows.Key]flows.Stats, error)
}

// pendingStats is what the agent counted for one service and has not
// reported yet, with the owners to report it under (its load balancer,
// listener and members: the backends' ids, addresses and ports).
type pendingStats struct {
	service flows.Service
	flows.Stats
}

// mergeStats adds a read to what is pending. Counters add up (the
// kernel zeroed what it returned, so they are the agent's to deliver);
// open connections are the latest read's, none for a service the read
// did not mention. A service no longer programmed keeps the owners it
// had; one never seen with owners is dropped (nothing to report it
// under). A backend keeps the member it had when it has left the
// service, so that what it counted before is reported under it.
func mergeStats(pending map[flows.Key]pendingStats, read map[flows.Key]flows.Stats, programmed map[flows.Key]flows.Service) map[flows.Key]pendingStats {
	out := make(map[flows.Key]pendingStats, len(pending)+len(read))
	for k, p := range pending {
		p.Active = 0
		out[k] = p
	}
	for k, st := range read {
		p, had := out[k]
		if s, ok := programmed[k]; ok {
			p.service = flows.Service{Key: k, LoadBalancerID: s.LoadBalancerID, ListenerID: s.ListenerID,
				Backends: memberOwners(backendsOf(s), p.service.Backends)}
		} else if !had {
			continue
		}
		p.Counters = p.Counters.Add(st.Counters)
		p.Members = flows.AddMembers(p.Members, st.Members)
		p.Active = st.Active
		out[k] = p
	}
	for k, p := range out {
		if p.IsZero() {
			delete(out, k)
		}
	}
	return out
}

// backendsOf are the members a service may send connections or requests
// to: its backends, and those of every pool of its L7 configuration.
func backendsOf(s flows.Service) []flows.Backend {
	if s.L7 == nil {
		return s.Backends
	}
	out := slices.Clone(s.Backends)
	for _, p := range s.L7.Pools {
		out = append(out, p.Backends...)
	}
	return out
}

// memberOwners are the members (id, address, port) of the backends now
// programmed, then those of before whose address and port left.
func memberOwners(now, before []flows.Backend) []flows.Backend {
	var out []flows.Backend
	seen := map[netip.AddrPort]bool{}
	for _, bs := range [][]flows.Backend{now, before} {
		for _, b := range bs {
			ap := netip.AddrPortFrom(b.Address, b.Port)
			if !seen[ap] {
				seen[ap] = true
				out = append(out, flows.Backend{MemberID: b.MemberID, Address: b.Address, Port: b.Port})
			}
		}
	}
	return out
}

// statsReport encodes what is pending.
func statsReport(pending map[flows.Key]pendingStats, interval time.Duration) *agentv1.AgentMessage {
	r := &agentv1.StatsReport{IntervalMs: interval.Milliseconds()}
	for _, p := range pending {
		r.Services = append(r.Services, flowpb.StatsToProto(p.service, p.Stats))
	}
	return &agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Stats{Stats: r}}
}

// statsReadShare bounds the share of the agent's time that reading
// counters may take: the kernel dumps each counter set whole and resumes
// every message of a dump by walking the set from its start, so a read
// grows faster than the table (0.3 CPU s at 1,000 services × 10 backends,
// 1.6 s at 3,000: BenchmarkReadStats), and a read holds the agent's lock,
// which programming waits for.
const statsReadShare = 20

// statsWait is the time until the next read after one that took read:
// the configured interval, or statsReadShare reads' time if longer. The
// counters are deltas read and zeroed, so a longer wait loses nothing;
// the report says how long it covers.
func statsWait(interval, read time.Duration) time.Duration {
	return max(interval, statsReadShare*read)
}

// reportStats reads the kernel's counters every StatsInterval (or less
// often, statsWait) and sends them on the live session, every time even
// with nothing counted (so that the server sees open connections end).
// What it cannot send (no session, a failed send) is kept and added to
// the next report.
func (a *Agent) reportStats(ctx context.Context) {
	wait := a.cfg.StatsInterval
	pending := map[flows.Key]pendingStats{}
	for {
		a.m.statsWait.Set(wait.Seconds())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		// Under the kernel's lock: the data plane's record of what is
		// programmed must not change during the read. What a failed read
		// returns was zeroed in the kernel already: kept all the same.
		a.kmu.Lock()
		t0 := time.Now()
		read, err := a.cfg.Stats.ReadStats()
		took := time.Since(t0)
		// The services as the kernel holds them (the first data plane,
		// which every connection crosses): a member flattened into its
		// node port's endpoints is counted at their addresses.
		pending = mergeStats(pending, read, a.planes[0].held)
		a.kmu.Unlock()
		a.m.statsRead.Observe(took.Seconds())
		if next := statsWait(a.cfg.StatsInterval, took); next != wait {
			if next > a.cfg.StatsInterval || wait > a.cfg.StatsInterval {
				a.log.Info("counter reads spaced out to bound their cost", "read", took.Round(time.Millisecond), "next_in", next.Round(time.Millisecond))
			}
			wait = next
		}
		if err != nil {
			a.m.statsErrors.Inc()
			a.log.Warn("reading counters", "err", err)
			continue
		}
		a.sendMu.Lock()
		s := a.stream
		a.sendMu.Unlock()
		if s == nil {
			continue
		}
		if err := a.send(s, statsReport(pending, wait)); err != nil {
			a.log.Warn("statistics not sent; kept for the next report", "err", err)
			continue
		}
		pending = map[flows.Key]pendingStats{}
	}
}
