package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/flows"
)

// TestNextBatch: a batch is the first update and every one queued behind
// it; the stream's end ends the loop.
func TestNextBatch(t *testing.T) {
	a := New(Config{NoHealth: true}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	updates := make(chan flows.Update, 8)
	recvErr := make(chan error, 1)
	for rev := range int64(3) {
		updates <- flows.Update{Revision: rev + 1}
	}
	batch, err := a.nextBatch(ctx, updates, recvErr, nil)
	if err != nil || len(batch) != 3 || batch[0].Revision != 1 || batch[2].Revision != 3 {
		t.Fatalf("batch %v, %v: want revisions 1 to 3", batch, err)
	}
	end := errors.New("stream ended")
	recvErr <- end
	if batch, err := a.nextBatch(ctx, updates, recvErr, nil); !errors.Is(err, end) || batch != nil {
		t.Fatalf("after the stream ended: %v, %v", batch, err)
	}
}

// TestNextBatchMinInterval: within MinInterval of the last change, the
// batch waits; a cancelled context ends the wait.
func TestNextBatchMinInterval(t *testing.T) {
	a := New(Config{NoHealth: true, MinInterval: 200 * time.Millisecond}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.lastSync = time.Now()
	updates := make(chan flows.Update, 8)
	updates <- flows.Update{Revision: 1}
	start := time.Now()
	batch, err := a.nextBatch(context.Background(), updates, nil, nil)
	if err != nil || len(batch) != 1 || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("batch %v, %v after %s: want the update after a wait of the interval", batch, err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.lastSync = time.Now()
	updates <- flows.Update{Revision: 3}
	if _, err := a.nextBatch(ctx, updates, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
}

// TestNextBatchEndsWithTheSession: a session's end ends the wait for an
// update though nothing comes: the receiver stops on the session's end
// without a word when an update is in hand (it once left the agent
// waiting for good, and Run with it).
func TestNextBatchEndsWithTheSession(t *testing.T) {
	a := New(Config{NoHealth: true}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		_, err := a.nextBatch(ctx, make(chan flows.Update), make(chan error), nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ended session: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nextBatch still waits for an update 10 s after its session ended")
	}
}
