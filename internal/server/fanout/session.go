package fanout

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
)

// Subscribe serves one agent: what it missed since the revision it last
// programmed, then every batch of the log as the tail applies it.
func (h *Hub) Subscribe(stream agentv1.Agent_SubscribeServer) error {
	who, err := h.authenticate(stream.Context())
	if err != nil {
		h.m.authFailures.Inc()
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || hello.GetNode() == "" {
		return status.Error(codes.InvalidArgument, "the first message must be a Hello with a node name")
	}
	if who != "" && hello.GetNode() != who {
		h.m.authFailures.Inc()
		return status.Errorf(codes.PermissionDenied, "node %q may not subscribe as %q", who, hello.GetNode())
	}
	a := h.attach(hello)
	defer h.detach(a)
	errc := make(chan error, 1)
	go func() { errc <- h.receive(stream, a) }()
	for {
		select {
		case u := <-a.send:
			if err := stream.Send(u); err != nil {
				return err
			}
		case err := <-errc:
			return err
		case <-a.gone:
			return status.Error(codes.ResourceExhausted, "agent fell behind; reconnect to catch up")
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// attach registers a new agent with what it needs to catch up.
func (h *Hub) attach(hello *agentv1.Hello) *agent {
	a := newAgent(hello.GetNode(), sendQueue)
	a.noProbes = hello.GetNoProbes()
	acked, sent, size := h.served.join(a, hello.GetEpoch(), hello.GetLastRevision())
	h.m.caughtUp(sent, size)
	h.acks.join(a, acked)
	h.journal.acked(a.node, acked, time.Now())
	// The newcomer takes over the members of its node (and its share of
	// the rest); it always gets its list, empty or not.
	h.probes.reassign(a.node)
	if h.l2 != nil {
		h.l2.reassign(a.node)
	}
	h.m.agents.Set(float64(h.streams.count()))
	h.log.Info("agent connected", "node", a.node, "last_revision", hello.GetLastRevision(), "revision", h.served.revision(), "no_probes", a.noProbes)
	return a
}

// detach forgets an agent that left; its members go to the others at
// once.
func (h *Hub) detach(a *agent) {
	left := h.streams.remove(a)
	if h.acks.part(a) {
		h.journal.forgetKernel(a.node)
	}
	h.probes.reassign("")
	if h.l2 != nil {
		h.l2.reassign("")
	}
	h.m.agents.Set(float64(left))
	h.log.Info("agent disconnected", "node", a.node)
}

// receive reads an agent's acks, kernel status, health and statistics
// reports until its stream ends; a report waits for room in its queue
// only as long as the stream lasts.
func (h *Hub) receive(stream agentv1.Agent_SubscribeServer, a *agent) error {
	ctx := stream.Context()
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if ack := m.GetAck(); ack != nil {
			now := time.Now()
			before, acked := h.acks.raise(a, ack.GetRevision())
			if t, ok := h.taken.firstAfter(before, acked); ok {
				h.m.programmed.Observe(now.Sub(t).Seconds())
			}
			h.journal.acked(a.node, acked, now)
		}
		if ks := m.GetKernel(); ks != nil {
			h.journal.kernelReport(a.node, kernelStatusOf(ks, time.Now()))
			if ks.GetRefusal() != "" {
				h.log.Warn("a node's kernel refuses its agent's writes", "node", a.node, "since", time.UnixMilli(ks.GetRefusingSinceUnixMs()), "err", ks.GetRefusal())
			}
		}
		if an := m.GetAnnounce(); an != nil {
			h.journal.announceReport(a.node, announcementsOf(an, time.Now()))
		}
		if hr := m.GetHealth(); hr != nil {
			if err := h.report(ctx, a.node, hr); err != nil {
				return err
			}
		}
		if sr := m.GetStats(); sr != nil {
			if err := h.reportStats(ctx, a.node, sr); err != nil {
				return err
			}
		}
	}
}
