// Package labtest gives a test a lab of N nodes × M pods that is removed
// when the test ends, pass or fail:
//
//	l := labtest.New(t, 3, 2)
//	c, err := l.Pod(1, 1).Dial(ctx, "tcp", l.Pod(2, 1).Addr.String()+":8080")
//
// With server hosts and the database for server replicas:
//
//	l := labtest.New(t, 3, 0, labtest.WithServers(3), labtest.WithPostgres)
//	l.Server(1).Start("server", argv) // and lab.PostgresDSN
//
// The pods' echo servers are the test binary itself, re-executed: importing
// this package installs an init hook that turns the binary into an echo
// server when it runs with FLOWLB_LABTEST_CHILD=echo, so tests need no
// prebuilt flowlb binary.
package labtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/echo"
	"github.com/flowlb/flowlb/internal/shared/pgserver"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var reapOnce sync.Once

// ChildEnv selects the role of a re-executed test binary.
const ChildEnv = "FLOWLB_LABTEST_CHILD"

func init() {
	if os.Getenv(ChildEnv) == "echo" {
		if err := echo.Main(os.Args[1:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// SkipUnlessRoot skips t when the process cannot create namespaces.
func SkipUnlessRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
}

// RequirePostgres skips t when Debian's PostgreSQL is not installed, or
// fails it when FLOWLB_REQUIRE_POSTGRES=1 (as the store tests do).
func RequirePostgres(t testing.TB) {
	t.Helper()
	_, err := pgserver.Find()
	if err == nil {
		return
	}
	if pgserver.Required() {
		t.Fatalf("PostgreSQL required (%s=1): %v", pgserver.RequireEnv, err)
	}
	t.Skipf("needs PostgreSQL: %v", err)
}

// WithServers gives the lab n server hosts (s1…sN), for New.
func WithServers(n int) func(*lab.Options) {
	return func(o *lab.Options) { o.Servers = n }
}

// WithPostgres runs the lab's database, for New; the test skips when
// PostgreSQL is not installed (see RequirePostgres).
func WithPostgres(o *lab.Options) { o.Postgres = true }

// EchoCommand is the echo command for labs started from a test binary.
func EchoCommand() (argv, env []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	return []string{exe}, []string{ChildEnv + "=echo"}, nil
}

// Name returns a fresh random lab name ("t" and 5 characters), so labs of
// parallel tests and test binaries never collide.
func Name() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return "t" + string(b)
}

// New brings up a lab of nodes × podsPerNode (optionally tuned by opts)
// and registers its removal with t.Cleanup. It skips when not root.
func New(t testing.TB, nodes, podsPerNode int, opts ...func(*lab.Options)) *lab.Lab {
	t.Helper()
	SkipUnlessRoot(t)
	argv, env, err := EchoCommand()
	if err != nil {
		t.Fatal(err)
	}
	reapOnce.Do(func() {
		// Labs of test binaries that died without cleaning up (killed by
		// a timeout, say): their owner is gone, so nobody uses them.
		if gone, err := lab.DownOrphans(""); len(gone) > 0 || err != nil {
			t.Logf("removed orphaned labs %v (err %v)", gone, err)
		}
	})
	o := lab.Options{Name: Name(), Nodes: nodes, PodsPerNode: podsPerNode, Echo: argv, EchoEnv: env, Owned: true}
	for _, f := range opts {
		f(&o)
	}
	if o.Postgres {
		RequirePostgres(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	l, err := lab.Up(ctx, o)
	if err != nil {
		// Up removes what it built on failure; make sure anyway.
		_ = lab.Down(o.Name, o.StateRoot)
		t.Fatalf("lab up %s (%d×%d): %v", o.Name, nodes, podsPerNode, err)
	}
	t.Logf("lab %s (%d nodes × %d pods) up in %s", o.Name, nodes, podsPerNode, time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			l.Status().Format(&b)
			t.Logf("lab %s at failure:\n%s", l.Name(), b.String())
		}
		if err := l.Down(); err != nil {
			t.Errorf("lab down %s: %v", l.Name(), err)
		}
	})
	return l
}
