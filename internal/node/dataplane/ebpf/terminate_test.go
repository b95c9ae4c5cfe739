package ebpf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestEndedPairs: the pairs a change ends are the backends that held a
// slot before and hold none after, each once; a deleted or refusing
// service ends all of them, a refusing one had none.
func TestEndedPairs(t *testing.T) {
	val := func(s flows.Service) *svcVal {
		_, v, ok := encode(s, "n1", "")
		if !ok {
			t.Fatalf("%v not carried", s.Key)
		}
		return &v
	}
	pair := func(i int, port uint16) string { return fmt.Sprintf("%s:%d", backends[i], port) }
	moved := service(53, flows.UDP, 1, 1)
	moved.Backends[1].Port = 8081
	for _, c := range []struct {
		name     string
		old, now flows.Service
		deleted  bool
		want     []string
	}{
		{"one of two removed", service(53, flows.UDP, 1, 1), service(53, flows.UDP, 0, 1), false, []string{pair(0, 8080)}},
		{"weights changed", service(53, flows.UDP, 1, 1), service(53, flows.UDP, 3, 1), false, nil},
		{"a backend added", service(53, flows.UDP, 1, 0), service(53, flows.UDP, 1, 1), false, nil},
		{"another port of the same address", service(53, flows.UDP, 1, 1), moved, false, []string{pair(1, 8080)}},
		{"no backend left", service(53, flows.UDP, 1, 1), service(53, flows.UDP), false, []string{pair(0, 8080), pair(1, 8080)}},
		{"the service deleted", service(53, flows.UDP, 1, 1, 2), flows.Service{}, true, []string{pair(0, 8080), pair(1, 8080), pair(2, 8080)}},
		{"refusing before", service(53, flows.UDP), service(53, flows.UDP, 1), false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var now *svcVal
			if !c.deleted {
				now = val(c.now)
			}
			k := encodeKey(c.old.Key)
			var got []string
			for _, p := range endedPairs4(k, val(c.old), now) {
				if p.Svc != k {
					t.Errorf("pair of service %v, want %v", p.Svc, k)
				}
				got = append(got, fmt.Sprintf("%s:%d", decodeAddr(p.Be.Addr), decodePort(p.Be.Port)))
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("ended %v, want %v", got, c.want)
			}
		})
	}
	// IPv6: the same rule.
	vip6, b6 := netip.MustParseAddr("2001:2:0:1::10"), []netip.Addr{netip.MustParseAddr("2001:2:0:2::2"), netip.MustParseAddr("2001:2:0:2::3")}
	s6 := func(bs ...netip.Addr) *svcVal6 {
		s := flows.Service{Key: flows.Key{VIP: vip6, Protocol: flows.UDP, Port: 53}, Algorithm: flows.RoundRobin}
		for _, b := range bs {
			s.Backends = append(s.Backends, flows.Backend{Address: b, Port: 8080, Weight: 1})
		}
		_, v, _ := encode6(s, "n1", "")
		return &v
	}
	k6 := encodeKey6(flows.Key{VIP: vip6, Protocol: flows.UDP, Port: 53})
	if got := endedPairs6(k6, s6(b6...), s6(b6[1])); len(got) != 1 || decodeAddr6(got[0].Be.Addr) != b6[0] || got[0].Svc != k6 {
		t.Errorf("IPv6: ended %v, want %s only", got, b6[0])
	}
	if got := endedPairs6(k6, s6(b6...), nil); len(got) != 2 {
		t.Errorf("IPv6, deleted: ended %v, want both backends", got)
	}
	if terminates(unix.IPPROTO_TCP) || !terminates(unix.IPPROTO_UDP) {
		t.Error("sockets of UDP services only are to be destroyed")
	}
}

// diagDestroyReq is an inet_diag_req_v2 (linux/inet_diag.h) naming one
// socket by its addresses, for SOCK_DESTROY.
type diagDestroyReq struct {
	proto         uint8
	local, remote netip.AddrPort
}

func (r diagDestroyReq) Len() int { return 56 }

func (r diagDestroyReq) Serialize() []byte {
	b := make([]byte, r.Len())
	b[0], b[1] = unix.AF_INET, r.proto
	binary.NativeEndian.PutUint32(b[4:], 0xffffffff) // any state
	binary.BigEndian.PutUint16(b[8:], r.local.Port())
	binary.BigEndian.PutUint16(b[10:], r.remote.Port())
	l, rm := r.local.Addr().As4(), r.remote.Addr().As4()
	copy(b[12:], l[:])
	copy(b[28:], rm[:])
	binary.NativeEndian.PutUint32(b[48:], nl.TCPDIAG_NOCOOKIE) // no cookie: by addresses
	binary.NativeEndian.PutUint32(b[52:], nl.TCPDIAG_NOCOOKIE)
	return b
}

// sockDiagDestroy sends SOCK_DESTROY over NETLINK_SOCK_DIAG in the
// calling thread's network namespace.
func sockDiagDestroy(r diagDestroyReq) error {
	req := nl.NewNetlinkRequest(nl.SOCK_DESTROY, unix.NLM_F_ACK)
	req.AddData(r)
	_, err := req.Execute(unix.NETLINK_INET_DIAG, 0)
	return err
}

// TestSockDiagDestroy is the experiment with SOCK_DESTROY over
// NETLINK_SOCK_DIAG (CONFIG_INET_DIAG_DESTROY): this kernel destroys a
// connected TCP socket and a connected UDP socket named by their
// addresses, and their owners get ECONNABORTED. The library's
// SocketDestroy sends it for TCP over IPv4 only; UDP needs the request
// written here. Nothing in the request says how the socket was
// connected (through a VIP or straight to the backend): the data plane
// uses the iterators instead (TestIteratorDestroy).
func TestSockDiagDestroy(t *testing.T) {
	testutil.InNewNetns(t, func(netns.NsHandle) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		tc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		peer, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		if err := netlink.SocketDestroy(tc.LocalAddr(), tc.RemoteAddr()); err != nil {
			t.Fatalf("SOCK_DESTROY of a TCP socket: %v", err)
		}
		tc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := tc.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
			t.Errorf("read on the destroyed TCP socket: %v, want ECONNABORTED", err)
		}
		// The peer was sent a reset.
		peer.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read on the destroyed socket's peer: %v, want ECONNRESET", err)
		}

		srv, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		uc, err := net.Dial("udp", srv.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		if err := netlink.SocketDestroy(uc.LocalAddr(), uc.RemoteAddr()); !errors.Is(err, netlink.ErrNotImplemented) {
			t.Errorf("the library's SocketDestroy of a UDP socket: %v, want its ErrNotImplemented", err)
		}
		local, remote := netip.MustParseAddrPort(uc.LocalAddr().String()), netip.MustParseAddrPort(uc.RemoteAddr().String())
		if err := sockDiagDestroy(diagDestroyReq{proto: unix.IPPROTO_UDP, local: local, remote: remote}); err != nil {
			t.Fatalf("SOCK_DESTROY of a UDP socket: %v", err)
		}
		uc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := uc.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
			t.Errorf("read on the destroyed UDP socket: %v, want ECONNABORTED", err)
		}
		// Destroyed, the socket is no longer connected.
		if _, err := uc.Write([]byte("q")); !errors.Is(err, syscall.EDESTADDRREQ) {
			t.Errorf("write on the destroyed UDP socket: %v, want EDESTADDRREQ", err)
		}
		// Once gone, it is not found again.
		if err := sockDiagDestroy(diagDestroyReq{proto: unix.IPPROTO_UDP, local: local, remote: remote}); !errors.Is(err, unix.ENOENT) {
			t.Errorf("SOCK_DESTROY of the destroyed UDP socket again: %v, want ENOENT", err)
		}
	})
}

// echo serves TCP on every backend's port 9090: each read is answered
// with the backend's address, for as long as the connection lasts.
func echo(t testing.TB, addrs ...netip.Addr) {
	t.Helper()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 9090).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					b := make([]byte, 64)
					for {
						if _, err := c.Read(b); err != nil {
							return
						}
						if _, err := c.Write([]byte(a.String())); err != nil {
							return
						}
					}
				}()
			}
		}()
	}
}

// TestIteratorDestroy is the experiment with BPF iterators: this kernel
// loads iter/tcp and iter/udp programs that call bpf_sock_destroy()
// (the verifier accepts them, CO-RE relocates the socket fields), runs
// them in a network namespace the walking thread enters, and they
// destroy exactly the sockets translated to the pairs they are given,
// TCP and UDP alike.
func TestIteratorDestroy(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	dp, err := New(Config{Node: "n1", Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dp.Remove(); err != nil {
			t.Error(err)
		}
	}()
	if dp.termErr != nil || dp.term == nil {
		t.Fatalf("the socket iterators did not load: %v", dp.termErr)
	}
	web := service(9090, flows.TCP, 1)
	web.Backends[0].Port = 9090 // echo's, which keeps the connection
	dns := service(53, flows.UDP, 1)
	if err := dp.Sync(context.Background(), tableOf(web, dns)); err != nil {
		t.Fatal(err)
	}
	enterCgroup(t, cg)
	inNetns(t, backends, func() {
		serve(t)
		echo(t, backends[0])
		tc, err := net.Dial("tcp", netip.AddrPortFrom(vip, 9090).String())
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		if who := exchange(t, tc); who != backends[0].String() {
			t.Fatalf("TCP answered by %q", who)
		}
		uc, err := net.Dial("udp", netip.AddrPortFrom(vip, 53).String())
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		if who := exchange(t, uc); who != backends[0].String() {
			t.Fatalf("UDP answered by %q", who)
		}
		nss, err := socketNetns(cg)
		if err != nil {
			t.Fatal(err)
		}
		pairOf := func(s flows.Service) pairKey {
			k, v, _ := encode(s, "n1", "")
			return pairKey{Svc: k, Be: v.Slots[0]}
		}
		res := dp.term.run(nss, []pairKey{pairOf(web), pairOf(dns)}, nil)
		if res.Err != nil || res.Destroyed != 2 || res.Failed != 0 {
			t.Fatalf("iterators: %+v, want 2 sockets destroyed", res)
		}
		tc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := tc.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
			t.Errorf("read on the destroyed TCP socket: %v, want ECONNABORTED", err)
		}
		uc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := uc.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
			t.Errorf("read on the destroyed UDP socket: %v, want ECONNABORTED", err)
		}
		// Run again: nothing left to destroy, and the maps of pairs are
		// empty after each run.
		if res := dp.term.run(nss, []pairKey{pairOf(web), pairOf(dns)}, nil); res.Err != nil || res.Destroyed != 0 {
			t.Errorf("second run: %+v, want nothing destroyed", res)
		}
		var k pairKey
		var v uint8
		if it := dp.term.objs.Ended.Iterate(); it.Next(&k, &v) || it.Err() != nil {
			t.Errorf("ended holds %v after a run (%v)", k, it.Err())
		}
	})
}

// TestEndedBackendSockets: when a backend leaves a UDP service, the
// connected UDP sockets the programs translated to it are destroyed, in
// the namespace of the cgroup's thread that made them: their owners get
// ECONNABORTED and a new socket reaches a backend the service still has.
// The service's sockets on its other backends, sockets connected to the
// backend's address itself, and TCP connections translated to the
// backend are untouched; deleting the service ends the rest. IPv6 alike.
func TestEndedBackendSockets(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	dp, err := New(Config{Node: "n1", Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dp.Remove(); err != nil {
			t.Error(err)
		}
	}()
	vip6 := netip.MustParseAddr("2001:2:0:1::10")
	b6 := []netip.Addr{netip.MustParseAddr("2001:2:0:2::2"), netip.MustParseAddr("2001:2:0:2::3")}
	dns6 := func(bs ...netip.Addr) flows.Service {
		s := flows.Service{Key: flows.Key{VIP: vip6, Protocol: flows.UDP, Port: 53}, Algorithm: flows.RoundRobin}
		for _, b := range bs {
			s.Backends = append(s.Backends, flows.Backend{Address: b, Port: 8080, Weight: 1})
		}
		return s
	}
	web := func(weights ...int) flows.Service {
		s := service(9090, flows.TCP, weights...)
		for i := range s.Backends {
			s.Backends[i].Port = 9090
		}
		return s
	}
	ctx := context.Background()
	if err := dp.Sync(ctx, tableOf(service(53, flows.UDP, 1, 1), web(1, 1), dns6(b6...))); err != nil {
		t.Fatal(err)
	}
	enterCgroup(t, cg)
	inNetns(t, append(slices.Clone(backends), b6...), func() {
		serve(t)
		echo(t, backends[:2]...)
		for _, a := range b6 {
			serveAt(t, a)
			testutil.Eventually(t, 5*time.Second, "IPv6 backend "+a.String()+" reachable", func() (bool, string) {
				_, _, err := dial(netip.AddrPortFrom(a, 8080))
				return err == nil, fmt.Sprint(err)
			})
		}
		var all []net.Conn
		defer func() {
			for _, c := range all {
				c.Close()
			}
		}()
		// connect opens n connected sockets to addr and returns them by
		// the backend that answers each.
		connect := func(network string, addr netip.AddrPort, n int) map[string][]net.Conn {
			out := map[string][]net.Conn{}
			for range n {
				c, err := net.Dial(network, addr.String())
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, c)
				who := exchange(t, c)
				out[who] = append(out[who], c)
			}
			return out
		}
		gone, kept := backends[0].String(), backends[1].String()
		// Random slots: 40 sockets reach both backends (but with 2^-39).
		udp := connect("udp", netip.AddrPortFrom(vip, 53), 40)
		tcp := connect("tcp", netip.AddrPortFrom(vip, 9090), 40)
		if len(udp[gone]) == 0 || len(udp[kept]) == 0 || len(tcp[gone]) == 0 {
			t.Fatalf("40 sockets through the VIPs reached UDP %v, TCP %v", udp, tcp)
		}
		direct := connect("udp", netip.AddrPortFrom(backends[0], 8080), 1)[gone][0]
		directKept := connect("udp", netip.AddrPortFrom(backends[1], 8080), 1)[kept][0]
		udp6 := connect("udp", netip.AddrPortFrom(vip6, 53), 40)
		if len(udp6) != 2 {
			t.Fatalf("40 sockets through the IPv6 VIP reached %v", udp6)
		}

		// The first backend leaves both IPv4 services, the first IPv6
		// backend its service.
		start := time.Now()
		if err := dp.Apply(ctx, []flows.Service{service(53, flows.UDP, 0, 1), web(0, 1), dns6(b6[1])}, nil); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		want := uint64(len(udp[gone]) + len(udp6[b6[0].String()]))
		if r := dp.lastTerm; r.Err != nil || r.Destroyed != want || r.Failed != 0 || r.Pairs != 2 {
			t.Fatalf("termination: %+v, want %d sockets of 2 pairs (the UDP services') destroyed", r, want)
		}
		t.Logf("Apply with %d pairs ended, %d namespaces walked, %d sockets destroyed: %v", dp.lastTerm.Pairs, dp.lastTerm.Namespaces, dp.lastTerm.Destroyed, took)
		aborted := func(what string, c net.Conn) {
			t.Helper()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNABORTED) {
				t.Errorf("%s: read %v, want ECONNABORTED", what, err)
			}
			if _, err := c.Write([]byte("q")); !errors.Is(err, syscall.EDESTADDRREQ) {
				t.Errorf("%s: write %v, want EDESTADDRREQ (no longer connected)", what, err)
			}
		}
		for _, c := range udp[gone] {
			aborted("a UDP socket of the VIP on the backend that left", c)
		}
		for _, c := range udp6[b6[0].String()] {
			aborted("a UDP socket of the IPv6 VIP on the backend that left", c)
		}
		same := func(what string, c net.Conn, who string) {
			t.Helper()
			if got := exchange(t, c); got != who {
				t.Errorf("%s: answered by %q, want %s", what, got, who)
			}
		}
		for _, c := range udp[kept] {
			same("a UDP socket of the VIP on the backend that stays", c, kept)
		}
		for _, c := range udp6[b6[1].String()] {
			same("a UDP socket of the IPv6 VIP on the backend that stays", c, b6[1].String())
		}
		same("a UDP socket connected to the backend's address", direct, gone)
		// TCP connections are left to end as TCP ends them: the backend
		// that left still answers its established ones.
		for who, cs := range tcp {
			for _, c := range cs {
				same("a TCP connection of the VIP", c, who)
			}
		}
		// The owner connects again: the VIP has one backend left.
		for range 10 {
			same("a new socket to the VIP", connect("udp", netip.AddrPortFrom(vip, 53), 1)[kept][0], kept)
		}

		// The service deleted: its sockets on the backend that stayed go
		// too; the socket connected to that backend's address stays.
		if err := dp.Apply(ctx, nil, []flows.Key{{VIP: vip, Protocol: flows.UDP, Port: 53}}); err != nil {
			t.Fatal(err)
		}
		if r := dp.lastTerm; r.Err != nil || r.Destroyed != uint64(len(udp[kept])+10) || r.Pairs != 1 {
			t.Fatalf("termination after the delete: %+v, want the %d sockets on %s", r, len(udp[kept])+10, kept)
		}
		for _, c := range udp[kept] {
			aborted("a UDP socket of the deleted service", c)
		}
		same("a UDP socket connected to the remaining backend's address", directKept, kept)
		same("a UDP socket connected to the removed backend's address", direct, gone)
	})
}
