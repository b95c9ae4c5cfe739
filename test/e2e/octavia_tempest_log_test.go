package e2e

import (
	"reflect"
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
