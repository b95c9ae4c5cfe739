package bgp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTestSpeaker(t *testing.T, c Config) *Speaker {
	t.Helper()
	sp, err := New(c, Options{Log: quiet, Addrs: func() ([][]netip.Addr, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Stop)
	return sp
}

// TestMain turns the test binary into a speaker process when asked:
// FLOWLB_BGP_CHILD holds its configuration and VIPs; SIGTERM makes it
// leave as the agent does at a restart.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FLOWLB_BGP_CHILD"); spec != "" {
		os.Exit(child(spec))
	}
	os.Exit(m.Run())
}

type childSpec struct {
	Config Config   `json:"config"`
	VIPs   []string `json:"vips"`
}

func child(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sp, err := New(s.Config, Options{Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Addrs: func() ([][]netip.Addr, error) { return nil, nil }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var vips []netip.Addr
	for _, v := range s.VIPs {
		vips = append(vips, netip.MustParseAddr(v))
	}
	if err := sp.Update(vips, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sp.Synced()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	sp.Leave()
	return 0
}

// router is a GoBGP standing in for a router: it takes the routes of
// one peer (the speaker, from loopback) and records every change of its
// best paths.
type router struct {
	s    *server.BgpServer
	port int

	mu        sync.Mutex
	withdrawn []string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newRouter(t *testing.T) *router { return newRouterAt(t, freePort(t)) }

// newRouterAt is a router listening on port of 127.0.0.1.
func newRouterAt(t *testing.T, port int) *router {
	t.Helper()
	r := &router{s: server.NewBgpServer(server.LoggerOption(quiet, &slog.LevelVar{})), port: port}
	go r.s.Serve()
	t.Cleanup(r.s.Stop)
	ctx := context.Background()
	if err := r.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 64500, RouterId: "198.18.0.254", ListenPort: int32(r.port), ListenAddresses: []string{"127.0.0.1"}}}); err != nil {
		t.Fatal(err)
	}
	var afs []*api.AfiSafi
	for _, afi := range []api.Family_Afi{api.Family_AFI_IP, api.Family_AFI_IP6} {
		afs = append(afs, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}})
	}
	if err := r.s.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:            &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 64512},
		Transport:       &api.Transport{PassiveMode: true},
		GracefulRestart: &api.GracefulRestart{Enabled: true, HelperOnly: true, RestartTime: 120},
		AfiSafis:        afs,
	}}); err != nil {
		t.Fatal(err)
	}
	if err := r.s.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnBestPath: func(ps []*apiutil.Path, _ time.Time) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range ps {
			if p.Withdrawal {
				r.withdrawn = append(r.withdrawn, p.Nlri.String())
			}
		}
	}}, server.WatchBestPath(false)); err != nil {
		t.Fatal(err)
	}
	return r
}

// routes lists the router's routes: "prefix via nexthop [communities] [stale]".
func (r *router) routes() []string {
	var out []string
	for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
		_ = r.s.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f}, func(n bgp.NLRI, ps []*apiutil.Path) {
			for _, p := range ps {
				s := n.String()
				for _, a := range p.Attrs {
					switch a := a.(type) {
					case *bgp.PathAttributeNextHop:
						s += " via " + a.Value.String()
					case *bgp.PathAttributeMpReachNLRI:
						s += " via " + a.Nexthop.String()
					case *bgp.PathAttributeCommunities:
						for _, c := range a.Value {
							s += fmt.Sprintf(" %d:%d", c>>16, c&0xffff)
						}
					}
				}
				if p.Stale {
					s += " stale"
				}
				out = append(out, s)
			}
		})
	}
	slices.Sort(out)
	return out
}

// originate makes the router advertise prefix p.
func (r *router) originate(p string) (string, error) {
	nlri, err := bgp.NewIPAddrPrefix(netip.MustParsePrefix(p))
	if err != nil {
		return "", err
	}
	nh, err := bgp.NewPathAttributeNextHop(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		return "", err
	}
	_, err = r.s.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{Family: bgp.RF_IPv4_UC, Nlri: nlri,
		Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh}}}})
	return p, err
}

func (r *router) established() bool {
	up := false
	_ = r.s.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		up = p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED
	})
	return up
}

func speakerConfig(port int) Config {
	return Config{ASN: 64512, RouterID: "198.18.0.1", NextHops: NextHops{IPv6: "2001:2::1"},
		Peers:  []Peer{{Address: "127.0.0.1", ASN: 64500, Port: port, SourceAddress: "127.0.0.1"}},
		Ranges: []Range{{CIDR: "198.19.128.0/17", Communities: []string{"64512:7"}}, {CIDR: "198.19.200.0/31", Aggregate: true}}}
}

// TestSpeakerAdvertises: a router gets each announced VIP of both
// families with its range's community and the family's next hop, an
// aggregate once its range is whole, and loses what is withdrawn.
func TestSpeakerAdvertises(t *testing.T) {
	r := newRouter(t)
	sp := newTestSpeaker(t, speakerConfig(r.port))
	vips := []netip.Addr{netip.MustParseAddr("198.19.128.1"), netip.MustParseAddr("2001:2:0:c000::1"), netip.MustParseAddr("198.19.200.0")}
	if err := sp.Update(vips, nil); err != nil {
		t.Fatal(err)
	}
	sp.Synced()
	want := func(what string, routes ...string) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, what, func() (bool, string) {
			got := r.routes()
			return slices.Equal(got, routes), strings.Join(got, "; ")
		})
	}
	want("the announced VIPs", "198.19.128.1/32 via 127.0.0.1 64512:7", "198.19.200.0/32 via 127.0.0.1", "2001:2:0:c000::1/128 via 2001:2::1")
	// What the router sends is not taken: the speaker's table holds its
	// own routes only (a default-reject import policy would have dropped
	// those too, and a router's routes would pass on to other routers).
	own, err := r.originate("198.18.5.0/24")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the router's route sent", func() (bool, string) {
		sent := false
		_ = r.s.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
			sent = p.GetState().GetMessages().GetSent().GetUpdate() > 0
		})
		return sent, ""
	})
	var rib []string
	_ = sp.s.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_IPv4_UC}, func(n bgp.NLRI, _ []*apiutil.Path) {
		rib = append(rib, n.String())
	})
	slices.Sort(rib)
	if !slices.Equal(rib, []string{"198.19.128.1/32", "198.19.200.0/32"}) || own == "" {
		t.Errorf("the speaker's IPv4 table: %v", rib)
	}
	if err := sp.Update([]netip.Addr{netip.MustParseAddr("198.19.200.1")}, []netip.Addr{vips[0]}); err != nil {
		t.Fatal(err)
	}
	want("the aggregate, one VIP less", "198.18.5.0/24 via 127.0.0.1", "198.19.200.0/31 via 127.0.0.1", "2001:2:0:c000::1/128 via 2001:2::1")
	// The session's prefixes per family, as the router has them: the
	// aggregate (IPv4), the IPv6 host route; the router's route received.
	testutil.Eventually(t, 10*time.Second, "the session's prefix counts", func() (bool, string) {
		ss := sp.Sessions()
		want := []FamilyCounts{{Family: "ipv4", Advertised: 1, Received: 1}, {Family: "ipv6", Advertised: 1}}
		return len(ss) == 1 && ss[0].State == "established" && ss[0].Since != "" && slices.Equal(ss[0].Families, want), fmt.Sprintf("%+v", ss)
	})
	if got := sp.Advertised(); len(got) != 2 || got[0].Prefix != "198.19.200.0/31" {
		t.Errorf("advertised %+v", got)
	}
}

// TestSpeakerRestartWithdrawsNothing: a speaker process that leaves at
// SIGTERM and another that takes over: the router (a graceful restart
// helper) keeps the routes meanwhile, as stale, and withdraws none; the
// new speaker's End-of-RIB clears the stale marks.
func TestSpeakerRestartWithdrawsNothing(t *testing.T) {
	r := newRouter(t)
	spec, _ := json.Marshal(childSpec{Config: speakerConfig(r.port), VIPs: []string{"198.19.128.1", "198.19.128.2", "2001:2:0:c000::1"}})
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "FLOWLB_BGP_CHILD="+string(spec))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd
	}
	full := []string{"198.19.128.1/32 via 127.0.0.1 64512:7", "198.19.128.2/32 via 127.0.0.1 64512:7", "2001:2:0:c000::1/128 via 2001:2::1"}
	first := start()
	testutil.Eventually(t, 15*time.Second, "the first speaker's routes", func() (bool, string) {
		got := r.routes()
		return slices.Equal(got, full), strings.Join(got, "; ")
	})
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first speaker: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the session down, the routes kept as stale", func() (bool, string) {
		got := r.routes()
		return !r.established() && len(got) == 3 && strings.HasSuffix(got[0], " stale"), strings.Join(got, "; ")
	})
	start()
	testutil.Eventually(t, 15*time.Second, "the second speaker's routes, none stale", func() (bool, string) {
		got := r.routes()
		return r.established() && slices.Equal(got, full), strings.Join(got, "; ")
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.withdrawn) > 0 {
		t.Errorf("the router withdrew %v across the restart", r.withdrawn)
	}
}

// peerBFD reports whether the speaker has BFD on for its one peer.
func peerBFD(sp *Speaker) bool {
	on := false
	_ = sp.s.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) { on = p.GetBfd().GetEnabled() })
	return on
}

// TestBFDOnlyWhileEstablished: a peer's BFD is off until its session is
// established, on while it is, and off again once the session is down
// (a router recreates its BFD session with each BGP session; a BFD
// already up with the previous one flapped every fresh session).
func TestBFDOnlyWhileEstablished(t *testing.T) {
	port := freePort(t)
	c := speakerConfig(port)
	c.Peers[0].BFD = BFD{Enabled: true}
	sp := newTestSpeaker(t, c)
	sp.Synced()
	// No router yet: the session tries to connect, BFD stays off.
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if peerBFD(sp) {
			t.Fatal("BFD on before the session is established")
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := newRouterAt(t, port)
	testutil.Eventually(t, 10*time.Second, "BFD on with the session established", func() (bool, string) {
		return r.established() && peerBFD(sp), fmt.Sprint("established ", r.established())
	})
	r.s.Stop()
	testutil.Eventually(t, 15*time.Second, "BFD off with the session down", func() (bool, string) {
		return !peerBFD(sp), ""
	})
}
