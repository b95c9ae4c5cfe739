package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// Verifier is a data plane that checks the kernel against what it
// programmed and writes again what another process removed or changed
// (nftables.Dataplane, ebpf.Dataplane).
type Verifier interface {
	Verify(ctx context.Context) (dataplane.Check, error)
}

// Drifter is a Verifier that hears of other processes' changes (nftables
// notifications): its channel gets a value when one was heard, and the
// agent checks at once rather than at the next periodic check.
type Drifter interface {
	Drift() <-chan struct{}
}

// DefaultVerifyInterval is how often the kernel is checked when
// Config.VerifyInterval is 0.
const DefaultVerifyInterval = 10 * time.Second

// Backoff of the writes and repairs the kernel refuses: from
// kernelMinBackoff, doubling, to kernelMaxBackoff, each wait drawn from
// half to one and a half times the step.
const (
	kernelMinBackoff = 100 * time.Millisecond
	kernelMaxBackoff = 5 * time.Second
)

// nextBackoff is the backoff step after a refusal, from the previous one
// (0: none yet).
func nextBackoff(b time.Duration) time.Duration {
	if b == 0 {
		return kernelMinBackoff
	}
	return min(2*b, kernelMaxBackoff)
}

// jitter draws the wait for step b from [b/2, 3b/2), given r in [0, 1).
func jitter(b time.Duration, r float64) time.Duration {
	return b/2 + time.Duration(r*float64(b))
}

// reconcile makes the kernel hold what is desired, apart from the stream:
// it writes what changed when the desired state moves, checks the kernel
// (every VerifyInterval, when a data plane hears of another's change,
// and before each retry), repairs what others changed, and retries what
// the kernel refuses with a jittered, bounded backoff. The session stays
// up throughout; acknowledgements follow the kernel.
func (a *Agent) reconcile(ctx context.Context) {
	var tick <-chan time.Time
	if every := a.verifyInterval(); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	drift := a.driftOf(ctx)
	var retry <-chan time.Time
	var backoff time.Duration
	verify := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.want.changed:
		case <-drift:
			verify = true
		case <-tick:
			verify = true
		case <-retry:
			// A refusal may come from another's change in the way: check
			// before writing again.
			retry, verify = nil, true
		}
		if retry != nil {
			continue // backing off: the retry comes first
		}
		if err := a.kernelRound(ctx, verify); err != nil {
			backoff = nextBackoff(backoff)
			retry = time.After(jitter(backoff, rand.Float64()))
		} else {
			backoff = 0
		}
		verify = false
	}
}

// verifyInterval is Config.VerifyInterval, or its default.
func (a *Agent) verifyInterval() time.Duration {
	if a.cfg.VerifyInterval == 0 {
		return DefaultVerifyInterval
	}
	return a.cfg.VerifyInterval
}

// driftOf merges the data planes' drift channels into one (nil: none).
func (a *Agent) driftOf(ctx context.Context) <-chan struct{} {
	var chans []<-chan struct{}
	for _, v := range a.verifiers {
		if d, ok := v.(Drifter); ok && d.Drift() != nil {
			chans = append(chans, d.Drift())
		}
	}
	if len(chans) == 0 {
		return nil
	}
	out := make(chan struct{}, 1)
	for _, c := range chans {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-c:
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return out
}

// kernelRound checks the kernel if verify (or while the kernel refuses),
// then writes what is desired and not yet in it. The error is the
// kernel's refusal, if any; each is counted, and the episode it starts
// is logged once.
func (a *Agent) kernelRound(ctx context.Context, verify bool) error {
	a.kmu.Lock()
	defer a.kmu.Unlock()
	a.stMu.Lock()
	retrying := a.ks.refusing
	a.stMu.Unlock()
	if retrying {
		a.m.retries.Inc()
	}
	var errs []error
	if verify || retrying {
		if err := a.verifyKernel(ctx); err != nil {
			errs = append(errs, fmt.Errorf("repair: %w", err))
		}
	}
	_, _, version, _ := a.want.at()
	if a.forced() || version != a.kernelVersion() {
		// Written even if the check failed: what the repair could not
		// fix may not be in the way of the change.
		if err := a.write(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		a.refused(err)
	} else {
		a.accepted()
	}
	return err
}

// write takes what changed from the desired state and programs it into
// each data plane: the whole table (Sync) after a snapshot, or to a data
// plane that refused its last write, else the services that differ from
// what that data plane holds (Apply). Reaching a revision in every data
// plane acknowledges it; one that refuses is written whole next time,
// and the others, which took the change, only what changes after it.
func (a *Agent) write(ctx context.Context) error {
	w := a.want.take(a.forced())
	start := time.Now()
	kind := "delta"
	if w.replaced {
		kind = "snapshot"
	}
	// The whole table was made for this write: the first data plane
	// that takes it whole keeps it as its record, the others a copy.
	given := false
	whole := func() map[flows.Key]flows.Service {
		if given {
			return maps.Clone(w.services)
		}
		given = true
		return w.services
	}
	var errs []error
	for i, p := range a.planes {
		if err := p.write(ctx, w, whole); err != nil {
			// What it holds is uncertain now: its next write is whole,
			// and it takes it as it is.
			p.force = true
			errs = append(errs, fmt.Errorf("program revision %d (data plane %d of %d): %w", w.rev, i+1, len(a.planes), err))
		}
	}
	a.m.syncSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	a.stMu.Lock()
	a.ks.epoch, a.ks.rev, a.ks.version, a.ks.snapshot = w.epoch, w.rev, w.version, w.snapshot
	a.stMu.Unlock()
	a.m.programmed.Set(float64(w.rev))
	a.m.services.Set(float64(len(a.planes[0].held)))
	if a.cfg.OnProgrammed != nil {
		a.want.healthChecked(w.version, a.cfg.OnProgrammed)
	}
	a.tell()
	return nil
}

// forced reports whether some data plane's next write must be whole.
func (a *Agent) forced() bool {
	return slices.ContainsFunc(a.planes, func(p *plane) bool { return p.force })
}

// write programs w into the data plane: whole when a snapshot replaced
// the table or its last write was refused, else what differs from what
// it holds (w.services when w is whole for another data plane's sake,
// w.next otherwise). A whole write's record is whole(): w.services
// itself, or a copy when another data plane kept it.
func (p *plane) write(ctx context.Context, w work, whole func() map[flows.Key]flows.Service) error {
	if w.replaced || p.force {
		if err := p.dp.Sync(ctx, flows.Table{Revision: w.rev, Services: w.services}); err != nil {
			return err
		}
		p.held, p.force = whole(), false
		return nil
	}
	var c change
	if w.full {
		c = diffWhole(p.held, w.services)
	} else {
		c = diff(p.held, w.next)
	}
	if len(c.upserts)+len(c.deletes) > 0 {
		if err := p.dp.Apply(ctx, c.upserts, c.deletes); err != nil {
			return err
		}
	}
	for _, k := range c.deletes {
		delete(p.held, k)
	}
	for _, s := range c.upserts {
		p.held[s.Key] = s
	}
	return nil
}

// verifyKernel runs every data plane's check, and counts and logs what
// they repaired.
func (a *Agent) verifyKernel(ctx context.Context) error {
	start := time.Now()
	var check dataplane.Check
	var errs []error
	for _, v := range a.verifiers {
		c, err := v.Verify(ctx)
		check.Add(c)
		if err != nil {
			errs = append(errs, err)
		}
	}
	a.m.verifySeconds.Observe(time.Since(start).Seconds())
	if check.Scope != "" {
		a.m.verifications.WithLabelValues(check.Scope).Inc()
	}
	now := time.Now()
	if n := check.Repairs(); n > 0 {
		for _, kind := range slices.Sorted(maps.Keys(check.Repaired)) {
			a.m.repairs.WithLabelValues(kind).Add(float64(check.Repaired[kind]))
		}
		took := now.Sub(check.Detected)
		a.m.repairSeconds.Observe(took.Seconds())
		a.log.Warn("the kernel was changed by another process; repaired", "repaired", check.Repaired, "what", check.What, "detected_ago", took.Round(time.Millisecond))
		a.stMu.Lock()
		for kind, n := range check.Repaired {
			a.ks.repaired[kind] += uint64(n)
		}
		a.ks.lastRepair, a.ks.lastRepairWhat = now, joinWhat(check.What)
		a.ks.news++
		a.stMu.Unlock()
		a.tell()
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	a.stMu.Lock()
	a.ks.lastVerified, a.ks.lastScope = now, check.Scope
	a.stMu.Unlock()
	a.m.lastVerified.Set(float64(now.UnixNano()) / 1e9)
	return nil
}

// refused records a refusal: the first of an episode is logged, every one
// counted.
func (a *Agent) refused(err error) {
	a.m.errors.Inc()
	a.m.behind.Set(1)
	a.stMu.Lock()
	first := !a.ks.refusing
	if first {
		a.ks.refusing, a.ks.since, a.ks.attempts = true, time.Now(), 0
		a.ks.news++
	}
	a.ks.attempts++
	a.ks.refusals++
	a.ks.lastErr = err
	a.stMu.Unlock()
	if first {
		a.log.Warn("the kernel refuses the agent's writes; retrying with backoff, the stream stays up, and nothing is acknowledged until the kernel holds it", "err", err)
		a.tell()
	}
}

// accepted ends an episode of refusals.
func (a *Agent) accepted() {
	a.m.behind.Set(0)
	a.stMu.Lock()
	was, since, attempts := a.ks.refusing, a.ks.since, a.ks.attempts
	if was {
		a.ks.refusing, a.ks.lastErr = false, nil
		a.ks.news++
	}
	a.stMu.Unlock()
	if was {
		a.log.Info("the kernel takes the agent's writes again", "refused", attempts, "for", time.Since(since).Round(time.Millisecond))
		a.tell()
	}
}

// tell wakes the live session: there may be an acknowledgement or a
// status to send.
func (a *Agent) tell() {
	select {
	case a.news <- struct{}{}:
	default:
	}
}

func (a *Agent) kernelVersion() uint64 {
	a.stMu.Lock()
	defer a.stMu.Unlock()
	return a.ks.version
}

// joinWhat joins the first few repairs' descriptions, for the server.
func joinWhat(what []string) string {
	const shown = 3
	if len(what) > shown {
		return fmt.Sprintf("%s; and %d more", joinWhat(what[:shown]), len(what)-shown)
	}
	out := ""
	for i, w := range what {
		if i > 0 {
			out += "; "
		}
		out += w
	}
	return out
}

// kernelState is what the agent knows of its kernel against the desired
// state. Under Agent.stMu.
type kernelState struct {
	// What the kernel holds: the revision, and the desired version.
	epoch    string
	rev      int64
	version  uint64
	snapshot bool
	// An episode of refusals: since when, how many, the last error.
	refusing bool
	since    time.Time
	attempts int
	lastErr  error
	// Totals, and the last repair and check.
	refusals       uint64
	repaired       map[string]uint64
	lastRepair     time.Time
	lastRepairWhat string
	lastVerified   time.Time
	lastScope      string
	// news moves when what the server is told changes.
	news uint64
}

// statusMessage is the kernel's state as the server is told it.
func (a *Agent) statusMessage() (*agentv1.AgentMessage, uint64) {
	a.stMu.Lock()
	defer a.stMu.Unlock()
	m := &agentv1.KernelStatus{LastRepair: a.ks.lastRepairWhat}
	if a.ks.refusing {
		m.RefusingSinceUnixMs, m.RefusedAttempts = a.ks.since.UnixMilli(), uint64(a.ks.attempts)
		m.Refusal = "refused"
		if a.ks.lastErr != nil {
			m.Refusal = a.ks.lastErr.Error()
		}
	}
	for _, n := range a.ks.repaired {
		m.Repairs += n
	}
	if !a.ks.lastRepair.IsZero() {
		m.LastRepairUnixMs = a.ks.lastRepair.UnixMilli()
	}
	return &agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Kernel{Kernel: m}}, a.ks.news
}
