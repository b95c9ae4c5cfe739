package ebpf

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// A dump reads back what encode wrote: key, refusal, algorithm and each
// backend's slots.
func TestDumpReadsBackEncode(t *testing.T) {
	vip, vip6 := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("2001:2:0:1::10")
	k, v, _ := encode(flows.Service{Key: flows.Key{VIP: vip, Protocol: flows.TCP, Port: 80}, Algorithm: flows.SourceIP,
		Backends: []flows.Backend{be("198.18.17.2", 8080, 3, ""), be("198.18.18.2", 8080, 1, "")}}, "n1", "")
	refused, rv, _ := encode(flows.Service{Key: flows.Key{VIP: vip, Protocol: flows.UDP, Port: 53}}, "n1", "")
	k6, v6, _ := encode6(flows.Service{Key: flows.Key{VIP: vip6, Protocol: flows.UDP, Port: 53}, Algorithm: flows.RoundRobin,
		Persistence: &flows.Persistence{Type: "SOURCE_IP", Timeout: 90 * time.Second},
		Backends:    []flows.Backend{be("2001:2:0:2::2", 8053, 1, "")}}, "n1", "")
	var out bytes.Buffer
	WriteDump(&out, []Service{decode(k, v), decode(refused, rv), decode6(k6, v6)})
	want := `198.19.0.1:80 TCP: SOURCE_IP
  198.18.17.2:8080 46/61 slots
  198.18.18.2:8080 15/61 slots
198.19.0.1:53 UDP: refused (no usable backend)
[2001:2:0:1::10]:53 UDP: ROUND_ROBIN, SOURCE_IP persistence 1m30s
  [2001:2:0:2::2]:8053 61/61 slots
`
	if out.String() != want {
		t.Fatalf("dump:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	WriteDump(&out, nil)
	if out.String() != "no services\n" {
		t.Fatalf("empty dump: %q", out.String())
	}
}
