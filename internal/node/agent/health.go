package agent

import (
	"context"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/health"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// forwardHealth sends probe transitions on the live session. One that
// finds no session is dropped: at the next session the server's view
// comes with the probes, and the runner reports what differs.
func (a *Agent) forwardHealth(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case tr := <-a.transitions:
			a.sendMu.Lock()
			s := a.stream
			a.sendMu.Unlock()
			if s == nil {
				continue
			}
			msg := &agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Health{Health: &agentv1.HealthReport{Results: []*agentv1.MemberHealth{{
				MemberId: tr.MemberID, Status: tr.Status, Reason: tr.Reason, AtUnixMs: tr.At.UnixMilli()}}}}}
			if err := a.send(s, msg); err != nil {
				a.log.Warn("health report not sent", "member", tr.MemberID, "status", tr.Status, "err", err)
			}
			a.log.Info("member health", "member", tr.MemberID, "status", tr.Status, "reason", tr.Reason)
		}
	}
}

// checks turns the server's probe list into the runner's checks; a probe
// without a usable address is left out.
func checks(ps []flows.Probe) []health.Check {
	out := make([]health.Check, 0, len(ps))
	for _, p := range ps {
		if p.Address.IsValid() {
			out = append(out, check(p))
		}
	}
	return out
}

// check is one probe as the runner takes it. An IPv4-mapped address is
// probed as IPv4.
func check(p flows.Probe) health.Check {
	return health.Check{
		MemberID: p.MemberID,
		Target: health.Target{Address: p.Address.Unmap(), Port: p.Port, Type: string(p.Type), Timeout: p.Timeout,
			Method: p.HTTPMethod, Path: p.URLPath, ExpectedCodes: p.ExpectedCodes, HTTPVersion: p.HTTPVersion, DomainName: p.DomainName},
		Delay:          p.Delay,
		MaxRetries:     p.MaxRetries,
		MaxRetriesDown: p.MaxRetriesDown,
		Initial:        p.InitialStatus,
	}
}
