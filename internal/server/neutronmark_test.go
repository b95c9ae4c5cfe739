package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/server"
)

// startNeutronAPI starts a server with --network neutron-api on a
// Neutron endpoint that is never called at start, and returns its log.
func startNeutronAPI(t *testing.T, dir string, edit func(*server.Options)) (string, error) {
	t.Helper()
	o := server.Options{Network: "neutron-api", NeutronEndpoint: "http://127.0.0.1:9/", Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0",
		DataDir: dir, AgentTokenFile: filepath.Join(dir, "agent-token")}
	edit(&o)
	var log bytes.Buffer
	s, err := server.Start(context.Background(), o, slog.New(slog.NewTextHandler(&log, nil)))
	if err == nil {
		_ = s.Shutdown(context.Background())
	}
	return log.String(), err
}

var markRe = regexp.MustCompile(`mark="?flowlb-deployment=([A-Za-z0-9._-]+)`)

// TestNeutronAPIDeploymentMark: the deployment's mark is made once and
// kept in the database (a restart, or another replica, gets the same),
// --neutron-deployment-id overrides it, and a grace shorter than a
// create may take is refused.
func TestNeutronAPIDeploymentMark(t *testing.T) {
	dir := t.TempDir()
	var ids []string
	for range 2 {
		log, err := startNeutronAPI(t, dir, func(o *server.Options) {})
		if err != nil {
			t.Fatal(err)
		}
		m := markRe.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no mark in the log:\n%s", log)
		}
		ids = append(ids, m[1])
	}
	if ids[0] != ids[1] {
		t.Errorf("marks %v: want the same after a restart", ids)
	}
	log, err := startNeutronAPI(t, dir, func(o *server.Options) { o.NeutronDeploymentID = "prod-eu" })
	if m := markRe.FindStringSubmatch(log); err != nil || m == nil || m[1] != "prod-eu" {
		t.Errorf("with --neutron-deployment-id: %v, mark %v", err, m)
	}
	_, err = startNeutronAPI(t, dir, func(o *server.Options) { o.NeutronDeploymentID = "a,b" })
	if err == nil || !strings.Contains(err.Error(), `"a,b"`) {
		t.Errorf("an id with a comma: %v, want refused", err)
	}
	_, err = startNeutronAPI(t, dir, func(o *server.Options) {
		o.NeutronSweepEvery, o.NeutronOrphanGrace = time.Minute, time.Minute
	})
	if err == nil || !strings.Contains(err.Error(), "--neutron-orphan-grace") {
		t.Errorf("a grace of a minute: %v, want refused", err)
	}
	if _, err := startNeutronAPI(t, dir, func(o *server.Options) {
		o.NeutronSweepEvery, o.NeutronOrphanGrace = time.Minute, server.MinOrphanGrace
	}); err != nil {
		t.Errorf("the least grace: %v", err)
	}
}
