package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// recordingPlane records each write it takes, and refuses the next ones
// while refuse is set.
type recordingPlane struct {
	calls  []string
	refuse bool
}

func (r *recordingPlane) Sync(_ context.Context, t flows.Table) error {
	r.calls = append(r.calls, fmt.Sprintf("sync %d", len(t.Services)))
	if r.refuse {
		return errors.New("refused")
	}
	return nil
}

func (r *recordingPlane) Apply(_ context.Context, upserts []flows.Service, deletes []flows.Key) error {
	r.calls = append(r.calls, fmt.Sprintf("apply +%d -%d", len(upserts), len(deletes)))
	if r.refuse {
		return errors.New("refused")
	}
	return nil
}

// TestPlanesWrittenApart: with two data planes, each has its record of
// what it took. One refusing a change is written whole when it takes
// writes again; the other, which took the change, gets only what
// changes after it, and the revision is reached (acknowledged) only
// when both hold it.
func TestPlanesWrittenApart(t *testing.T) {
	nft, sockets := &recordingPlane{}, &recordingPlane{}
	a := New(Config{Node: "n1", NoHealth: true, Metrics: prometheus.NewRegistry()}, Chain(nft, sockets), quiet)
	ctx := t.Context()
	round := func(u flows.Update) error {
		a.want.receive(u)
		return a.kernelRound(ctx, false)
	}
	if err := round(flows.Update{Epoch: "e", Revision: 1, Snapshot: true, LoadBalancers: []flows.LoadBalancerServices{
		lb("a", lbSvc("a", "198.19.0.1", "198.18.17.2")), lb("b", lbSvc("b", "198.19.0.2", "198.18.17.3"))}}); err != nil {
		t.Fatal(err)
	}
	sockets.refuse = true
	if err := round(flows.Update{Epoch: "e", Revision: 2, LoadBalancers: []flows.LoadBalancerServices{
		lb("a", lbSvc("a", "198.19.0.1", "198.18.17.2", "198.18.17.4"))}}); err == nil {
		t.Fatal("a refused write reported no error")
	}
	if _, rev := a.Revision(); rev != 1 {
		t.Errorf("revision %d reached with a data plane refusing it, want 1", rev)
	}
	sockets.refuse = false
	if err := round(flows.Update{Epoch: "e", Revision: 3, LoadBalancers: []flows.LoadBalancerServices{lb("b")}}); err != nil {
		t.Fatal(err)
	}
	if _, rev := a.Revision(); rev != 3 {
		t.Errorf("revision %d, want 3 once both data planes took it", rev)
	}
	for _, tc := range []struct {
		name string
		p    *recordingPlane
		want []string
	}{
		{"the data plane that took every write", nft, []string{"sync 2", "apply +1 -0", "apply +0 -1"}},
		{"the one that refused revision 2", sockets, []string{"sync 2", "apply +1 -0", "sync 1"}},
	} {
		if !slices.Equal(tc.p.calls, tc.want) {
			t.Errorf("%s: writes %q, want %q", tc.name, tc.p.calls, tc.want)
		}
	}
}
