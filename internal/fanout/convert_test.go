package fanout

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/flows"
)

// TestServiceRoundTrip: every field of a service survives the wire.
func TestServiceRoundTrip(t *testing.T) {
	s := flows.Service{
		Key:            flows.Key{VIP: netip.MustParseAddr("198.19.0.10"), Protocol: flows.UDP, Port: 53},
		LoadBalancerID: "lb", ListenerID: "l", PoolID: "p", Algorithm: flows.SourceIP,
		Persistence:     &flows.Persistence{Type: "SOURCE_IP", Timeout: 90 * time.Second},
		AllowedCIDRs:    []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		ConnectionLimit: 10,
		Backends: []flows.Backend{
			{MemberID: "m1", Address: netip.MustParseAddr("198.18.17.2"), Port: 5353, Weight: 3, Node: "n1", Zones: []string{"zone-a", "zone-b"}},
			{MemberID: "m2", Address: netip.MustParseAddr("198.18.18.2"), Port: 5353, Weight: 1},
		},
		LocalOnly: true, InternalLocal: true, PreferClose: true,
	}
	b, err := proto.Marshal(ServiceToProto(s))
	if err != nil {
		t.Fatal(err)
	}
	var p agentv1.Service
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if got := ServiceFromProto(&p); !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n got  %+v\n want %+v", got, s)
	}
}
