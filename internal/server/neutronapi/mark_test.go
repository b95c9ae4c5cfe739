package neutronapi

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store/memstore"
)

func TestMarks(t *testing.T) {
	for _, tc := range []struct {
		tags           []string
		ours, anyMarks bool
	}{
		{nil, false, false},
		{[]string{"env=prod"}, false, false},
		{[]string{"env=prod", "flowlb-deployment=a"}, true, true},
		{[]string{"flowlb-deployment=b"}, false, true},
		{[]string{"flowlb-deployment=ab"}, false, true},
		{[]string{"flowlb-deployment=b", "flowlb-deployment=a"}, true, true},
	} {
		ours, marked := marks(tc.tags, Mark("a"))
		if ours != tc.ours || marked != tc.anyMarks {
			t.Errorf("marks(%v) = %v, %v; want %v, %v", tc.tags, ours, marked, tc.ours, tc.anyMarks)
		}
	}
}

func TestCheckDeploymentID(t *testing.T) {
	for id, ok := range map[string]bool{"a": true, "prod-eu.1_x": true, "": false, "a,b": false, "a b": false,
		"x/y": false, strings.Repeat("a", 64): true, strings.Repeat("a", 65): false} {
		if err := CheckDeploymentID(id); (err == nil) != ok {
			t.Errorf("CheckDeploymentID(%q) = %v, want ok %v", id, err, ok)
		}
	}
}

// TestDeploymentID: the first ask writes a valid id, every later one
// (another replica of the same database) reads the same.
func TestDeploymentID(t *testing.T) {
	st := memstore.New()
	id, err := DeploymentID(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDeploymentID(id); err != nil {
		t.Fatal(err)
	}
	again, err := DeploymentID(context.Background(), st)
	if err != nil || again != id {
		t.Fatalf("second read %q %v, want %q", again, err, id)
	}
	if other, _ := DeploymentID(context.Background(), memstore.New()); other == id {
		t.Fatalf("another database got the same id %q", id)
	}
}

// TestAllocateRefusesOthersPort: a port of flowlb's name and
// device_owner without this deployment's mark is not reused.
func TestAllocateRefusesOthersPort(t *testing.T) {
	for _, tags := range [][]any{{"flowlb-deployment=dep-b"}, nil} {
		f, a := newFake(t)
		f.ports["theirs"] = map[string]any{"id": "theirs", "name": "flowlb-lb-lb1", "network_id": netID, "device_owner": DeviceOwner,
			"device_id": "lb-lb1", "tags": tags, "fixed_ips": []any{map[string]any{"subnet_id": subnetID, "ip_address": "198.18.225.99"}}}
		_, err := a.Allocate(fakeTx{}, lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: subnetID})
		if !errors.Is(err, lbaas.ErrConflict) || !strings.Contains(err.Error(), "theirs") || !strings.Contains(err.Error(), `"flowlb-deployment=dep-a"`) {
			t.Errorf("tags %v: %v, want a conflict naming the port and the mark", tags, err)
		}
		if len(f.creates) != 0 || len(f.deletes) != 0 || len(f.ports) != 1 {
			t.Errorf("tags %v: creates %v, deletes %v", tags, f.creates, f.deletes)
		}
	}
}

// TestReleaseByMark: Release deletes this deployment's port and one
// from before the marks, and keeps another deployment's.
func TestReleaseByMark(t *testing.T) {
	f, a := newFake(t)
	for id, tags := range map[string][]any{"ours": {"flowlb-deployment=dep-a"}, "legacy": nil, "theirs": {"x", "flowlb-deployment=dep-b"}} {
		f.ports[id] = map[string]any{"id": id, "network_id": netID, "device_owner": DeviceOwner, "tags": tags}
		if err := a.Release(nil, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := f.ports["theirs"]; !ok || len(f.ports) != 1 {
		t.Fatalf("ports left %v, want only theirs", f.ports)
	}
}

// TestAllocateTagsAfterCreate: where Neutron drops the tags of a create,
// the port is tagged right after it, and a retry finds it marked; where
// it keeps them, no tag call is made.
func TestAllocateTagsAfterCreate(t *testing.T) {
	for _, drop := range []bool{false, true} {
		f, a := newFake(t)
		f.dropCreateTags = drop
		req := lbaas.VIPRequest{LoadBalancerID: "lb1", SubnetID: subnetID}
		v, err := a.Allocate(fakeTx{}, req)
		if err != nil {
			t.Fatal(err)
		}
		if ours, _ := marks(toStrings(f.ports[v.PortID]["tags"]), a.Mark()); !ours {
			t.Errorf("drop %v: port tags %v, want the mark", drop, f.ports[v.PortID]["tags"])
		}
		if want := map[bool]int{false: 0, true: 1}[drop]; f.tagCalls != want {
			t.Errorf("drop %v: %d tag calls, want %d", drop, f.tagCalls, want)
		}
		if again, err := a.Allocate(fakeTx{}, req); err != nil || again.PortID != v.PortID || len(f.creates) != 1 {
			t.Errorf("drop %v: retry %+v %v, %d creates", drop, again, err, len(f.creates))
		}
	}
}

func toStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
