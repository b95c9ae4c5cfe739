package agent

import (
	"context"
	"io"
	"log/slog"
	"testing"

	agentv1 "github.com/flowlb/flowlb/api/proto/flowlb/agent/v1"
)

// TestReady: not ready before a snapshot is received and programmed, nor
// while a received update waits; ready once the kernel holds the newest
// revision, also of a new epoch (another replica).
func TestReady(t *testing.T) {
	a := New(Config{NoHealth: true}, &recorder{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	if err := a.Ready(); err == nil {
		t.Fatal("ready before any update")
	}
	steps := []struct {
		u         *agentv1.Update
		program   bool
		wantReady bool
	}{
		{&agentv1.Update{Epoch: "e1", Revision: 3, Snapshot: true}, false, false},
		{&agentv1.Update{Epoch: "e1", Revision: 3, Snapshot: true}, true, true},
		{&agentv1.Update{Epoch: "e1", Revision: 4}, false, false},
		{&agentv1.Update{Epoch: "e1", Revision: 4}, true, true},
		{&agentv1.Update{Epoch: "e2", Revision: 4, Snapshot: true}, false, false},
		{&agentv1.Update{Epoch: "e2", Revision: 4, Snapshot: true}, true, true},
	}
	for i, s := range steps {
		a.noteReceived(s.u.GetEpoch(), s.u.GetRevision())
		if s.program {
			if err := a.program(ctx, s.u); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Ready(); (err == nil) != s.wantReady {
			t.Errorf("step %d (%s rev %d, programmed %v): Ready() = %v, want ready %v", i, s.u.GetEpoch(), s.u.GetRevision(), s.program, err, s.wantReady)
		}
	}
}
