// Package benchkit holds what the bench programs share: parsing their
// count lists, CPU profiles and the units of their tables.
package benchkit

import (
	"fmt"

	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flowlb/flowlb/internal/server/store/storetest"
)

// Counts reads a comma-separated list of positive counts, such as "1,3",
// given to flag name as a count of what.
func Counts(name, what, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("-%s: %q is not a %s", name, f, what)
		}
		out = append(out, k)
	}
	return out, nil
}

// CPUProfile starts a CPU profile into path ("" profiles nothing) and
// returns what stops it.
func CPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// ProcessCPU is this process's user and system CPU time so far: on a
// shared machine it is the figure that does not depend on the other load.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MS is d in milliseconds, for tables.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Postgres hands each run of a benchmark a PostgreSQL database: the DSN
// given, every time, or with "auto" a fresh database of a throwaway
// cluster started once.
type Postgres struct {
	dsn     string
	cluster *storetest.Cluster
}

// OpenPostgres starts the throwaway cluster when dsn is "auto".
func OpenPostgres(dsn string) (*Postgres, error) {
	p := &Postgres{dsn: dsn}
	if dsn == "auto" {
		c, err := storetest.StartCluster()
		if err != nil {
			return nil, err
		}
		p.cluster = c
	}
	return p, nil
}

// Database is the DSN of the next run's database.
func (p *Postgres) Database() (string, error) {
	if p.cluster == nil {
		return p.dsn, nil
	}
	return p.cluster.NewDatabase()
}

// CPUTime is the throwaway cluster's CPU time so far (see
// storetest.Cluster.CPUTime); false for a database given by DSN, whose
// server may be anywhere.
func (p *Postgres) CPUTime() (time.Duration, bool) {
	if p.cluster == nil {
		return 0, false
	}
	d, err := p.cluster.CPUTime()
	return d, err == nil
}

// Stop stops the throwaway cluster, if one was started.
func (p *Postgres) Stop() {
	if p.cluster != nil {
		p.cluster.Stop()
	}
}
