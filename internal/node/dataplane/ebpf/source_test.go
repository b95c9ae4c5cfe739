package ebpf

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Offsets in the UAPI's struct bpf_sock_addr and struct bpf_sock.
const (
	sockAddrSk  = 64 // bpf_sock_addr.sk
	sockSrcIP4  = 24 // bpf_sock.src_ip4
	sockSrcPort = 44 // bpf_sock.src_port
)

// sourceProbe is a connect4 program that stores what it knows of the
// socket's own address, src_ip4 and src_port of ctx->sk, in seen[0].
func sourceProbe(t testing.TB, seen *ebpf.Map) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.CGroupSockAddr,
		AttachType: ebpf.AttachCGroupInet4Connect,
		License:    "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R6, asm.R1, sockAddrSk, asm.DWord),
			asm.JEq.Imm(asm.R6, 0, "out"),
			asm.LoadMem(asm.R7, asm.R6, sockSrcIP4, asm.Word),
			asm.LoadMem(asm.R8, asm.R6, sockSrcPort, asm.Word),
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),       // key
			asm.StoreMem(asm.RFP, -12, asm.R7, asm.Word), // value: src_ip4
			asm.StoreMem(asm.RFP, -8, asm.R8, asm.Word),  // value: src_port
			asm.LoadMapPtr(asm.R1, seen.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -12),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnMapUpdateElem.Call(),
			asm.Mov.Imm(asm.R0, 1).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// TestConnectHasNoSourceAddress is the evidence for leaving allowed_cidrs
// to nftables (docs/dataplane.md): at the connect4 hook an unbound
// socket, as a pod's client sockets are, has no source address yet (the
// kernel chooses it after the hook, by the route), so no program there
// can compare it with a service's allowed CIDRs; only a socket bound to
// an address before connect() has one.
func TestConnectHasNoSourceAddress(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	seen, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer seen.Close()
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupInet4Connect, Program: sourceProbe(t, seen)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	enterCgroup(t, cg)
	inNetns(t, backends, func() {
		serve(t)
		to := netip.AddrPortFrom(backends[1], 8080)
		for _, c := range []struct {
			name    string
			network string
			bind    *net.TCPAddr // nil: unbound
			want    netip.Addr
		}{
			{"unbound TCP", "tcp", nil, netip.IPv4Unspecified()},
			{"unbound UDP", "udp", nil, netip.IPv4Unspecified()},
			{"TCP bound to an address", "tcp", &net.TCPAddr{IP: backends[0].AsSlice()}, backends[0]},
		} {
			if err := seen.Put(uint32(0), [2]uint32{0xffffffff, 0xffffffff}); err != nil {
				t.Fatal(err)
			}
			d := net.Dialer{Timeout: 2 * time.Second}
			if c.bind != nil {
				d.LocalAddr = c.bind
			}
			conn, err := d.Dial(c.network, to.String())
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			local := netip.MustParseAddrPort(conn.LocalAddr().String())
			conn.Close()
			var v [2]uint32
			if err := seen.Lookup(uint32(0), &v); err != nil {
				t.Fatal(err)
			}
			got := decodeAddr(v[0])
			if got != c.want {
				t.Errorf("%s: connect4 saw source %s (port %d), want %s; the connected socket's address is %s", c.name, got, v[1], c.want, local)
			}
			// The kernel chose a source address all the same, after the hook.
			if !local.Addr().IsValid() || local.Addr().IsUnspecified() {
				t.Errorf("%s: connected from %s", c.name, local)
			}
		}
	})
}
