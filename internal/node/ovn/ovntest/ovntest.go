// Package ovntest serves an OVN northbound database for tests, from
// libovsdb's in-memory server on a unix socket, and reads flowlb's rows
// back.
package ovntest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/stdr"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/database/inmemory"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/server"

	"github.com/flowlb/flowlb/internal/node/ovn/nbdb"
)

// InMemoryNB serves an empty northbound database until the test ends,
// and returns its endpoint (unix:PATH).
func InMemoryNB(t testing.TB) string {
	t.Helper()
	full, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	dbModel, errs := model.NewDatabaseModel(nbdb.Schema(), full)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// The server package turns libovsdb's standard logger up to its
	// most verbose; tests want it quiet.
	defer stdr.SetVerbosity(0)
	srv, err := server.NewOvsdbServer(inmemory.NewDatabase(map[string]model.ClientDBModel{"OVN_Northbound": full}), dbModel)
	if err != nil {
		t.Fatal(err)
	}
	// A short path: a unix socket's is at most 107 bytes.
	dir, err := os.MkdirTemp("", "flowlb-ovn")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "nb.sock")
	go func() { _ = srv.Serve("unix", sock) }()
	t.Cleanup(func() { srv.Close(); os.RemoveAll(dir) })
	deadline := time.Now().Add(5 * time.Second)
	for !srv.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the in-memory northbound server is not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "unix:" + sock
}

// Client connects a client of the whole northbound model to ep and
// monitors every table, until the test ends.
func Client(t testing.TB, ep string) client.Client {
	t.Helper()
	full, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	return ClientOf(t, ep, full)
}

// ClientOf connects a client of model m to ep and monitors its tables,
// until the test ends.
func ClientOf(t testing.TB, ep string, m model.ClientDBModel) client.Client {
	t.Helper()
	quiet := logr.Discard()
	c, err := client.NewOVSDBClient(m, client.WithEndpoint(ep), client.WithLogger(&quiet))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.MonitorAll(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}
