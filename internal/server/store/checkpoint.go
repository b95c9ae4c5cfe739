package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// SQLite's write-ahead log is folded into the database file by a
// checkpoint. By default the connection whose commit takes the log past
// 1,000 pages runs it inside that commit: it copies the pages and syncs
// both files while holding the single writer, so every write queued
// behind it waits (a third of the time of 1,000 load balancer creates,
// bench/apicreate). The writer never checkpoints here (the connections
// have wal_autocheckpoint(0)); a connection of its own does, in the
// background, with PASSIVE checkpoints, which take no write lock.
// Durability is the commit's (synchronous=NORMAL in WAL mode: a commit
// survives the process's death), not the checkpoint's.

const (
	// checkpointEvery is how often the log is folded in: what is written
	// meanwhile (a few MiB under a burst of creates) is what the log
	// holds at most, as with the default of 1,000 pages.
	checkpointEvery = 200 * time.Millisecond
	// walPagesMax is the log's size, in pages, beyond which the
	// checkpoint also waits for readers and holds writers off (RESTART):
	// PASSIVE copies only what no open read still needs, and the log
	// starts over only once it is all copied, so readers that never
	// pause could otherwise let it grow without bound.
	walPagesMax = 64 << 10 // 256 MiB of 4 KiB pages
	// walKeepBytes bounds the log file's size after it starts over
	// (journal_size_limit; by default it keeps its largest size).
	walKeepBytes = 64 << 20
)

// walCheckpointer runs the checkpoints of one SQLite database.
type walCheckpointer struct {
	db       *sql.DB
	log      *slog.Logger
	pagesMax int
	stop     chan struct{}
	done     chan struct{}
	halted   sync.Once
}

// startCheckpointer opens the checkpointer's connection to dsn and starts
// its loop.
func startCheckpointer(dsn string, log *slog.Logger) (*walCheckpointer, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	c := &walCheckpointer{db: db, log: log, pagesMax: walPagesMax, stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c, nil
}

func (c *walCheckpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if _, _, err := c.step(context.Background()); err != nil {
				c.log.Warn("sqlite checkpoint", "err", err)
			}
		}
	}
}

// step runs one checkpoint and returns the log's size and how much of
// it is in the database file now, in pages.
func (c *walCheckpointer) step(ctx context.Context) (logPages, copied int, err error) {
	mode := "PASSIVE"
	for {
		var busy int
		if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logPages, &copied); err != nil {
			return 0, 0, fmt.Errorf("%s checkpoint: %w", mode, err)
		}
		if mode == "RESTART" || logPages <= c.pagesMax || logPages == copied {
			return logPages, copied, nil
		}
		c.log.Info("sqlite write-ahead log past its bound; checkpointing with writers held", "pages", logPages, "copied", copied)
		mode = "RESTART"
	}
}

// halt stops the loop.
func (c *walCheckpointer) halt() {
	c.halted.Do(func() { close(c.stop) })
	<-c.done
}

// close stops the loop. The log is folded in by SQLite itself when the
// process's last connection to the database closes (a checkpoint that
// waited for writers here would hold up those of another process that
// has the file open, a server beside a CLI command).
func (c *walCheckpointer) close() error {
	c.halt()
	return c.db.Close()
}
