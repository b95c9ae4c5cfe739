package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/agentgrpc"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/pki"
)

// session runs one subscription to addr: connect and say hello within
// nextHandshakeWait, then receive in the background while the updates are
// taken into the desired state in batches, and send what the reconciler
// has for the server (acknowledgements, the kernel's status), until the
// stream fails. The kernel refusing a write does not end it. It was
// useful if the server took the hello and sent an update or kept the
// stream for UsefulAfter.
func (a *Agent) session(ctx context.Context, addr string) (bool, error) {
	if id := a.cfg.Identity; id != nil && !id.usable(a.cfg.Node, time.Now()) {
		// On a connection of its own: the stream's must present the
		// identity from its handshake on.
		if err := a.renew(ctx, addr); err != nil {
			return false, fmt.Errorf("server %s: %w", addr, err)
		}
		a.log.Info("enrolled: the node has its identity", "server", addr, "expires", id.current().Leaf.NotAfter)
	}
	conn, err := a.dial(addr)
	if err != nil {
		return false, fmt.Errorf("server %s: %w", addr, err)
	}
	defer conn.Close()
	if a.cfg.Identity == nil {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.cfg.Token)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, hello, err := a.handshake(ctx, cancel, conn)
	if err != nil {
		return false, fmt.Errorf("server %s: %w", addr, err)
	}
	start := time.Now()
	a.attach(stream, addr)
	defer a.detach()
	if a.cfg.Identity != nil {
		go a.renewLoop(ctx, addr)
	}
	var received atomic.Bool
	updates, recvErr := a.receive(ctx, stream, &received)
	err = a.programLoop(ctx, stream, updates, recvErr, told{epoch: hello.GetEpoch(), acked: hello.GetLastRevision()})
	useful := received.Load() || time.Since(start) >= UsefulAfter
	return useful, fmt.Errorf("server %s: %w", addr, err)
}

const (
	serverPing        = 10 * time.Second
	serverPingTimeout = 3 * time.Second
)

// dial prepares the connection to one server address (gRPC connects
// lazily, on the first call; the address is resolved already).
func (a *Agent) dial(addr string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if a.cfg.Identity != nil {
		creds = a.cfg.Identity.credentials()
	}
	opts := append(agentgrpc.DialOptions(), grpc.WithTransportCredentials(creds),
		// A replica that vanished without closing the stream (cut off,
		// frozen) is noticed within serverPing+serverPingTimeout; gRPC
		// allows no faster pings, and the server permits these.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: serverPing, Timeout: serverPingTimeout, PermitWithoutStream: true}))
	if a.cfg.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(a.cfg.Dialer))
	}
	return grpc.NewClient("passthrough:///"+addr, opts...)
}

// renewLoop renews the node's identity through the session's replica when
// it is due, until the session ends. The stream goes on on the old
// certificate; each renewal opens a connection of its own, which presents
// the current identity (the stream's connection was authenticated with an
// older one, which may have expired since).
func (a *Agent) renewLoop(ctx context.Context, addr string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.renewCheck()):
		}
		id := a.cfg.Identity
		if !id.due(time.Now()) {
			continue
		}
		err := a.renew(ctx, addr)
		if err != nil {
			a.m.renewErrors.Inc()
			a.log.Warn("renewing the node's identity", "server", addr, "err", err)
			continue
		}
		a.m.renewals.Inc()
		a.log.Info("renewed the node's identity", "server", addr, "expires", id.current().Leaf.NotAfter)
	}
}

// renewCheck is how long to wait before looking again whether the
// identity is due: RenewCheck (a minute by default), and a tenth of the
// identity's lifetime if that is shorter, so that short-lived identities
// are renewed in time.
func (a *Agent) renewCheck() time.Duration {
	every := a.cfg.RenewCheck
	if every == 0 {
		every = time.Minute
	}
	if c := a.cfg.Identity.current(); c != nil && c.Leaf != nil {
		every = min(every, max(pki.Lifetime(c.Leaf)/10, 100*time.Millisecond))
	}
	return every
}

// renew enrolls, or enrolls again, through a new connection to addr.
func (a *Agent) renew(ctx context.Context, addr string) error {
	conn, err := a.dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	return a.cfg.Identity.enroll(ctx, conn, a.cfg.Node, a.cfg.Token)
}

// handshake opens the stream and says hello, or gives up after
// nextHandshakeWait (cancel ends the stream's context).
func (a *Agent) handshake(ctx context.Context, cancel context.CancelFunc, conn *grpc.ClientConn) (agentv1.Agent_SubscribeClient, *agentv1.Hello, error) {
	wait := a.nextHandshakeWait()
	timer := time.AfterFunc(wait, cancel)
	stream, hello, err := a.hello(ctx, conn)
	if !timer.Stop() {
		a.handshakeWait.Store(int64(min(2*wait, MaxHandshake)))
		return nil, nil, fmt.Errorf("no answer within %s", wait)
	}
	return stream, hello, err
}

// nextHandshakeWait is how long the next handshake may take:
// HandshakeTimeout, or longer after handshakes that got no answer in
// time since the last useful session (round.go, MaxHandshake).
func (a *Agent) nextHandshakeWait() time.Duration {
	if w := time.Duration(a.handshakeWait.Load()); w > 0 {
		return w
	}
	return HandshakeTimeout
}

// hello opens the stream and names this node and the revision its kernel
// holds, so that the server sends only what it lacks.
func (a *Agent) hello(ctx context.Context, conn *grpc.ClientConn) (agentv1.Agent_SubscribeClient, *agentv1.Hello, error) {
	stream, err := agentv1.NewAgentClient(conn).Subscribe(ctx)
	if err != nil {
		return nil, nil, err
	}
	epoch, rev := a.Revision()
	hello := &agentv1.Hello{Node: a.cfg.Node, LastRevision: rev, Epoch: epoch, NoProbes: a.cfg.NoProbes}
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		return nil, nil, err
	}
	return stream, hello, nil
}

// attach makes stream, to the server at addr, the live session, on
// which health reports go.
func (a *Agent) attach(stream agentv1.Agent_SubscribeClient, addr string) {
	a.m.connected.Set(1)
	a.m.server.Reset()
	a.m.server.WithLabelValues(addr).Set(1)
	if a.lastServer != "" && a.lastServer != addr {
		a.m.switches.Inc()
	}
	a.lastServer = addr
	a.sessions.Add(1)
	a.sendMu.Lock()
	a.stream, a.server = stream, addr
	a.sendMu.Unlock()
}

// detach ends the live session.
func (a *Agent) detach() {
	a.l2Lease()
	a.m.connected.Set(0)
	a.m.server.Reset()
	a.sendMu.Lock()
	a.stream, a.server = nil, ""
	a.sendMu.Unlock()
}

// Sessions counts the streams opened so far.
func (a *Agent) Sessions() int64 { return a.sessions.Load() }

// Server is the address of the live session's server ("" between
// sessions).
func (a *Agent) Server() string {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	return a.server
}

// receive reads the stream in the background, so that the receiver never
// waits for the kernel: each update is translated into flow values here,
// once, and queues on the first channel, to be merged while a change is
// being programmed. The second gets the error that ends
// the stream. received turns true with the first update.
func (a *Agent) receive(ctx context.Context, stream agentv1.Agent_SubscribeClient, received *atomic.Bool) (<-chan flows.Update, <-chan error) {
	updates := make(chan flows.Update, 1024)
	recvErr := make(chan error, 1)
	go func() {
		for {
			u, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			a.m.received.Set(float64(u.GetRevision()))
			a.noteReceived(u.GetEpoch(), u.GetRevision())
			received.Store(true)
			select {
			case updates <- flowpb.UpdateFromProto(u):
			case <-ctx.Done():
				return
			}
		}
	}()
	return updates, recvErr
}

// told is what one session has told the server: the epoch of its
// revisions (the hello's, then the updates'), the revision acknowledged
// (the hello's counts), and the kernel's status sent (its news).
type told struct {
	epoch  string
	acked  int64
	news   uint64
	status bool
	// announced is the node's announcements as last sent (nil: not yet).
	announced *agentv1.AnnounceStatus
}

// programLoop takes the queued updates into the desired state in merged
// batches, and sends what the reconciler has for the server: an Ack for
// each revision the kernel reaches, and the kernel's status at the start
// and when it changes.
func (a *Agent) programLoop(ctx context.Context, stream agentv1.Agent_SubscribeClient, updates <-chan flows.Update, recvErr <-chan error, t told) error {
	var look <-chan time.Time // when to look at the announcements again
	if a.cfg.Announced != nil {
		every := a.cfg.AnnounceInterval
		if every <= 0 {
			every = DefaultAnnounceInterval
		}
		tk := time.NewTicker(every)
		defer tk.Stop()
		look = tk.C
	}
	for {
		if err := a.sendNews(stream, &t); err != nil {
			return err
		}
		batch, err := a.nextBatch(ctx, updates, recvErr, look)
		if err != nil {
			return err
		}
		if len(batch) > 0 {
			u := merge(batch)
			t.epoch = u.Epoch
			a.desire(ctx, u)
		}
	}
}

// nextBatch waits for an update, then for MinInterval since the last
// one taken, and returns it with every update queued meanwhile; or
// returns nothing when the reconciler has news to send. The end of ctx
// ends the wait: the receiver may have stopped on it with an update in
// hand, leaving neither an update nor an error to come.
func (a *Agent) nextBatch(ctx context.Context, updates <-chan flows.Update, recvErr <-chan error, look <-chan time.Time) ([]flows.Update, error) {
	var batch []flows.Update
	select {
	case u := <-updates:
		batch = append(batch, u)
	case <-a.news:
		return nil, nil
	case <-look:
		return nil, nil
	case err := <-recvErr:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if wait := a.cfg.MinInterval - time.Since(a.lastSync); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for {
		select {
		case u := <-updates:
			batch = append(batch, u)
		default:
			return batch, nil
		}
	}
}

// sendNews acknowledges the revision the kernel holds, if it is newer
// than the last acknowledged and of the session's epoch, and sends the
// kernel's status if it changed.
func (a *Agent) sendNews(stream agentv1.Agent_SubscribeClient, t *told) error {
	epoch, rev := a.Revision()
	if epoch == t.epoch && rev > t.acked {
		if err := a.send(stream, &agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Ack{Ack: &agentv1.Ack{Revision: rev}}}); err != nil {
			return err
		}
		t.acked = rev
	}
	if msg, news := a.statusMessage(); !t.status || news != t.news {
		if err := a.send(stream, msg); err != nil {
			return err
		}
		t.status, t.news = true, news
	}
	if a.cfg.Announced != nil {
		if an := a.cfg.Announced(); an != nil && (t.announced == nil || !proto.Equal(an, t.announced)) {
			if err := a.send(stream, &agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Announce{Announce: an}}); err != nil {
				return err
			}
			t.announced = an
		}
	}
	return nil
}
