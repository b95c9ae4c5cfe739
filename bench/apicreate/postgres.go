package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// startPostgres runs a throwaway PostgreSQL cluster from Debian's packages
// on a free loopback port, as the postgres system user (the server refuses
// root), and returns its DSN and a function that stops and removes it.
func startPostgres() (string, func(), error) {
	bins, err := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if err != nil || len(bins) == 0 {
		return "", nil, fmt.Errorf("PostgreSQL is not installed (apt-get install postgresql)")
	}
	bin := filepath.Dir(bins[len(bins)-1])
	u, err := user.Lookup("postgres")
	if err != nil {
		return "", nil, fmt.Errorf("postgres system user: %w", err)
	}
	dir, err := os.MkdirTemp("", "flowlb-bench-pg-")
	if err != nil {
		return "", nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	data := filepath.Join(dir, "data")
	as := func(name string, args ...string) *exec.Cmd {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
	}
	if out, err := as("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on", port, dir)
	if out, err := as("pg_ctl", "-D", data, "-o", opts, "-w", "-l", filepath.Join(dir, "log"), "start").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	stop := func() {
		_ = as("pg_ctl", "-D", data, "-m", "fast", "-w", "stop").Run()
		os.RemoveAll(dir)
	}
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return dsn, stop, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("PostgreSQL did not start")
}
