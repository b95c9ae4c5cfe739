package lab

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/pgserver"
)

func TestValidateServers(t *testing.T) {
	cases := []struct {
		servers int
		err     string
	}{
		{0, ""},
		{1, ""},
		{MaxServers, ""},
		{MaxServers + 1, "servers 10: want 0-9"},
		{-1, "servers -1: want 0-9"},
	}
	for _, c := range cases {
		o := Options{Name: "x", Nodes: 1, Servers: c.servers}
		err := o.validate()
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("servers %d: %v, want %q", c.servers, err, c.err)
		}
	}
	st, err := initialState(Options{Name: "x", Nodes: 1, Servers: 3})
	if err != nil || !slices.Equal(st.Servers, []int{1, 2, 3}) {
		t.Errorf("state servers %v (%v), want [1 2 3]", st.Servers, err)
	}
}

// TestPostgresSpec: the database listens on the fabric address and the
// lab's socket only, runs as the postgres user in its own IPC namespace
// and keeps its shared memory in the data directory.
func TestPostgresSpec(t *testing.T) {
	db := &PostgresState{Data: "/run/flowlb/lab/x/postgres/data", Socket: "/run/flowlb/lab/x/postgres"}
	install := &pgserver.Install{Bin: "/usr/lib/postgresql/15/bin", User: syscall.Credential{Uid: 101, Gid: 104}}
	spec := postgresSpec(install, db)
	want := []string{"/usr/lib/postgresql/15/bin/postgres", "-D", db.Data, "-p", "5432",
		"-c", "listen_addresses=198.18.0.239",
		"-c", "unix_socket_directories=/run/flowlb/lab/x/postgres",
		"-c", "max_connections=300",
		"-c", "dynamic_shared_memory_type=mmap",
		"-c", "fsync=off"}
	if !slices.Equal(spec.Argv, want) {
		t.Errorf("argv\n%q\nwant\n%q", spec.Argv, want)
	}
	if spec.User == nil || *spec.User != (ProcUser{UID: 101, GID: 104}) || !spec.OwnIPC || spec.Dir != db.Data {
		t.Errorf("spec %+v: want user 101:104, own IPC namespace, in the data directory", spec)
	}
	if PostgresDSN != "postgres://postgres@198.18.0.239:5432/flowlb?sslmode=disable" {
		t.Errorf("DSN %s", PostgresDSN)
	}
}
