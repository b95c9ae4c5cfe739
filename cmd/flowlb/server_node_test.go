package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

// TestServerNodeCommands: `flowlb server node list` and `forget` on the
// database of a server's data directory, named on the command line or by
// the server's configuration file.
func TestServerNodeCommands(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "flowlb.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	for _, n := range []string{"n1", "n2"} {
		if _, err := st.EnrollNode(ctx, store.NodeIdentity{Node: n, Key: "key-of-" + n + "-0123456789abcdef", CA: "ca", NotAfter: until, Issued: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	conf := filepath.Join(t.TempDir(), "server.yaml")
	// The server's own file: keys of the server's other flags too.
	if err := os.WriteFile(conf, []byte("listen: 127.0.0.1:9876\nauth: noauth\ndata-dir: "+dir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := newServerCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"node"}, args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := run("list", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "n1  ") || !strings.Contains(out, "valid until "+until.UTC().Format(time.RFC3339)+", key key-of-n1-012345") {
		t.Errorf("list:\n%s", out)
	}
	out, err = run("forget", "n1", "n3", "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "n1: released; its identity (key key-of-n1-012345, valid until") || !strings.Contains(out, "n3: no identity was bound to it; released") {
		t.Errorf("forget:\n%s", out)
	}
	out, err = run("list", "--config", conf)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "n1") || !strings.Contains(lines[1], "released") ||
		!strings.Contains(lines[2], "n2") || !strings.Contains(lines[2], "valid until") || !strings.Contains(lines[3], "released") {
		t.Errorf("list after forgetting n1 and n3:\n%s", out)
	}
	if _, err := run("list", "--data-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "give the server's --data-dir, --database or --config") {
		t.Errorf("a data directory without a database: %v", err)
	}
	if _, err := run("forget"); err == nil {
		t.Error("forget without a name")
	}
}
