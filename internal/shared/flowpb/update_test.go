package flowpb

import (
	"net/netip"
	"reflect"
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// fullUpdate has every field of an update set.
func fullUpdate() flows.Update {
	s := fullService()
	other := s
	other.Key.Port = 54
	upsert := s
	upsert.Key.VIP, upsert.LoadBalancerID = netip.MustParseAddr("198.19.0.11"), "lb-b"
	p := fullProbe()
	p.Node = "" // not sent
	return flows.Update{Epoch: "e1", Revision: 42, Snapshot: true,
		LoadBalancers: []flows.LoadBalancerServices{{ID: "lb", Services: []flows.Service{s, other}}, {ID: "lb-c", Services: []flows.Service{}}},
		Deletes:       []flows.Key{{VIP: netip.MustParseAddr("198.19.0.12"), Protocol: flows.TCP, Port: 80}},
		Upserts:       []flows.Service{upsert},
		ProbesSet:     true, Probes: []flows.Probe{p},
		L2Set: true, L2VIPs: []netip.Addr{netip.MustParseAddr("198.19.250.10"), netip.MustParseAddr("2001:2:0:c000::a")}}
}

// TestUpdateRoundTrip: an update survives the wire whole.
func TestUpdateRoundTrip(t *testing.T) {
	u := fullUpdate()
	if got := UpdateFromProto(wire(t, UpdateToProto(u))); !reflect.DeepEqual(got, u) {
		t.Errorf("update:\n got  %+v\n want %+v", got, u)
	}
	empty := flows.Update{Revision: 7}
	if got := UpdateFromProto(wire(t, UpdateToProto(empty))); !reflect.DeepEqual(got, empty) {
		t.Errorf("empty update: %+v", got)
	}
}

// TestUpdateEveryProtoFieldSet: as TestEveryProtoFieldSet, for the update
// itself.
func TestUpdateEveryProtoFieldSet(t *testing.T) {
	r := UpdateToProto(fullUpdate()).ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		if f := fields.Get(i); !r.Has(f) {
			t.Errorf("Update.%s is not set by the encoder", f.Name())
		}
	}
}

// TestUpdateEntryIsTheClaim: a service in a load balancer's entry is that
// load balancer's, whatever its own field says; an upsert keeps its own.
func TestUpdateEntryIsTheClaim(t *testing.T) {
	s := fullService()
	p := &agentv1.Update{Loadbalancers: []*agentv1.LoadBalancerServices{LoadBalancerServicesToProto("lb-a", []flows.Service{s})},
		Upserts: []*agentv1.Service{ServiceToProto(s)}}
	p.Loadbalancers[0].Services[0].LoadbalancerId = "lb-b"
	u := UpdateFromProto(wire(t, p))
	if got := u.LoadBalancers[0].Services[0].LoadBalancerID; got != "lb-a" {
		t.Errorf("entry's service of %q, want lb-a", got)
	}
	if got := u.Upserts[0].LoadBalancerID; got != s.LoadBalancerID {
		t.Errorf("upsert of %q, want %q", got, s.LoadBalancerID)
	}
}

// updatesEqual compares two updates by their values' own equality.
func updatesEqual(a, b flows.Update) bool {
	if a.Epoch != b.Epoch || a.Revision != b.Revision || a.Snapshot != b.Snapshot || a.ProbesSet != b.ProbesSet ||
		len(a.LoadBalancers) != len(b.LoadBalancers) || len(a.Deletes) != len(b.Deletes) || len(a.Upserts) != len(b.Upserts) || len(a.Probes) != len(b.Probes) {
		return false
	}
	same := func(x, y []flows.Service) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !x[i].Equal(y[i]) || x[i].Key != y[i].Key {
				return false
			}
		}
		return true
	}
	for i := range a.LoadBalancers {
		if a.LoadBalancers[i].ID != b.LoadBalancers[i].ID || !same(a.LoadBalancers[i].Services, b.LoadBalancers[i].Services) {
			return false
		}
	}
	for i := range a.Deletes {
		if a.Deletes[i] != b.Deletes[i] {
			return false
		}
	}
	for i := range a.Probes {
		if a.Probes[i] != b.Probes[i] {
			return false
		}
	}
	return same(a.Upserts, b.Upserts)
}
