package ebpf

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/flowlb/flowlb/internal/flows"
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
