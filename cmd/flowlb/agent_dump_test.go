package main

import (
	"context"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/agent"
	"github.com/flowlb/flowlb/internal/node"
)

// TestAgentStatusServed: the agent's /status, as agent dump reads it.
func TestAgentStatusServed(t *testing.T) {
	want := agent.KernelStatus{Received: 9, Programmed: 7, Behind: "revision 9 received, 7 programmed", Refusing: true,
		RefusingSince: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), RefusedAttempts: 3, LastRefusal: "operation not permitted",
		Refusals: 5, Repairs: map[string]uint64{"table": 1}, VerifyInterval: "10s"}
	srv := httptest.NewServer(node.StatusHandler(func() agent.KernelStatus { return want }))
	defer srv.Close()
	got, err := agentStatus(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("status read back: %+v, %v; want %+v", got, err, want)
	}
	if _, err := agentStatus(context.Background(), "127.0.0.1:1"); err == nil {
		t.Error("no error from an address nothing serves")
	}
}
