package ebpf

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestDiffEntries: a map as read against the record: entries missing or
// of another value are written, another's are deleted.
func TestDiffEntries(t *testing.T) {
	v := func(n int) *int { return &n }
	for _, tc := range []struct {
		name     string
		want     map[string]*int
		got      map[string]int
		put, del []string
	}{
		{"same", map[string]*int{"a": v(1), "b": v(2)}, map[string]int{"a": 1, "b": 2}, nil, nil},
		{"deleted", map[string]*int{"a": v(1), "b": v(2)}, map[string]int{"b": 2}, []string{"a"}, nil},
		{"changed", map[string]*int{"a": v(1)}, map[string]int{"a": 3}, []string{"a"}, nil},
		{"another's", map[string]*int{"a": v(1)}, map[string]int{"a": 1, "z": 9, "y": 8}, nil, []string{"y", "z"}},
		{"emptied", map[string]*int{"b": v(1), "a": v(2)}, map[string]int{}, []string{"a", "b"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			put, del := diffEntries(tc.want, tc.got)
			if !slices.Equal(put, tc.put) || !slices.Equal(del, tc.del) {
				t.Errorf("put %v del %v, want put %v del %v", put, del, tc.put, tc.del)
			}
		})
	}
}

// TestVerifyRepairs: on the real kernel, an entry of the services map
// another process deleted, changed or added, a program detached from the
// cgroup (its link detached) and a link's pin removed are found by a
// check and repaired; a process of the cgroup reaches the VIP through
// the programs again, and a connection it held open across the repair
// still works. Nothing to repair: nothing written.
func TestVerifyRepairs(t *testing.T) {
	testutil.RequireRoot(t)
	pins := filepath.Join(testBPFFS(t), "flowlb")
	cg := testCgroup(t)
	dp, err := New(Config{Node: "n1", Cgroup: cg, PinDir: pins})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Remove()
	ctx := context.Background()
	web, other := service(80, flows.TCP, 1, 1, 0), service(81, flows.TCP, 0, 0, 1)
	if err := dp.Sync(ctx, tableOf(web, other)); err != nil {
		t.Fatal(err)
	}
	if check, err := dp.Verify(ctx); err != nil || check.Repairs() != 0 {
		t.Fatalf("check of what was just written: %+v, %v", check, err)
	}
	services, err := ebpf.LoadPinnedMap(filepath.Join(pins, socklbMapServices), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer services.Close()
	k80 := encodeKey(web.Key)
	k81 := encodeKey(other.Key)
	var v81 svcVal
	if err := services.Lookup(k81, &v81); err != nil {
		t.Fatal(err)
	}
	enterCgroup(t, cg)
	inNetns(t, append(slices.Clone(backends), vip), func() {
		serve(t)
		echoAt(t, netip.AddrPortFrom(backends[2], 9090))
		echoSvc := flows.Service{Key: flows.Key{VIP: vip, Protocol: flows.TCP, Port: 90}, Algorithm: flows.RoundRobin,
			Backends: []flows.Backend{{Address: backends[2], Port: 9090, Weight: 1}}}
		if err := dp.Apply(ctx, []flows.Service{echoSvc}, nil); err != nil {
			t.Fatal(err)
		}
		answers := func() bool {
			who, _, err := dial(netip.AddrPortFrom(vip, 80))
			return err == nil && (who == backends[0].String() || who == backends[1].String())
		}
		for _, tc := range []struct {
			name   string
			change func()
			want   map[string]int
		}{
			{"entry deleted", func() {
				if err := services.Delete(k80); err != nil {
					t.Fatal(err)
				}
			}, map[string]int{dataplane.EBPFMap: 1}},
			{"entry changed", func() {
				if err := services.Put(k80, v81); err != nil { // port 80 to port 81's backend
					t.Fatal(err)
				}
			}, map[string]int{dataplane.EBPFMap: 1}},
			{"another's entry", func() {
				k := encodeKey(flows.Key{VIP: vip, Protocol: flows.TCP, Port: 82})
				if err := services.Put(k, v81); err != nil {
					t.Fatal(err)
				}
			}, map[string]int{dataplane.EBPFMap: 1}},
			{"program detached", func() {
				l, err := link.LoadPinnedLink(filepath.Join(pins, "link_"+socklbProgConnect4), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				if err := l.Detach(); err != nil {
					t.Fatal(err)
				}
				if n := attached(t, cg, ebpf.AttachCGroupInet4Connect); n != 0 {
					t.Fatalf("%d connect4 programs attached after the detach", n)
				}
			}, map[string]int{dataplane.EBPFAttach: 1}},
			{"pin removed", func() {
				if err := os.Remove(filepath.Join(pins, "link_"+socklbProgGetpeername4)); err != nil {
					t.Fatal(err)
				}
			}, map[string]int{dataplane.EBPFAttach: 1}},
		} {
			// Not t.Run: a subtest's goroutine would leave the
			// namespace's thread.
			h := holdAt(t, netip.AddrPortFrom(vip, 90))
			tc.change()
			check, err := dp.Verify(ctx)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if !reflect.DeepEqual(check.Repaired, tc.want) {
				t.Errorf("%s: repaired %v (%v), want %v", tc.name, check.Repaired, check.What, tc.want)
			}
			if !answers() {
				t.Errorf("%s: the VIP does not answer through the programs after the repair", tc.name)
			}
			h.use(t)
			if check, err := dp.Verify(ctx); err != nil || check.Repairs() != 0 {
				t.Errorf("%s: check after the repair: %+v, %v", tc.name, check, err)
			}
		}
		for _, h := range hooks {
			if n := attached(t, cg, h.attach); n != 1 {
				t.Errorf("%s: %d programs attached, want 1", h.name, n)
			}
		}
		if _, err := os.Stat(filepath.Join(pins, "link_"+socklbProgGetpeername4)); err != nil {
			t.Errorf("pin after the repair: %v", err)
		}
	})
}

// echoAt serves a: every line a connection sends comes back.
func echoAt(t testing.TB, a netip.AddrPort) {
	t.Helper()
	ln, err := net.Listen("tcp", a.String())
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
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// heldConn is a TCP connection kept open across a repair.
type heldConn struct {
	c net.Conn
	r *bufio.Reader
}

func holdAt(t *testing.T, a netip.AddrPort) *heldConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", a.String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &heldConn{c: c, r: bufio.NewReader(c)}
	h.use(t)
	return h
}

// use sends a line and reads it back.
func (h *heldConn) use(t *testing.T) {
	t.Helper()
	_ = h.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(h.c, "ping\n"); err != nil {
		t.Fatalf("held connection: %v", err)
	}
	if got, err := h.r.ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("held connection: read %q, %v", got, err)
	}
}
