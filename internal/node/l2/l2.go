// Package l2 answers ARP and IPv6 neighbour discovery for the external
// VIPs a node holds on a flat network, as a host holding those addresses
// would: a reply to each ARP request and neighbour solicitation for one
// of them, with the interface's hardware address, and, when an address
// becomes the node's, a gratuitous ARP or an unsolicited neighbour
// advertisement, so that clients and switches move to it at once rather
// than when their caches expire. Which node holds which VIP is decided
// elsewhere; Responder only speaks for the set it is given.
package l2

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Responder speaks for a set of addresses on one interface: ARP for the
// IPv4 ones (the interface needs an IPv4 address of its own), neighbour
// discovery for the IPv6 ones (it needs a link-local address).
type Responder struct {
	ifi *net.Interface
	log *slog.Logger
	arp *arp.Client // nil: no IPv4 on the interface
	ndp *ndp.Conn   // nil: no IPv6 on the interface

	now func() time.Time
	// netns is the network namespace New ran in, where Run watches the
	// interface's link (Run may run on a thread of another namespace).
	netns netns.NsHandle
	// relink is how long Run keeps trying to announce the holdings again
	// after the link came back (an IPv6 link-local address comes back
	// after the link does).
	relink time.Duration

	mu sync.Mutex
	// owned are the addresses spoken for, each with when it was taken;
	// refused those of the last list that could not be (why); listAt
	// when the last list was given.
	owned   map[netip.Addr]time.Time
	refused map[netip.Addr]string
	listAt  time.Time
	closed  atomic.Bool

	// Sent since New: announcements (gratuitous ARP, unsolicited
	// neighbour advertisements) and answers, by family.
	announced4, announced6 atomic.Uint64
	answered4, answered6   atomic.Uint64
}

// New opens the raw sockets of interface name. A family the interface
// has no address of is not served: an address of it given to Set is
// refused.
func New(name string, log *slog.Logger) (*Responder, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("l2: interface %s: %w", name, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("l2: interface %s has no Ethernet address", name)
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("l2: network namespace: %w", err)
	}
	r := &Responder{ifi: ifi, log: log, now: time.Now, netns: ns, relink: 5 * time.Second, owned: map[netip.Addr]time.Time{}, refused: map[netip.Addr]string{}}
	var errs []error
	if c, err := arp.Dial(ifi); err == nil {
		r.arp = c
	} else {
		errs = append(errs, fmt.Errorf("ARP: %w", err))
	}
	if c, _, err := ndp.Listen(ifi, ndp.LinkLocal); err == nil {
		r.ndp = c
	} else {
		errs = append(errs, fmt.Errorf("NDP: %w", err))
	}
	if r.arp == nil && r.ndp == nil {
		ns.Close()
		return nil, fmt.Errorf("l2: interface %s: %w", name, errors.Join(errs...))
	}
	return r, nil
}

// Close closes the sockets; Run returns.
func (r *Responder) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	var errs []error
	errs = append(errs, r.netns.Close())
	if r.arp != nil {
		errs = append(errs, r.arp.Close())
	}
	if r.ndp != nil {
		errs = append(errs, r.ndp.Close())
	}
	return errors.Join(errs...)
}

// Set makes owned the addresses spoken for: those new to the set are
// announced at once (gratuitous ARP, unsolicited neighbour
// advertisement); those gone from it are no longer answered.
func (r *Responder) Set(owned []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return nil
	}
	gained, lost := Changes(r.owned, owned)
	now := r.now()
	r.listAt = now
	clear(r.refused)
	var errs []error
	for _, v := range gained {
		if err := r.take(v); err != nil {
			errs = append(errs, err)
			r.refused[v] = err.Error()
			continue
		}
		r.owned[v] = now
	}
	for _, v := range lost {
		delete(r.owned, v)
		if v.Is6() && r.ndp != nil {
			if g, err := ndp.SolicitedNodeMulticast(v); err == nil && !r.sharesGroup(g) {
				_ = r.ndp.LeaveGroup(g)
			}
		}
	}
	return errors.Join(errs...)
}

// take starts speaking for v: joins its solicited-node group (IPv6) and
// announces it. Called with r.mu held.
func (r *Responder) take(v netip.Addr) error {
	if v.Is6() && r.ndp != nil {
		g, err := ndp.SolicitedNodeMulticast(v)
		if err != nil {
			return err
		}
		if err := r.ndp.JoinGroup(g); err != nil {
			return fmt.Errorf("l2: join %s for %s: %w", g, v, err)
		}
	}
	return r.announce(v)
}

// announce tells the segment that v is here: a gratuitous ARP (IPv4) or
// an unsolicited neighbour advertisement (IPv6). Called with r.mu held.
func (r *Responder) announce(v netip.Addr) error {
	if v.Is4() {
		if r.arp == nil {
			return fmt.Errorf("l2: %s: interface %s has no IPv4 address", v, r.ifi.Name)
		}
		if err := r.arp.WriteTo(Gratuitous(r.ifi.HardwareAddr, v), ethernet.Broadcast); err != nil {
			return fmt.Errorf("l2: gratuitous ARP for %s: %w", v, err)
		}
		r.announced4.Add(1)
		return nil
	}
	if r.ndp == nil {
		return fmt.Errorf("l2: %s: interface %s has no IPv6 link-local address", v, r.ifi.Name)
	}
	if err := r.ndp.WriteTo(Advertisement(r.ifi.HardwareAddr, v, false), nil, netip.IPv6LinkLocalAllNodes()); err != nil {
		return fmt.Errorf("l2: unsolicited neighbour advertisement for %s: %w", v, err)
	}
	r.announced6.Add(1)
	return nil
}

// sharesGroup reports whether an owned IPv6 address has solicited-node
// group g. Called with r.mu held.
func (r *Responder) sharesGroup(g netip.Addr) bool {
	for v := range r.owned {
		if v.Is6() {
			if og, err := ndp.SolicitedNodeMulticast(v); err == nil && og == g {
				return true
			}
		}
	}
	return false
}

func (r *Responder) owns(v netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.owned[v]
	return ok
}

// Run answers requests until ctx ends or the sockets are closed. The
// link going down and up again does not end it: the kernel keeps the
// sockets (each read fails once, "network is down"), and when the link is
// back every address held is announced again, since the segment may
// have learnt another place for it meanwhile. The interface removed ends
// it with an error.
func (r *Responder) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	if r.arp != nil {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- r.serveARP(ctx) }()
	}
	if r.ndp != nil {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- r.serveNDP(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); errs <- r.watchLink(ctx) }()
	go func() {
		<-ctx.Done()
		_ = r.Close()
	}()
	// The first to end for good ends the others: the link watch when
	// the interface is gone, a read when its socket fails otherwise.
	go func() {
		wg.Wait()
		close(errs)
	}()
	var all []error
	for err := range errs {
		if err != nil && !r.closed.Load() {
			all = append(all, err)
		}
		cancel()
	}
	return errors.Join(all...)
}

// watchLink announces the holdings again each time the interface comes
// back up, until ctx ends; it fails when the interface is removed or the
// link updates cannot be read.
func (r *Responder) watchLink(ctx context.Context) error {
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	failed := make(chan error, 1)
	ns := r.netns
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &ns,
		ErrorCallback: func(err error) {
			select {
			case failed <- err:
			default:
			}
		}}); err != nil {
		return fmt.Errorf("l2: watch %s: %w", r.ifi.Name, err)
	}
	up := r.ifi.Flags&net.FlagUp != 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return fmt.Errorf("l2: watch %s: %w", r.ifi.Name, err)
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("l2: watch %s: link updates ended", r.ifi.Name)
			}
			if int(u.Index) != r.ifi.Index {
				continue
			}
			if u.Header.Type == unix.RTM_DELLINK {
				return fmt.Errorf("l2: interface %s was removed", r.ifi.Name)
			}
			now := linkUp(u.Attrs())
			if now && !up {
				r.log.Info("l2: link up again: announcing the addresses held", "interface", r.ifi.Name)
				go r.announceAgain(ctx)
			}
			up = now
		}
	}
}

// linkUp reports whether a link carries traffic: administratively up and
// operationally up (or of a kind that reports no operational state).
func linkUp(a *netlink.LinkAttrs) bool {
	return a.Flags&net.FlagUp != 0 && (a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown)
}

// announceAgain announces every address held, retrying those whose
// announcement fails (an IPv6 link-local address is back a moment after
// its link) for up to r.relink.
func (r *Responder) announceAgain(ctx context.Context) {
	deadline := time.Now().Add(r.relink)
	r.mu.Lock()
	todo := slices.Collect(maps.Keys(r.owned))
	r.mu.Unlock()
	for {
		var failed []netip.Addr
		var errs []error
		r.mu.Lock()
		for _, v := range todo {
			if _, held := r.owned[v]; !held {
				continue // given up meanwhile
			}
			if err := r.announce(v); err != nil {
				failed, errs = append(failed, v), append(errs, err)
			}
		}
		r.mu.Unlock()
		if len(failed) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.log.Warn("l2: announcing again after the link came back", "interface", r.ifi.Name, "err", errors.Join(errs...))
			return
		}
		todo = failed
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *Responder) serveARP(ctx context.Context) error {
	for ctx.Err() == nil {
		p, _, err := r.arp.Read()
		if err != nil {
			if r.stopped(ctx, err) {
				return nil
			}
			if errors.Is(err, syscall.ENETDOWN) {
				continue // the link went down; the socket serves again once it is up
			}
			if isSocketError(err) {
				return fmt.Errorf("l2: read ARP on %s: %w", r.ifi.Name, err)
			}
			continue // a frame it cannot parse: the next
		}
		if reply := Reply(p, r.ifi.HardwareAddr, r.owns); reply != nil {
			if err := r.arp.WriteTo(reply, p.SenderHardwareAddr); err != nil {
				r.log.Warn("l2: ARP reply", "vip", p.TargetIP, "to", p.SenderIP, "err", err)
			} else {
				r.answered4.Add(1)
			}
		}
	}
	return nil
}

func (r *Responder) serveNDP(ctx context.Context) error {
	for ctx.Err() == nil {
		m, _, from, err := r.ndp.ReadFrom()
		if err != nil {
			if r.stopped(ctx, err) {
				return nil
			}
			if errors.Is(err, syscall.ENETDOWN) {
				continue
			}
			if isSocketError(err) {
				return fmt.Errorf("l2: read NDP on %s: %w", r.ifi.Name, err)
			}
			continue // a message it cannot parse: the next
		}
		ns, ok := m.(*ndp.NeighborSolicitation)
		if !ok || !r.owns(ns.TargetAddress) {
			continue
		}
		// Solicited, to the asker (or all nodes when it asked from the
		// unspecified address, during its duplicate address detection).
		to, solicited := from, true
		if !from.IsValid() || from.IsUnspecified() {
			to, solicited = netip.IPv6LinkLocalAllNodes(), false
		}
		if err := r.ndp.WriteTo(Advertisement(r.ifi.HardwareAddr, ns.TargetAddress, solicited), nil, to); err != nil {
			r.log.Warn("l2: neighbour advertisement", "vip", ns.TargetAddress, "to", to, "err", err)
		} else {
			r.answered6.Add(1)
		}
	}
	return nil
}

// stopped reports whether a read failed because the responder is
// closing.
func (r *Responder) stopped(ctx context.Context, err error) bool {
	return r.closed.Load() || ctx.Err() != nil || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed)
}

// isSocketError: an error of the socket itself (closed, timeout, a
// system call's), as opposed to a packet's content.
func isSocketError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe)
}

// Changes is what moves from have to want: the addresses gained and
// lost, each sorted.
func Changes[T any](have map[netip.Addr]T, want []netip.Addr) (gained, lost []netip.Addr) {
	w := make(map[netip.Addr]bool, len(want))
	for _, v := range want {
		v = v.Unmap()
		w[v] = true
		if _, ok := have[v]; !ok {
			gained = append(gained, v)
		}
	}
	for v := range have {
		if !w[v] {
			lost = append(lost, v)
		}
	}
	slices.SortFunc(gained, netip.Addr.Compare)
	gained = slices.Compact(gained)
	slices.SortFunc(lost, netip.Addr.Compare)
	return gained, lost
}

// Reply is the answer to ARP packet p by the holder of hw, or nil: a
// reply only to a request for an address owns says is held.
func Reply(p *arp.Packet, hw net.HardwareAddr, owns func(netip.Addr) bool) *arp.Packet {
	if p == nil || p.Operation != arp.OperationRequest || !p.TargetIP.Is4() || !owns(p.TargetIP) {
		return nil
	}
	// A gratuitous request (sender and target the same address) asks
	// nobody.
	if p.SenderIP == p.TargetIP {
		return nil
	}
	reply, err := arp.NewPacket(arp.OperationReply, hw, p.TargetIP, p.SenderHardwareAddr, p.SenderIP)
	if err != nil {
		return nil
	}
	return reply
}

// Gratuitous is the ARP request by which the holder of hw tells the
// segment that v is at hw now: sender and target v, broadcast.
func Gratuitous(hw net.HardwareAddr, v netip.Addr) *arp.Packet {
	p, err := arp.NewPacket(arp.OperationRequest, hw, v, ethernet.Broadcast, v)
	if err != nil {
		panic(err) // hw and v are checked by the caller: a 6-byte address, IPv4
	}
	return p
}

// Advertisement is the neighbour advertisement of v at hw: solicited (an
// answer), or unsolicited (a move); it overrides what the receiver has.
func Advertisement(hw net.HardwareAddr, v netip.Addr, solicited bool) *ndp.NeighborAdvertisement {
	return &ndp.NeighborAdvertisement{Solicited: solicited, Override: true, TargetAddress: v,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: hw}}}
}
