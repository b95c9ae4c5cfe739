package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
)

// TestDemoWithReplicas: `flowlb lab demo --servers 3` runs three server
// replicas on the lab's PostgreSQL, balances the demo's traffic through
// them and removes everything, with the agents on the run's data plane
// (--dataplane).
func TestDemoWithReplicas(t *testing.T) {
	labtest.SkipUnlessRoot(t)
	labtest.RequirePostgres(t)
	out, err := exec.Command(flowlb(t), "lab", "demo", "--servers", "3", "--nodes", "2", "--requests", "10", "--dataplane", dataplane()).CombinedOutput()
	if err != nil {
		t.Fatalf("lab demo --servers 3 --dataplane %s: %v\n%s", dataplane(), err, out)
	}
	for _, want := range []string{"3 flowlb server replicas on PostgreSQL", "s3 198.18.0.243:9876", "data plane " + dataplane() + "\n",
		"10 requests from pod n1-p3 (198.18.17.4) on node n1, 0 failed",
		"the VIP no longer answers (true)", "removed: namespaces, processes and kernel state", "dashboard: http://127.0.0.1:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(string(out), "lab "), ":")
	if left, _ := filepath.Glob(filepath.Join(lab.NetnsDir, lab.Prefix(name)+"*")); len(left) > 0 {
		t.Errorf("the demo left namespaces %v", left)
	}
}
