package store

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fill writes n flavors of about 2 KiB each, one transaction each, as
// the API's creates do.
func fill(t *testing.T, s *SQL, from, n int) {
	t.Helper()
	data := `{"pad":"` + strings.Repeat("x", 2000) + `"}`
	for i := range n {
		id := fmt.Sprintf("f%06d", from+i)
		if _, err := s.Update(t.Context(), func(tx Tx) error {
			return tx.Insert(Record{Kind: KindFlavor, ID: id, Data: []byte(data)})
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestSQLiteCheckpointsOutsideCommits: commits never fold the
// write-ahead log into the database file, however long it grows (they
// would, inside the commit of whichever write took it past 1,000 pages,
// holding the single writer); the checkpointer does, in the background,
// and at close leaves no log behind.
func TestSQLiteCheckpointsOutsideCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowlb.db")
	s, err := Open(t.Context(), path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.ckpt.halt()
	// Whatever the migrations wrote is folded in first.
	if _, _, err := s.ckpt.step(t.Context()); err != nil {
		t.Fatal(err)
	}
	var auto int
	if err := s.writer.QueryRowContext(t.Context(), "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil || auto != 0 {
		t.Fatalf("writer's wal_autocheckpoint %d (%v), want 0", auto, err)
	}
	db0 := size(t, path)
	fill(t, s, 0, 3000) // about 1,500 pages of log at least
	if db := size(t, path); db != db0 {
		t.Errorf("database file %d bytes after 3,000 commits, was %d: a commit checkpointed", db, db0)
	}
	if wal := size(t, path+"-wal"); wal < 1000*4096 {
		t.Fatalf("log %d bytes after 3,000 commits of 2 KiB, want more than 1,000 pages", wal)
	}
	logPages, copied, err := s.ckpt.step(t.Context())
	if err != nil || logPages < 1000 || copied != logPages {
		t.Fatalf("checkpoint: %d of %d pages copied (%v), want all of more than 1,000", copied, logPages, err)
	}
	if db := size(t, path); db <= db0+3000*2000 {
		t.Errorf("database file %d bytes after the checkpoint, want more than %d", db, db0+3000*2000)
	}

	// The loop does the same on its own, and a closed store leaves an
	// empty log.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(t.Context(), path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	db1 := size(t, path)
	fill(t, s, 3000, 1000)
	if s.ckpt == nil {
		t.Fatal("no checkpointer")
	}
	deadline := time.Now().Add(10 * time.Second)
	for size(t, path) <= db1+1000*2000 {
		if time.Now().After(deadline) {
			t.Fatalf("database file %d bytes 10 s after 1,000 commits, was %d: not checkpointed in the background", size(t, path), db1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if wal := size(t, path+"-wal"); wal != 0 {
		t.Errorf("log %d bytes after close, want none", wal)
	}
	s, err = Open(t.Context(), path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	if err := s.reader.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM objects WHERE kind = ?", string(KindFlavor)).Scan(&n); err != nil || n != 4000 {
		t.Errorf("%d flavors after reopening (%v), want 4,000", n, err)
	}
}
