package e2e

import (
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"testing"
)

// TestRunLogRows: tempest's own output, counted as subunit2csv's rows
// would be, for a run whose subunit stream was cut short.
func TestRunLogRows(t *testing.T) {
	log := `{0} setUpClass (octavia_tempest_plugin.tests.api.v2.test_amphora.AmphoraAPITest) ... SKIPPED: Amphora tests only run with the amphora provider enabled.
{0} octavia_tempest_plugin.tests.api.v2.test_healthmonitor.HealthMonitorAPITest.test_SIP_PING_healthmonitor_create [15.851755s] ... ok
{0} octavia_tempest_plugin.tests.api.v2.test_healthmonitor.HealthMonitorAPITest.test_SIP_HTTP_healthmonitor_show ... SKIPPED: Provider 'flowlb' does not support a requested option: flowlb: HTTP protocol pools are not supported
{0} octavia_tempest_plugin.tests.api.v2.test_member.MemberAPITest1.test_member_update [3.2s] ... FAILED
Captured traceback:
    testtools.matchers._impl.MismatchError: 'ERROR' != 'ACTIVE'
======
Totals
`
	want := [][]string{{"test", "status"},
		{"setUpClass (octavia_tempest_plugin.tests.api.v2.test_amphora.AmphoraAPITest)", "skip"},
		{"octavia_tempest_plugin.tests.api.v2.test_healthmonitor.HealthMonitorAPITest.test_SIP_PING_healthmonitor_create", "success"},
		{"octavia_tempest_plugin.tests.api.v2.test_healthmonitor.HealthMonitorAPITest.test_SIP_HTTP_healthmonitor_show", "skip"},
		{"octavia_tempest_plugin.tests.api.v2.test_member.MemberAPITest1.test_member_update", "fail"},
	}
	rows := runLogRows(log)
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows:\n%q\nwant\n%q", rows, want)
	}
	counts, failed := tempestCounts(rows)
	if counts["total"] != [3]int{1, 2, 1} || counts["test_amphora"] != [3]int{0, 1, 0} ||
		len(failed) != 1 || failed[0] != want[4][0] {
		t.Fatalf("counts %v, failed %v", counts, failed)
	}
}

// TestTempestShards: the listing's test ids, dealt to runs side by side
// and their results joined back, a class's setUpClass once.
func TestTempestShards(t *testing.T) {
	listing := `2026-11-30 07:10:01 WARNING something
octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_b[id-2]
octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_a[id-1]
  octavia_tempest_plugin.tests.api.v2.test_member.MemberAPITest1.test_c[id-3]
octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_a[id-1]
`
	ids := tempestTestIDs(listing)
	want := []string{
		"octavia_tempest_plugin.tests.api.v2.test_member.MemberAPITest1.test_c[id-3]",
		"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_a[id-1]",
		"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_b[id-2]",
	}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("ids %q, want %q", ids, want)
	}
	for _, tc := range []struct {
		n    int
		want [][]string
	}{
		{1, [][]string{want}},
		{2, [][]string{{want[0], want[2]}, {want[1]}}},
		{4, [][]string{{want[0]}, {want[1]}, {want[2]}, nil}},
	} {
		if got := dealTests(ids, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("dealTests(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}

	setup := "setUpClass (octavia_tempest_plugin.tests.api.v2.test_amphora.AmphoraAPITest)"
	teardown := "tearDownClass (octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest)"
	merged := mergeTempestRows(
		[][]string{{"test", "status", "start_time"}, {setup, "skip", "x"}, {"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_a", "success", "x"}},
		nil,
		[][]string{{"status", "test"}, {"skip", setup}, {"success", teardown}, {"success", "octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_b"}},
		[][]string{{"test", "status"}, {teardown, "fail"}},
	)
	wantRows := [][]string{{"test", "status"},
		{setup, "skip"},
		{"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_a", "success"},
		{teardown, "fail"},
		{"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_b", "success"},
	}
	if !reflect.DeepEqual(merged, wantRows) {
		t.Fatalf("merged\n%q\nwant\n%q", merged, wantRows)
	}
	counts, failed := tempestCounts(merged)
	if counts["total"] != [3]int{2, 1, 1} || len(failed) != 1 || failed[0] != "octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.class" {
		t.Fatalf("counts %v, failed %v", counts, failed)
	}
}

func TestRetriableTests(t *testing.T) {
	failed := []string{
		"octavia_tempest_plugin.tests.api.v2.test_healthmonitor.HealthMonitorAPITest.test_SI_TLS_healthmonitor_list[id-1]",
		"octavia_tempest_plugin.tests.api.v2.test_member.MemberAPITest1.class",
		"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_pool_list[id-2]",
	}
	tests, classes := retriableTests(failed)
	if want := []string{failed[0], failed[2]}; !slices.Equal(tests, want) {
		t.Errorf("tests %v, want %v", tests, want)
	}
	if want := []string{failed[1]}; !slices.Equal(classes, want) {
		t.Errorf("classes %v, want %v", classes, want)
	}
	if tests, classes := retriableTests(nil); tests != nil || classes != nil {
		t.Errorf("nothing failed: %v, %v", tests, classes)
	}
}

func TestRunFailed(t *testing.T) {
	exitWith := func(code int) error {
		err := exec.Command("sh", "-c", fmt.Sprintf("exit %d", code)).Run()
		if err == nil {
			t.Fatalf("sh -c 'exit %d' ran without error", code)
		}
		return err
	}
	header := []string{"test", "status"}
	failedRows := [][]string{header, {"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_pool_list[id-1]", "fail"}}
	passedRows := [][]string{header, {"octavia_tempest_plugin.tests.api.v2.test_pool.PoolAPITest.test_pool_list[id-1]", "success"}}
	for _, c := range []struct {
		name   string
		err    error
		rows   [][]string
		inTime bool
		want   bool
	}{
		{"no error", nil, passedRows, true, false},
		{"exit 1 with a failed test", exitWith(1), failedRows, true, false},
		{"exit 1 without a failed test", exitWith(1), passedRows, true, true},
		{"exit 2 with a failed test", exitWith(2), failedRows, true, true},
		{"cut short with a failed test", exitWith(1), failedRows, false, true},
		{"not an exit status", errors.New("no such file"), failedRows, true, true},
	} {
		if got := runFailed(c.err, c.rows, c.inTime); got != c.want {
			t.Errorf("%s: runFailed = %v, want %v", c.name, got, c.want)
		}
	}
}
