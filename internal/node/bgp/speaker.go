package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// Defaults of a peer.
const (
	DefaultHoldTime    = 9 * time.Second
	DefaultRestartTime = 120 * time.Second
	DefaultBFDInterval = 300 * time.Millisecond
	DefaultBFDMult     = 3
)

// Speaker advertises the VIPs it is given to its peers. It is the
// announce.Routes of the BGP mode: Update takes the VIPs to announce and
// withdraw, Synced (after the agent's first full table) starts peering,
// so that a restarted agent's first update to a router already holds
// every VIP and its End-of-RIB removes nothing the router kept.
type Speaker struct {
	cfg   Config
	t     rangeTable
	s     *server.BgpServer
	log   *slog.Logger
	peers []*api.Peer
	nh4   netip.Addr // invalid: the session's own address
	nh6   netip.Addr

	mu     sync.Mutex
	vips   map[netip.Addr]bool
	count  []int // announced VIPs per range
	adv    map[netip.Prefix]Attrs
	peered bool

	stopOnce sync.Once

	// bfd carries BFD switches to bfdLoop, which turns a peer's BFD on
	// once its session is established and off when it leaves that
	// state; stopped ends the loop.
	bfd     chan bfdSwitch
	stopped chan struct{}

	advertised prometheus.Gauge
	sessions   *prometheus.GaugeVec
	changes    *prometheus.CounterVec
}

// Options are what the agent adds to a Config.
type Options struct {
	// Addrs lists the node's addresses, for the next hop of a family no
	// session carries (nil: read from the kernel).
	Addrs func() ([][]netip.Addr, error)
	// Reg registers the metrics (nil: none).
	Reg prometheus.Registerer
	Log *slog.Logger
}

// New starts the speaker; it peers once Synced is called.
func New(cfg Config, o Options) (*Speaker, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	t, err := compileRanges(cfg.Ranges)
	if err != nil {
		return nil, err
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	sp := &Speaker{cfg: cfg, t: t, log: log, vips: map[netip.Addr]bool{}, count: make([]int, len(t)), adv: map[netip.Prefix]Attrs{},
		bfd: make(chan bfdSwitch, 64), stopped: make(chan struct{}),
		advertised: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowlb_agent_bgp_advertised_prefixes",
			Help: "Prefixes the agent's BGP speaker advertises (host routes and aggregated ranges)."}),
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flowlb_agent_bgp_session_up",
			Help: "1 while the BGP session with the peer is established."}, []string{"peer"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowlb_agent_bgp_session_changes_total",
			Help: "BGP session state changes, by peer and new state."}, []string{"peer", "state"}),
	}
	if o.Reg != nil {
		o.Reg.MustRegister(sp.advertised, sp.sessions, sp.changes)
	}
	addrs := o.Addrs
	if addrs == nil {
		addrs = localAddrs
	}
	if err := sp.resolve(addrs); err != nil {
		return nil, err
	}
	for i, p := range cfg.Peers {
		if p.PasswordFile != "" {
			b, err := os.ReadFile(p.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("peers[%d].password-file: %w", i, err)
			}
			p.Password = strings.TrimRight(string(b), "\r\n")
		}
		sp.peers = append(sp.peers, peerOf(p))
		sp.sessions.WithLabelValues(p.Address).Set(0)
	}
	lvl := &slog.LevelVar{}
	lvl.Set(slog.LevelWarn)
	sp.s = server.NewBgpServer(server.LoggerOption(log.With("component", "gobgp"), lvl))
	go sp.s.Serve()
	listen := int32(-1)
	if cfg.ListenPort > 0 {
		listen = int32(cfg.ListenPort)
	}
	ctx := context.Background()
	if err := sp.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: cfg.ASN, RouterId: sp.cfg.RouterID, ListenPort: listen}}); err != nil {
		sp.s.Stop()
		return nil, fmt.Errorf("start BGP: %w", err)
	}
	if err := onlySpeak(ctx, sp.s); err != nil {
		sp.s.Stop()
		return nil, fmt.Errorf("import policy: %w", err)
	}
	if err := sp.s.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnPeerUpdate: sp.peerEvent}, server.WatchPeer()); err != nil {
		sp.s.Stop()
		return nil, fmt.Errorf("watch peers: %w", err)
	}
	go sp.bfdLoop()
	return sp, nil
}

// bfdSwitch turns the BFD of the peer at index peer on or off.
type bfdSwitch struct {
	peer int
	on   bool
}

// bfdLoop applies the BFD switches in order, apart from GoBGP's event
// callback (UpdatePeer goes through GoBGP's own loop).
//
// A peer's BFD runs only while its session is established: a router
// such as FRR (re)creates its BFD session for a peer when the BGP
// session comes up, and GoBGP's BFD, already up with the router's
// previous BFD session, then takes the new one's packets for another
// system's, times out and resets the fresh BGP session, while the
// router takes the replaced BFD session's end for a failure: every
// session flapped once at every start (seen with FRR 8.4).
func (sp *Speaker) bfdLoop() {
	for {
		select {
		case <-sp.stopped:
			return
		case b := <-sp.bfd:
			sp.switchBFD(b)
		}
	}
}

// switchBFD turns a peer's BFD on or off in GoBGP, the rest of the
// peer's configuration as added (UpdatePeer then resets no session).
func (sp *Speaker) switchBFD(b bfdSwitch) {
	q := proto.Clone(sp.peers[b.peer]).(*api.Peer)
	q.Bfd = &api.BfdPeerConfig{Enabled: false}
	if b.on {
		q.Bfd = bfdConfig(sp.cfg.Peers[b.peer].BFD)
	}
	if _, err := sp.s.UpdatePeer(context.Background(), &api.UpdatePeerRequest{Peer: q}); err != nil {
		sp.log.Warn("BFD switch", "peer", sp.cfg.Peers[b.peer].Address, "on", b.on, "err", err)
	}
}

// onlySpeak makes the speaker take nothing a router sends: the global
// import policy rejects every route learned from a peer (iBGP or eBGP),
// so that the node neither holds a router's table nor passes one
// router's routes to another. It accepts the rest by default: GoBGP
// applies the global import policy to the speaker's own paths too, and a
// default reject would withdraw them.
func onlySpeak(ctx context.Context, s *server.BgpServer) error {
	var sts []*api.Statement
	for _, rt := range []api.Conditions_RouteType{api.Conditions_ROUTE_TYPE_INTERNAL, api.Conditions_ROUTE_TYPE_EXTERNAL} {
		sts = append(sts, &api.Statement{Name: "flowlb-learned-" + rt.String(), Conditions: &api.Conditions{RouteType: rt},
			Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT}})
	}
	if err := s.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: "flowlb-speak-only", Statements: sts}}); err != nil {
		return err
	}
	return s.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies: []*api.Policy{{Name: "flowlb-speak-only"}}, DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT}})
}

func (sp *Speaker) peerEvent(e *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if e.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	addr := e.Peer.Conf.NeighborAddress.String()
	st := e.Peer.State.SessionState
	up := 0.0
	if st == bgp.BGP_FSM_ESTABLISHED {
		up = 1
	}
	sp.sessions.WithLabelValues(addr).Set(up)
	sp.changes.WithLabelValues(addr, stateName(st)).Inc()
	sp.log.Info("BGP session", "peer", addr, "state", stateName(st))
	for i, c := range sp.cfg.Peers {
		if c.Address == addr && c.BFD.Enabled {
			select {
			case sp.bfd <- bfdSwitch{peer: i, on: up == 1}:
			case <-sp.stopped:
			}
		}
	}
}

func stateName(st bgp.FSMState) string {
	switch st {
	case bgp.BGP_FSM_IDLE:
		return "idle"
	case bgp.BGP_FSM_CONNECT:
		return "connect"
	case bgp.BGP_FSM_ACTIVE:
		return "active"
	case bgp.BGP_FSM_OPENSENT:
		return "opensent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "openconfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "established"
	}
	return "unknown"
}

// resolve sets the router id and the next hops of the families that no
// session's own address gives.
func (sp *Speaker) resolve(addrs func() ([][]netip.Addr, error)) error {
	var v4, v6 bool // a session of that family exists
	var local []netip.Addr
	for _, p := range sp.cfg.Peers {
		a, _ := netip.ParseAddr(p.Address)
		v4 = v4 || a.Is4()
		v6 = v6 || a.Is6()
		src := netip.Addr{}
		if p.SourceAddress != "" {
			src, _ = netip.ParseAddr(p.SourceAddress)
		} else if s, err := sourceFor(a); err == nil {
			src = s
		}
		if src.IsValid() {
			local = append(local, src)
		}
	}
	if h := sp.cfg.NextHops.IPv4; h != "" {
		sp.nh4 = netip.MustParseAddr(h)
	}
	if h := sp.cfg.NextHops.IPv6; h != "" {
		sp.nh6 = netip.MustParseAddr(h)
	}
	needs4, needs6 := !sp.nh4.IsValid() && !v4, !sp.nh6.IsValid() && !v6
	if sp.cfg.RouterID == "" || needs4 || needs6 {
		all, err := addrs()
		if err != nil {
			return fmt.Errorf("the node's addresses: %w", err)
		}
		nh4, nh6 := pickNextHops(local, all)
		if needs4 {
			sp.nh4 = nh4
		}
		if needs6 {
			sp.nh6 = nh6
		}
		if sp.cfg.RouterID == "" {
			id := nh4
			for _, l := range local {
				if l.Is4() {
					id = l
					break
				}
			}
			if !id.IsValid() {
				return errors.New("router-id: no IPv4 address to take it from; set it")
			}
			sp.cfg.RouterID = id.String()
		}
	}
	return nil
}

// pickNextHops chooses, for each family, a global address of the node:
// one of the interface that holds a session's local address, else the
// first of any interface. ifaces lists the addresses of each interface.
func pickNextHops(local []netip.Addr, ifaces [][]netip.Addr) (v4, v6 netip.Addr) {
	usable := func(a netip.Addr) bool { return a.IsGlobalUnicast() && !a.Is4In6() }
	pick := func(addrs []netip.Addr) {
		for _, a := range addrs {
			if !usable(a) {
				continue
			}
			if a.Is4() && !v4.IsValid() {
				v4 = a
			}
			if a.Is6() && !v6.IsValid() {
				v6 = a
			}
		}
	}
	for _, addrs := range ifaces {
		if slices.ContainsFunc(local, func(l netip.Addr) bool { return slices.Contains(addrs, l) }) {
			pick(addrs)
		}
	}
	for _, addrs := range ifaces {
		pick(addrs)
	}
	return v4, v6
}

// sourceFor is the local address the kernel would use towards a.
func sourceFor(a netip.Addr) (netip.Addr, error) {
	network := "udp4"
	if a.Is6() {
		network = "udp6"
	}
	c, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 179)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// localAddrs lists the node's addresses, interface by interface.
func localAddrs() ([][]netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out [][]netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		var addrs []netip.Addr
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					addrs = append(addrs, ip.Unmap())
				}
			}
		}
		out = append(out, addrs)
	}
	return out, nil
}

func peerOf(p Peer) *api.Peer {
	hold := time.Duration(p.HoldTime)
	if hold == 0 {
		hold = DefaultHoldTime
	}
	keep := time.Duration(p.Keepalive)
	if keep == 0 {
		keep = hold / 3
	}
	ap := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address, PeerAsn: p.ASN, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{HoldTime: uint64(hold / time.Second), KeepaliveInterval: uint64(max(keep/time.Second, 1)),
			ConnectRetry: 1, IdleHoldTimeAfterReset: 1}},
		Transport: &api.Transport{LocalAddress: p.SourceAddress, RemotePort: uint32(p.Port)},
	}
	if p.Multihop > 0 {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.Multihop)}
	}
	gr := p.GracefulRestart == nil || p.GracefulRestart.Enabled
	if gr {
		rt := DefaultRestartTime
		if p.GracefulRestart != nil && p.GracefulRestart.RestartTime > 0 {
			rt = time.Duration(p.GracefulRestart.RestartTime)
		}
		// Restarting: the forwarding state (the node's flows) was kept,
		// and the router keeps our routes until our End-of-RIB.
		ap.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(rt / time.Second), LocalRestarting: true, DeferralTime: 10}
	}
	v4, v6 := p.families()
	for _, f := range []struct {
		on  bool
		afi api.Family_Afi
	}{{v4, api.Family_AFI_IP}, {v6, api.Family_AFI_IP6}} {
		if !f.on {
			continue
		}
		af := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: f.afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true}}
		if gr {
			af.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		ap.AfiSafis = append(ap.AfiSafis, af)
	}
	// BFD is turned on once the session is established (bfdLoop).
	return ap
}

func bfdConfig(b BFD) *api.BfdPeerConfig {
	rx, tx, m := time.Duration(b.MinRx), time.Duration(b.MinTx), b.Multiplier
	if rx == 0 {
		rx = DefaultBFDInterval
	}
	if tx == 0 {
		tx = DefaultBFDInterval
	}
	if m == 0 {
		m = DefaultBFDMult
	}
	return &api.BfdPeerConfig{Enabled: true, DesiredMinimumTxInterval: uint32(tx / time.Microsecond),
		RequiredMinimumReceive: uint32(rx / time.Microsecond), DetectionMultiplier: uint32(m)}
}

// Synced starts the sessions (once): the VIPs given so far are what the
// first update of every session holds.
func (sp *Speaker) Synced() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.peered {
		return
	}
	for i, p := range sp.peers {
		if err := sp.s.AddPeer(context.Background(), &api.AddPeerRequest{Peer: p}); err != nil {
			sp.log.Error("BGP peer", "peer", sp.cfg.Peers[i].Address, "err", err)
		}
	}
	sp.peered = true
}

// List returns nothing: the speaker's routes live and die with the
// process (a restarted agent announces again, and the routers keep
// the previous ones meanwhile, by graceful restart).
func (sp *Speaker) List() ([]netip.Addr, error) { return nil, nil }

// Add announces v.
func (sp *Speaker) Add(v netip.Addr) error { return sp.Update([]netip.Addr{v}, nil) }

// Del withdraws v.
func (sp *Speaker) Del(v netip.Addr) error { return sp.Update(nil, []netip.Addr{v}) }

// Update announces add and withdraws del, changing only the prefixes
// whose advertisement they change.
func (sp *Speaker) Update(add, del []netip.Addr) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	touched := map[int]bool{} // aggregated ranges to recompute
	want := map[netip.Prefix]*Attrs{}
	set := func(v netip.Addr, on bool) {
		if sp.vips[v] == on {
			return
		}
		i := sp.t.of(v)
		if on {
			sp.vips[v] = true
		} else {
			delete(sp.vips, v)
		}
		if i >= 0 {
			if on {
				sp.count[i]++
			} else {
				sp.count[i]--
			}
			if sp.t[i].aggregate {
				touched[i] = true
				return
			}
		}
		if on {
			a := Attrs{}
			if i >= 0 {
				a = sp.t[i].attrs
			}
			want[host(v)] = &a
		} else {
			want[host(v)] = nil
		}
	}
	for _, v := range del {
		set(v, false)
	}
	for _, v := range add {
		set(v, true)
	}
	for i := range touched {
		r := sp.t[i]
		full := sp.count[i] == r.size()
		if full {
			a := r.attrs
			want[r.prefix] = &a
		} else {
			want[r.prefix] = nil
		}
		// Host routes of the range: advertised unless it is whole. A
		// range's VIPs are those whose most specific range it is.
		for v := range sp.vips {
			if r.prefix.Contains(v) && sp.t.of(v) == i {
				if full {
					want[host(v)] = nil
				} else {
					a := r.attrs
					want[host(v)] = &a
				}
			}
		}
		for p := range sp.adv {
			if p.Bits() == p.Addr().BitLen() && r.prefix.Contains(p.Addr()) && !sp.vips[p.Addr()] && sp.t.of(p.Addr()) == i {
				want[p] = nil
			}
		}
	}
	var addPaths, delPaths []*apiutil.Path
	var errs []error
	for p, a := range want {
		have, ok := sp.adv[p]
		switch {
		case a == nil && ok:
			path, err := sp.path(p, have, true)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			delPaths = append(delPaths, path)
			delete(sp.adv, p)
		case a != nil && (!ok || !have.equal(*a)):
			path, err := sp.path(p, *a, false)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			addPaths = append(addPaths, path)
			sp.adv[p] = *a
		}
	}
	if len(delPaths) > 0 {
		if err := sp.s.DeletePath(apiutil.DeletePathRequest{Paths: delPaths}); err != nil {
			errs = append(errs, fmt.Errorf("withdraw: %w", err))
		}
	}
	if len(addPaths) > 0 {
		if _, err := sp.s.AddPath(apiutil.AddPathRequest{Paths: addPaths}); err != nil {
			errs = append(errs, fmt.Errorf("advertise: %w", err))
		}
	}
	sp.advertised.Set(float64(len(sp.adv)))
	return errors.Join(errs...)
}

// path is the GoBGP path of prefix p with attributes a.
func (sp *Speaker) path(p netip.Prefix, a Attrs, withdraw bool) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(p)
	if err != nil {
		return nil, err
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	fam := bgp.RF_IPv4_UC
	if p.Addr().Is4() {
		nh := sp.nh4
		if !nh.IsValid() {
			nh = netip.IPv4Unspecified()
		}
		a, err := bgp.NewPathAttributeNextHop(nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, a)
	} else {
		fam = bgp.RF_IPv6_UC
		nh := sp.nh6
		if !nh.IsValid() {
			nh = netip.IPv6Unspecified()
		}
		mp, err := bgp.NewPathAttributeMpReachNLRI(bgp.RF_IPv6_UC, []bgp.PathNLRI{{NLRI: nlri}}, nh)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, mp)
	}
	if len(a.Communities) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeCommunities(a.Communities))
	}
	if a.LocalPref > 0 {
		attrs = append(attrs, bgp.NewPathAttributeLocalPref(a.LocalPref))
	}
	return &apiutil.Path{Family: fam, Nlri: nlri, Attrs: attrs, Withdrawal: withdraw}, nil
}

// Advert is one advertised prefix.
type Advert struct {
	Prefix      string   `json:"prefix"`
	Communities []string `json:"communities,omitempty"`
	LocalPref   uint32   `json:"local_preference,omitempty"`
}

// VIPs are the VIPs the speaker is told to announce, sorted.
func (sp *Speaker) VIPs() []netip.Addr {
	sp.mu.Lock()
	out := make([]netip.Addr, 0, len(sp.vips))
	for v := range sp.vips {
		out = append(out, v)
	}
	sp.mu.Unlock()
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Advertised lists what the speaker advertises, sorted.
func (sp *Speaker) Advertised() []Advert {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	out := make([]Advert, 0, len(sp.adv))
	for p, a := range sp.adv {
		ad := Advert{Prefix: p.String(), LocalPref: a.LocalPref}
		for _, c := range a.Communities {
			ad.Communities = append(ad.Communities, strconv.Itoa(int(c>>16))+":"+strconv.Itoa(int(c&0xffff)))
		}
		out = append(out, ad)
	}
	slices.SortFunc(out, func(a, b Advert) int {
		pa, pb := netip.MustParsePrefix(a.Prefix), netip.MustParsePrefix(b.Prefix)
		if c := pa.Addr().Compare(pb.Addr()); c != 0 {
			return c
		}
		return pa.Bits() - pb.Bits()
	})
	return out
}

// Session is a peer's state as the agent reports it (the "sessions" of
// the agent's /status; docs/operations.md names the fields).
type Session struct {
	Peer  string `json:"peer"`
	ASN   uint32 `json:"asn"`
	State string `json:"state"`
	// Since is when the session was established, or, when it is not,
	// when it last went down (empty: never established); RFC 3339, to
	// the second.
	Since string `json:"since,omitempty"`
	// BFD is the BFD session's state (empty: BFD not enabled).
	BFD      string `json:"bfd,omitempty"`
	Received uint64 `json:"updates_received"`
	Sent     uint64 `json:"updates_sent"`
	// Families are the prefix counts of the session's families, while
	// it is established.
	Families []FamilyCounts `json:"families,omitempty"`
	// localDisc and remoteDisc are the BFD session's discriminators.
	localDisc, remoteDisc uint32
}

// FamilyCounts are a session's prefixes of one family: those sent to
// the peer, and those the peer sent (none is taken: onlySpeak).
type FamilyCounts struct {
	Family     string `json:"family"`
	Advertised uint64 `json:"advertised"`
	Received   uint64 `json:"received"`
}

// Sessions lists the peers' sessions, in configuration order. Counting
// the advertised prefixes walks the speaker's table once per peer: cheap
// at the rate an operator asks for /status.
func (sp *Speaker) Sessions() []Session { return sp.listSessions(true) }

// SessionStates are the sessions without their families' prefix
// counts, which cost a walk of the speaker's table per peer: what the
// agent reports every few seconds.
func (sp *Speaker) SessionStates() []Session {
	out := sp.listSessions(false)
	for i := range out {
		out[i].Families = nil
	}
	return out
}

func (sp *Speaker) listSessions(counted bool) []Session {
	byAddr := map[string]*api.Peer{}
	_ = sp.s.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: counted}, func(p *api.Peer) {
		byAddr[p.GetConf().GetNeighborAddress()] = p
	})
	out := make([]Session, 0, len(sp.cfg.Peers))
	for _, c := range sp.cfg.Peers {
		out = append(out, sessionOf(c, byAddr[c.Address]))
	}
	return out
}

// sessionOf is the session with the configured peer c as GoBGP reports
// it in p (nil: GoBGP does not know the peer yet).
func sessionOf(c Peer, p *api.Peer) Session {
	s := Session{Peer: c.Address, ASN: c.ASN, State: "idle"}
	if p == nil {
		return s
	}
	st := p.GetState()
	s.State = sessionState(st.GetSessionState())
	ts := p.GetTimers().GetState()
	since := ts.GetDowntime()
	if s.State == "established" {
		since = ts.GetUptime()
	}
	if since != nil {
		s.Since = since.AsTime().UTC().Format(time.RFC3339)
	}
	s.Received = st.GetMessages().GetReceived().GetUpdate()
	s.Sent = st.GetMessages().GetSent().GetUpdate()
	if b := st.GetBfdState(); b != nil && c.BFD.Enabled {
		s.BFD = bfdState(b.GetSessionState())
		s.localDisc, s.remoteDisc = b.GetLocalDiscriminator(), b.GetRemoteDiscriminator()
	}
	if s.State != "established" {
		return s
	}
	for _, af := range p.GetAfiSafis() {
		as := af.GetState()
		if as == nil || as.GetFamily().GetSafi() != api.Family_SAFI_UNICAST {
			continue
		}
		name := "ipv4"
		switch as.GetFamily().GetAfi() {
		case api.Family_AFI_IP:
		case api.Family_AFI_IP6:
			name = "ipv6"
		default:
			continue
		}
		s.Families = append(s.Families, FamilyCounts{Family: name, Advertised: as.GetAdvertised(), Received: as.GetReceived()})
	}
	slices.SortFunc(s.Families, func(a, b FamilyCounts) int { return strings.Compare(a.Family, b.Family) })
	return s
}

func sessionState(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_SESSION_STATE_IDLE:
		return "idle"
	case api.PeerState_SESSION_STATE_CONNECT:
		return "connect"
	case api.PeerState_SESSION_STATE_ACTIVE:
		return "active"
	case api.PeerState_SESSION_STATE_OPENSENT:
		return "opensent"
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return "established"
	}
	return "unknown"
}

func bfdState(s api.BfdSessionState) string {
	switch s {
	case api.BfdSessionState_BFD_SESSION_STATE_UP:
		return "up"
	case api.BfdSessionState_BFD_SESSION_STATE_DOWN:
		return "down"
	case api.BfdSessionState_BFD_SESSION_STATE_INIT:
		return "init"
	case api.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
		return "admin-down"
	}
	return "unknown"
}

// Leave ends the speaker for a restart: each BFD session is taken down
// administratively (RFC 5880: the router must not treat that as a
// failure), and the BGP sessions are left to close with the process,
// without a NOTIFICATION, so that the routers keep the routes as
// stale (graceful restart) until the next agent's End-of-RIB.
func (sp *Speaker) Leave() {
	sp.stopOnce.Do(func() {
		close(sp.stopped)
		for _, s := range sp.Sessions() {
			if s.BFD != "up" {
				continue
			}
			for i, c := range sp.cfg.Peers {
				if c.Address != s.Peer {
					continue
				}
				// Stop the speaker's own BFD first, so that it sends
				// nothing after the AdminDown.
				sp.switchBFD(bfdSwitch{peer: i, on: false})
				port := 3784
				if err := sendAdminDown(netip.MustParseAddr(c.Address), port, s.localDisc, s.remoteDisc, c.BFD); err != nil {
					sp.log.Warn("BFD admin down", "peer", c.Address, "err", err)
				}
			}
		}
	})
}

// Stop withdraws everything (a NOTIFICATION to every peer) and stops.
func (sp *Speaker) Stop() {
	sp.stopOnce.Do(func() { close(sp.stopped); sp.s.Stop() })
}
