package ebpf

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// A trace of a decoded entry names the VIP and, by the entry's
// algorithm, what picks the slot, then every backend with its share;
// or the refusal; or, without an entry, that nftables serves the VIP.
func TestWriteTrace(t *testing.T) {
	vip, vip6 := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("2001:2:0:1::10")
	entry := func(s flows.Service) *Service {
		if s.Key.VIP.Is4() {
			k, v, ok := encode(s, "n1", "")
			if !ok {
				t.Fatalf("%v not carried", s.Key)
			}
			d := decode(k, v)
			return &d
		}
		k, v, ok := encode6(s, "n1", "")
		if !ok {
			t.Fatalf("%v not carried", s.Key)
		}
		d := decode6(k, v)
		return &d
	}
	web := flows.Key{VIP: vip, Protocol: flows.TCP, Port: 80}
	dns := flows.Key{VIP: vip, Protocol: flows.UDP, Port: 53}
	dns6 := flows.Key{VIP: vip6, Protocol: flows.UDP, Port: 53}
	two := []flows.Backend{be("198.18.17.2", 8080, 3, ""), be("198.18.18.2", 8080, 1, "")}
	for _, c := range []struct {
		name string
		key  flows.Key
		s    *Service
		want string
	}{{
		"round robin", web, entry(flows.Service{Key: web, Algorithm: flows.RoundRobin, Backends: two}),
		`198.19.0.1:80 TCP: ROUND_ROBIN, translated at connect() to the backend of one of 61 slots:
  chosen by a random slot per connect(); an unconnected UDP socket's datagrams keep one slot per socket (its cookie's hash)
  198.18.17.2:8080 46/61 slots (75.4%)
  198.18.18.2:8080 15/61 slots (24.6%)
`}, {
		"source ip", web, entry(flows.Service{Key: web, Algorithm: flows.SourceIP, Backends: two}),
		`198.19.0.1:80 TCP: SOURCE_IP, translated at connect() to the backend of one of 61 slots:
  chosen by the slot of the client's network namespace (its cookie's hash): one backend per pod or for the host, not per source address
  198.18.17.2:8080 46/61 slots (75.4%)
  198.18.18.2:8080 15/61 slots (24.6%)
`}, {
		"source ip port, IPv6", dns6, entry(flows.Service{Key: dns6, Algorithm: flows.SourceIPPort,
			Backends: []flows.Backend{be("2001:2:0:2::2", 8053, 1, ""), be("2001:2:0:2::3", 8053, 1, "")}}),
		`[2001:2:0:1::10]:53 UDP: SOURCE_IP_PORT, translated at connect() to the backend of one of 61 slots:
  chosen by the slot of the client's socket (its cookie's hash: the source port is not chosen yet at connect()); one backend per socket
  [2001:2:0:2::2]:8053 31/61 slots (50.8%)
  [2001:2:0:2::3]:8053 30/61 slots (49.2%)
`}, {
		"persistence", web, entry(flows.Service{Key: web, Algorithm: flows.RoundRobin, Backends: two[:1],
			Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: 30 * time.Second}}),
		`198.19.0.1:80 TCP: ROUND_ROBIN, translated at connect() to the backend of one of 61 slots:
  chosen by a random slot per connect(); an unconnected UDP socket's datagrams keep one slot per socket (its cookie's hash)
  SOURCE_IP persistence 30s: a client (its network namespace) that used a backend of this service within that time, and whose backend still has slots, keeps it
  198.18.17.2:8080 61/61 slots (100.0%)
`}, {
		"no backend", dns, entry(flows.Service{Key: dns}),
		"198.19.0.1:53 UDP: refused: no usable backend (connect() and sendmsg() fail with ECONNREFUSED)\n",
	}, {
		"not carried", dns, nil,
		"198.19.0.1:53 UDP: not in the eBPF maps (nftables serves it): connect() keeps the VIP; trace it without --bpf-pin-dir\n",
	}} {
		var out bytes.Buffer
		WriteTrace(&out, c.key, c.s)
		if out.String() != c.want {
			t.Errorf("%s:\n%s\nwant:\n%s", c.name, out.String(), c.want)
		}
	}
}

// TestTracePinned: Trace, as agent trace --bpf-pin-dir runs it, reads
// the pinned maps of a running data plane without changing them, and
// names each VIP's backends and shares, the refusal of a service
// without backends, and the services left to nftables.
func TestTracePinned(t *testing.T) {
	testutil.RequireRoot(t)
	cg := testCgroup(t)
	fs := testBPFFS(t)
	pins := filepath.Join(fs, "flowlb")
	dp, err := New(Config{Node: "n1", Cgroup: cg, PinDir: pins})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dp.Remove(); err != nil {
			t.Error(err)
		}
	}()
	web, sticky, empty, acl := service(80, flows.TCP, 1, 1, 2), service(81, flows.TCP, 1, 0, 2), service(82, flows.TCP), service(83, flows.TCP, 1)
	sticky.Algorithm = flows.SourceIP
	sticky.Persistence = &flows.Persistence{Type: "SOURCE_IP", Timeout: time.Minute}
	acl.AllowedCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
	if err := dp.Sync(context.Background(), tableOf(web, sticky, empty, acl)); err != nil {
		t.Fatal(err)
	}
	before, err := Dump(pins)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  flows.Key
		want []string
	}{
		{web.Key, []string{"198.19.0.10:80 TCP: ROUND_ROBIN,", "chosen by a random slot per connect()",
			"198.18.17.4:8080 31/61 slots (50.8%)", "198.18.17.2:8080 15/61 slots (24.6%)", "198.18.17.3:8080 15/61 slots (24.6%)"}},
		{sticky.Key, []string{"198.19.0.10:81 TCP: SOURCE_IP,", "client's network namespace", "SOURCE_IP persistence 1m0s: a client",
			"198.18.17.4:8080 41/61 slots (67.2%)", "198.18.17.2:8080 20/61 slots (32.8%)"}},
		{empty.Key, []string{"198.19.0.10:82 TCP: refused: no usable backend"}},
		{acl.Key, []string{"198.19.0.10:83 TCP: not in the eBPF maps (nftables serves it)"}},
		{flows.Key{VIP: vip, Protocol: flows.UDP, Port: 80}, []string{"198.19.0.10:80 UDP: not in the eBPF maps (nftables serves it)"}},
		{flows.Key{VIP: vip, Protocol: flows.SCTP, Port: 80}, []string{"198.19.0.10:80 SCTP: not in the eBPF maps (nftables serves it)"}},
		{flows.Key{VIP: netip.MustParseAddr("2001:2::10"), Protocol: flows.TCP, Port: 80}, []string{"[2001:2::10]:80 TCP: not in the eBPF maps (nftables serves it)"}},
	} {
		var out bytes.Buffer
		if err := Trace(&out, pins, c.key); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("trace of %v lacks %q:\n%s", c.key, w, out.String())
			}
		}
	}
	after, err := Dump(pins)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the maps changed under the trace:\n%+v\nthen\n%+v", before, after)
	}
	for _, k := range []flows.Key{web.Key, {VIP: vip, Protocol: flows.SCTP, Port: 80}} {
		if err := Trace(io.Discard, filepath.Join(fs, "none"), k); err == nil {
			t.Fatalf("a trace of %v in a directory without pins did not fail", k)
		}
	}
}
