package agent

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/node/health"
	"github.com/flowlb/flowlb/internal/shared/flowpb"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// TestChecks: the server's probes, translated as the stream translates
// them, as the health runner takes them.
func TestChecks(t *testing.T) {
	v4 := netip.MustParseAddr("198.18.17.2")
	mapped := netip.MustParseAddr("::ffff:198.18.17.2").As16()
	for _, tc := range []struct {
		name  string
		probe *agentv1.Probe
		want  []health.Check
	}{
		{"HTTP probe, every field", &agentv1.Probe{MemberId: "m1", Address: v4.AsSlice(), Port: 8080, Type: "HTTP", DelayMs: 5000, TimeoutMs: 3000,
			MaxRetries: 2, MaxRetriesDown: 4, HttpMethod: "HEAD", UrlPath: "/healthz", ExpectedCodes: "200-204", HttpVersion: "1.1",
			DomainName: "example.test", InitialStatus: "ONLINE"},
			[]health.Check{{MemberID: "m1", Target: health.Target{Address: v4, Port: 8080, Type: "HTTP", Timeout: 3 * time.Second,
				Method: "HEAD", Path: "/healthz", ExpectedCodes: "200-204", HTTPVersion: "1.1", DomainName: "example.test"},
				Delay: 5 * time.Second, MaxRetries: 2, MaxRetriesDown: 4, Initial: "ONLINE"}}},
		{"IPv4-mapped address probed as IPv4", &agentv1.Probe{MemberId: "m1", Address: mapped[:], Port: 80, Type: "TCP"},
			[]health.Check{{MemberID: "m1", Target: health.Target{Address: v4, Port: 80, Type: "TCP"}}}},
		{"no usable address", &agentv1.Probe{MemberId: "m1", Address: []byte{1, 2, 3}, Type: "TCP"}, []health.Check{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checks([]flows.Probe{flowpb.ProbeFromProto(tc.probe)}); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
