package storetest

import (
	"database/sql"
	"errors"
	"os"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/pgserver"
)

func TestProcStat(t *testing.T) {
	f, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if f.ppid != int64(os.Getppid()) {
		t.Errorf("parent %d, want %d", f.ppid, os.Getppid())
	}
	if _, err := procStat(-1); err == nil {
		t.Error("a process that cannot exist has a stat")
	}
}

// TestClusterCPUTime: the cluster's CPU time grows with work done in it.
func TestClusterCPUTime(t *testing.T) {
	c, err := StartCluster()
	if errors.Is(err, pgserver.ErrNotInstalled) && !pgserver.Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	before, err := c.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", c.DSNBase+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A few hundred milliseconds of the server's CPU on this machine.
	if _, err := db.Exec("SELECT count(*) FROM generate_series(1, 500000) g WHERE md5(g::text) LIKE 'ab%'"); err != nil {
		t.Fatal(err)
	}
	after, err := c.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 50e6 {
		t.Errorf("CPU time grew by %v over a query that takes the server hundreds of milliseconds (50 ms wanted)", after-before)
	}
}
