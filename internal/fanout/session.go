package fanout

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
)

// sendQueue bounds the updates queued for one agent; one that falls
// further behind is cut off and catches up when it reconnects. Every
// agent's queue is allocated whole (8 bytes a slot): 1,024 slots are
// 8 KiB an agent, and more than a second of the tail's updates at full
// churn (each update is a batch of up to tailBatch entries).
const sendQueue = 1024

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
	go h.receive(stream, a, errc)
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
	a := &agent{node: hello.GetNode(), send: make(chan *agentv1.Update, sendQueue), gone: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if u := h.catchUp(hello.GetEpoch(), hello.GetLastRevision()); u != nil {
		a.send <- u
	}
	if hello.GetEpoch() == h.epoch {
		// What it programmed holds at least up to the revision it
		// names, or up to this replica's, if this one lags behind.
		a.acked = min(hello.GetLastRevision(), h.rev)
	}
	h.acks.join(a)
	h.journal.acked(a.node, a.acked, time.Now())
	// The newcomer takes over the members of its node (and its share of
	// the rest); it always gets its list, empty or not.
	touched := h.reassign()
	touched[a.node] = true
	h.sendProbes(touched)
	h.m.agents.Set(float64(len(h.acks.local)))
	h.log.Info("agent connected", "node", a.node, "last_revision", hello.GetLastRevision(), "revision", h.rev)
	return a
}

// detach forgets an agent that left; its members go to the others at
// once.
func (h *Hub) detach(a *agent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.acks.part(a) {
		delete(h.journal.kernel, a.node)
	}
	h.sendProbes(h.reassign())
	h.settleReady()
	h.m.agents.Set(float64(len(h.acks.local)))
	h.log.Info("agent disconnected", "node", a.node)
}

// receive reads an agent's acks, kernel status, health and statistics
// reports until its stream ends.
func (h *Hub) receive(stream agentv1.Agent_SubscribeServer, a *agent, errc chan<- error) {
	for {
		m, err := stream.Recv()
		if err != nil {
			errc <- err
			return
		}
		if ack := m.GetAck(); ack != nil {
			h.mu.Lock()
			before, now := a.acked, time.Now()
			h.acks.raise(a, ack.GetRevision())
			if t, ok := h.taken.firstAfter(before, a.acked); ok {
				h.m.programmed.Observe(now.Sub(t).Seconds())
			}
			h.journal.acked(a.node, a.acked, now)
			h.settleReady()
			h.mu.Unlock()
		}
		if ks := m.GetKernel(); ks != nil {
			h.mu.Lock()
			h.journal.kernelReport(a.node, kernelStatusOf(ks, time.Now()))
			h.mu.Unlock()
			if ks.GetRefusal() != "" {
				h.log.Warn("a node's kernel refuses its agent's writes", "node", a.node, "since", time.UnixMilli(ks.GetRefusingSinceUnixMs()), "err", ks.GetRefusal())
			}
		}
		if hr := m.GetHealth(); hr != nil {
			h.report(a.node, hr)
		}
		if sr := m.GetStats(); sr != nil {
			h.stats(a.node, sr)
		}
	}
}
