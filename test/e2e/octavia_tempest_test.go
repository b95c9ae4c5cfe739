package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/lab/openstack"
)

// TestRealOctaviaTempest runs octavia-tempest-plugin's API suite (Debian's
// tempest and octavia-tempest-plugin) through the real Octavia with
// provider flowlb, on the test bed of TestRealOctaviaProvider: the bed's
// Keystone (Octavia's endpoint in its catalog, the roles of Octavia's
// default policy made for tempest's per-class users) and its real
// Neutron ML2/OVN, where each test class makes networks and subnets of
// its own project for its VIPs and members (the plugin's default with
// test_with_noop off). tempest runs in the fabric namespace, where the
// bed's services listen. FLOWLB_TEMPEST_REGEX narrows the run (default:
// the whole API suite); the tests of test/compat/tempest/exclude-octavia.txt
// are left out, each with its reason. FLOWLB_TEMPEST_PROVIDER names the
// providers to run the suite through, comma-separated: flowlb (the
// default), ovn (Debian's ovn-octavia-provider, enabled beside flowlb),
// or both, for the comparison in one run on one Octavia. Each provider's
// tests are dealt to FLOWLB_TEMPEST_SHARDS tempest runs (default 2) that
// run at once. FLOWLB_TEMPEST_DATAPLANE=ovn puts provider flowlb's load
// balancers on the OVN data plane for VMs as well: the server makes the
// VIP ports as ovn-octavia-provider does (--neutron-vip-ports ovn) and
// an agent with --dataplane ovn writes the rows, so that ACTIVE waits
// for OVN's northbound database too. It fails on any failed test and
// logs the counts by module.
func TestRealOctaviaTempest(t *testing.T) {
	openstack.Require(t)
	dataplane := cmp.Or(os.Getenv("FLOWLB_TEMPEST_DATAPLANE"), "nodes")
	if dataplane != "nodes" && dataplane != "ovn" {
		t.Fatalf("FLOWLB_TEMPEST_DATAPLANE=%s: nodes (the default) or ovn", dataplane)
	}
	providers := strings.Split(cmp.Or(os.Getenv("FLOWLB_TEMPEST_PROVIDER"), "flowlb"), ",")
	for i, p := range providers {
		if (p != "flowlb" && p != "ovn") || slices.Contains(providers[:i], p) {
			t.Fatalf("FLOWLB_TEMPEST_PROVIDER=%s: flowlb, ovn or both, once each", strings.Join(providers, ","))
		}
	}
	shards := 2
	if v := os.Getenv("FLOWLB_TEMPEST_SHARDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n*len(providers) > maxTempestSlots {
			t.Fatalf("FLOWLB_TEMPEST_SHARDS=%s: 1 to %d runs for each of %d providers", v, maxTempestSlots/len(providers), len(providers))
		}
		shards = n
	}
	for _, b := range []string{"tempest", "stestr", "subunit2csv"} {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv(openstack.RequireEnv) == "1" {
				t.Fatalf("%s=1: %s missing (Debian's tempest and octavia-tempest-plugin)", openstack.RequireEnv, b)
			}
			t.Skipf("%s missing (Debian's tempest and octavia-tempest-plugin)", b)
		}
	}
	exclude, err := filepath.Abs("../compat/tempest/exclude-octavia.txt")
	if err != nil {
		t.Fatal(err)
	}
	features, err := os.ReadFile("../compat/tempest/features.conf")
	if err != nil {
		t.Fatal(err)
	}
	serverArgs := []string{"--l7"}
	if dataplane == "ovn" {
		serverArgs = append(serverArgs, "--neutron-vip-ports", "ovn")
	}
	c, cloud, _, _ := newRealNeutronCluster(t, serverArgs...)
	if dataplane == "ovn" {
		startOVNAgent(t, c, cloud, false)
	}
	src, err := filepath.Abs("../../deploy/octavia-provider")
	if err != nil {
		t.Fatal(err)
	}
	withOVN := slices.Contains(providers, "ovn")
	oct := cloud.StartOctavia(openstack.OctaviaOptions{ProviderSource: src, FlowlbURL: c.api, FlowlbCA: c.tls.CACert,
		OVNProvider: withOVN})
	cloud.CreateRoles(openstack.OctaviaRoles...)
	drivers := "flowlb:" + openstack.OctaviaProviderDescription
	if withOVN {
		drivers += ",ovn:" + openstack.OVNProviderDescription
	}

	work := t.TempDir()
	fabric := c.lab.Fabric()
	run := func(timeout time.Duration, script string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var out bytes.Buffer
		err := fabric.Run(ctx, nil, &out, &out, "sh", "-c", script)
		return out.String(), err
	}
	// Each run has a workspace of its own, in a private registry: the
	// default one (~/.tempest) refuses a second workspace of the same name.
	initWorkspace := func(dir, conf string) {
		if out, err := run(5*time.Minute, fmt.Sprintf("cd %s && tempest init --workspace-path %s/workspace.yaml --name flowlb-%s ws",
			dir, dir, strings.ReplaceAll(strings.TrimPrefix(dir, work), "/", "-")+filepath.Base(work))); err != nil {
			t.Fatalf("tempest init: %v\n%s", err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, "ws", "etc", "tempest.conf"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	re := cmp.Or(os.Getenv("FLOWLB_TEMPEST_REGEX"), `^octavia_tempest_plugin\.tests\.api\.v2`)
	initWorkspace(work, tempestConf(work, cloud.KeystoneURL, providers[0], drivers, 0)+string(features))
	listing, err := run(5*time.Minute, fmt.Sprintf("cd %s/ws && tempest run --list-tests --regex '%s' --exclude-list %s", work, re, exclude))
	ids := tempestTestIDs(listing)
	if err != nil || len(ids) == 0 {
		t.Fatalf("tempest run --list-tests: %d tests, %v\n%s", len(ids), err, listing)
	}
	// The runs go side by side, each on subnets of its own: classes on
	// their own networks with the same CIDRs would get the same VIP
	// addresses at once, which one flowlb data plane refuses
	// (docs/operations.md, overlapping tenant subnets). Within a run, one
	// test at a time.
	type shard struct {
		provider, dir string
		err           error
	}
	var runs []*shard
	for pi, p := range providers {
		for i, list := range dealTests(ids, shards) {
			s := &shard{provider: p, dir: filepath.Join(work, fmt.Sprintf("%s-%d", p, i))}
			if err := os.MkdirAll(s.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			initWorkspace(s.dir, tempestConf(s.dir, cloud.KeystoneURL, p, drivers, pi*shards+i)+string(features))
			if err := os.WriteFile(filepath.Join(s.dir, "tests.txt"), []byte(strings.Join(list, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			runs = append(runs, s)
		}
	}
	t.Logf("tempest: %d tests of %s through Octavia at %s, providers %s (flowlb's data plane: %s), %d runs each side by side",
		len(ids), re, oct.URL, strings.Join(providers, ", "), dataplane, shards)
	// The whole suite through one provider, one test at a time, took 1.5
	// to 3 hours on 2 loaded cores: the runs get what the test's -timeout
	// leaves, less the time to count and report.
	budget := 170 * time.Minute
	if d, ok := t.Deadline(); ok {
		budget = time.Until(d) - 10*time.Minute
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, s := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, s.err = run(budget, fmt.Sprintf("cd %[1]s/ws && tempest run --load-list %[1]s/tests.txt --concurrency 1 >%[1]s/run.txt 2>&1", s.dir))
		}()
	}
	wg.Wait()
	took := time.Since(t0).Round(time.Second)
	for _, p := range providers {
		var tables [][][]string
		var runErrs []error
		for _, s := range runs {
			if s.provider != p {
				continue
			}
			rows := shardRows(t, run, s.dir)
			if runFailed(s.err, rows, took < budget) {
				runErrs = append(runErrs, fmt.Errorf("%s: %w", filepath.Base(s.dir), s.err))
			}
			tables = append(tables, rows)
		}
		kept := p
		if p == "flowlb" && dataplane == "ovn" {
			kept = "flowlb-ovn"
		}
		counts, failed := tempestCounts(mergeTempestRows(tables...))
		t.Logf("tempest through Octavia (provider %s, %s data plane): %s, %s\n%s", p, dataplane, took, re, formatCounts(counts))
		// A test that failed beside the other runs is run once more,
		// alone: Octavia's API lists with two statements outside a
		// transaction (subqueryload), so a list that runs while another
		// run's delete commits can answer 500. Both results are logged;
		// only a test that fails alone too fails this test.
		if again, classes := retriableTests(failed); len(again) > 0 && len(runErrs) == 0 {
			var first string
			for _, s := range runs {
				if s.provider == p {
					first = s.dir
					break
				}
			}
			dir := filepath.Join(work, p+"-again")
			stillFailed, err := runAlone(t, run, first, dir, again)
			if err != nil {
				t.Errorf("tempest (provider %s): running %d failed tests again: %v", p, len(again), err)
			} else {
				t.Logf("tempest (provider %s): %d tests failed beside the other runs; run again alone, %d of them failed: %v",
					p, len(again), len(stillFailed), again)
				failed = append(classes, stillFailed...)
			}
		}
		keepTempestResults(t, work, p, kept)
		if len(failed) > 0 || len(runErrs) > 0 {
			var details []string
			for _, s := range runs {
				if s.provider != p {
					continue
				}
				log, _ := os.ReadFile(filepath.Join(s.dir, "run.txt"))
				for _, l := range strings.Split(string(log), "\n") {
					if strings.Contains(l, "... FAILED") || strings.Contains(l, "Details:") || strings.Contains(l, "Error: ") ||
						strings.Contains(l, "MismatchError") {
						details = append(details, l)
					}
				}
			}
			if len(details) > 200 {
				details = details[:200]
			}
			t.Errorf("tempest (provider %s): %d failed (%v): %v\n%s", p, len(failed), errors.Join(runErrs...), failed, strings.Join(details, "\n"))
		}
		if counts["total"][0] == 0 {
			t.Errorf("tempest (provider %s) passed no test", p)
		}
	}
}

// runFailed says whether a tempest run's error is more than its failed
// tests: tempest exits 1 when a test fails, which its rows then show; a
// run that ended by another error, or was cut short (in time is false),
// failed as a run.
func runFailed(err error, rows [][]string, inTime bool) bool {
	if err == nil {
		return false
	}
	var exit *exec.ExitError
	if _, failed := tempestCounts(rows); inTime && errors.As(err, &exit) && exit.ExitCode() == 1 && len(failed) > 0 {
		return false
	}
	return true
}

// retriableTests splits tempestCounts' failed ids into tests that can be
// run again by id and the classes whose setup or teardown failed.
func retriableTests(failed []string) (tests, classes []string) {
	for _, id := range failed {
		if strings.HasSuffix(id, ".class") {
			classes = append(classes, id)
		} else {
			tests = append(tests, id)
		}
	}
	return tests, classes
}

// runAlone runs the tests once more, one at a time, in the workspace of
// the run in from (no other run goes on by then), its output and results
// in dir, and returns those that failed again.
func runAlone(t *testing.T, run func(time.Duration, string) (string, error), from, dir string, tests []string) ([]string, error) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.txt"), []byte(strings.Join(tests, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	out, err := run(time.Duration(len(tests))*5*time.Minute, fmt.Sprintf(
		"cd %[1]s/ws && tempest run --load-list %[2]s/tests.txt --concurrency 1 >%[2]s/run.txt 2>&1; "+
			"stestr last --subunit | subunit2csv --no-passthrough >%[2]s/results.csv", from, dir))
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	rows, err := readResultsCSV(dir)
	if err != nil {
		return nil, err
	}
	counts, failed := tempestCounts(rows)
	if ran := counts["total"]; ran[0]+ran[1]+ran[2] < len(tests) {
		return nil, fmt.Errorf("%d of %d tests have a result (%s/run.txt)", ran[0]+ran[1]+ran[2], len(tests), dir)
	}
	return failed, nil
}

// readResultsCSV reads the rows subunit2csv wrote to dir/results.csv.
func readResultsCSV(dir string) ([][]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "results.csv"))
	if err != nil {
		return nil, err
	}
	return csv.NewReader(bytes.NewReader(b)).ReadAll()
}

// maxTempestSlots is how many tempest runs tempestConf has subnets for.
const maxTempestSlots = 6

// shardRows is one run's results as subunit2csv's rows: from stestr's
// record, or, for a run cut short (stestr then has none), from tempest's
// own output.
func shardRows(t *testing.T, run func(time.Duration, string) (string, error), dir string) [][]string {
	t.Helper()
	out, err := run(5*time.Minute, fmt.Sprintf("cd %[1]s/ws && stestr last --subunit | subunit2csv --no-passthrough >%[1]s/results.csv", dir))
	if err == nil {
		rows, err := readResultsCSV(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) >= 2 {
			return rows
		}
	}
	log, lerr := os.ReadFile(filepath.Join(dir, "run.txt"))
	if lerr != nil {
		t.Fatalf("tempest's results in %s: %v; %v\n%s", dir, err, lerr, out)
	}
	return runLogRows(string(log))
}

// tempestTestIDs is the plugin's test ids in the output of tempest run
// --list-tests, sorted, once each.
func tempestTestIDs(listing string) []string {
	var ids []string
	for _, l := range strings.Split(listing, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "octavia_tempest_plugin.") {
			ids = append(ids, l)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// dealTests deals the tests to n runs in turn, so that each run gets
// its share of every class (a class's setUp then runs in each run that
// has a test of it, on networks of its own).
func dealTests(ids []string, n int) [][]string {
	runs := make([][]string, n)
	for i, id := range ids {
		runs[i%n] = append(runs[i%n], id)
	}
	return runs
}

// mergeTempestRows joins the subunit2csv tables of several runs into one,
// with one row for each test: a class's setUpClass or tearDownClass,
// reported by every run that ran the class, counts once, as failed if
// it failed in any.
func mergeTempestRows(tables ...[][]string) [][]string {
	merged := [][]string{{"test", "status"}}
	at := map[string]int{}
	for _, rows := range tables {
		if len(rows) == 0 {
			continue
		}
		ti, si := slices.Index(rows[0], "test"), slices.Index(rows[0], "status")
		if ti < 0 || si < 0 {
			continue
		}
		for _, r := range rows[1:] {
			if len(r) <= ti || len(r) <= si {
				continue
			}
			id, status := r[ti], r[si]
			i, seen := at[id]
			if !seen {
				at[id] = len(merged)
				merged = append(merged, []string{id, status})
				continue
			}
			if tempestFailed(status) && !tempestFailed(merged[i][1]) {
				merged[i][1] = status
			}
		}
	}
	return merged
}

// tempestFailed says whether a subunit status is a failure.
func tempestFailed(status string) bool {
	switch status {
	case "fail", "failure", "error", "xfail", "uxsuccess":
		return true
	}
	return false
}

// keepTempestResults copies tempest's output and results of each run of
// a provider (and of the run of failed tests again, "again") to
// _artifacts/octavia-tempest-<as>/<run> at the
// repository's root (git ignores it), so that they outlive the test's
// directory, a run cut short included.
func keepTempestResults(t *testing.T, work, provider, as string) {
	dir, err := filepath.Abs("../../_artifacts/octavia-tempest-" + as)
	if err == nil {
		err = os.RemoveAll(dir)
	}
	names := []string{"again"}
	for i := range maxTempestSlots {
		names = append(names, strconv.Itoa(i))
	}
	for _, name := range names {
		if err != nil {
			break
		}
		from := filepath.Join(work, provider+"-"+name)
		if _, serr := os.Stat(from); serr != nil {
			continue
		}
		to := filepath.Join(dir, name)
		if err = os.MkdirAll(to, 0o755); err == nil {
			err = copyIfThere(from, to, "run.txt", "results.csv")
		}
	}
	if err != nil {
		t.Logf("tempest's results not kept: %v", err)
		return
	}
	t.Logf("tempest's output and results kept in %s", dir)
}

// copyIfThere copies the named files that exist in from into to.
func copyIfThere(from, to string, names ...string) error {
	for _, f := range names {
		b, err := os.ReadFile(filepath.Join(from, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(to, f), b, 0o644)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runLogRows reads tempest run's own output (one line per test: "{0}
// <id> [1.2s] ... ok", "... SKIPPED: <reason>", "... FAILED") as the
// rows of subunit2csv's table ("test", "status"), for a run whose
// subunit stream was cut short.
func runLogRows(log string) [][]string {
	rows := [][]string{{"test", "status"}}
	for _, l := range strings.Split(log, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "{")
		if !ok {
			continue
		}
		_, rest, ok = strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		id, verdict, ok := strings.Cut(rest, " ... ")
		if !ok {
			continue
		}
		if i := strings.Index(id, " ["); i > 0 {
			id = id[:i]
		}
		status := ""
		switch {
		case verdict == "ok":
			status = "success"
		case strings.HasPrefix(verdict, "SKIPPED"):
			status = "skip"
		case strings.HasPrefix(verdict, "FAILED"):
			status = "fail"
		default:
			continue
		}
		rows = append(rows, []string{id, status})
	}
	return rows
}

// tempestConf is tempest.conf for the run: the bed's Keystone (its admin
// makes the per-class users), Octavia's load-balancer endpoint from the
// catalog and the provider under test; the feature flags of what flowlb serves
// follow it, from test/compat/tempest/features.conf (run.sh appends the
// same file for flowlb's own API). The
// plugin makes real networks only with test_with_noop off, and then skips
// every class unless compute and image are "available" too: its API tests
// call neither. The CIDRs of the per-class subnets are the lab's test
// ranges, inside Neutron only, three of each family for each of the runs
// side by side (slot 0 to maxTempestSlots-1).
func tempestConf(work, keystoneURL, provider, providers string, slot int) string {
	return fmt.Sprintf(`[DEFAULT]
log_dir = %[1]s/log
[auth]
use_dynamic_credentials = True
admin_username = %[3]s
admin_password = %[4]s
admin_project_name = %[5]s
admin_domain_name = Default
[identity]
uri_v3 = %[2]s/v3
auth_version = v3
region = %[6]s
[identity-feature-enabled]
api_v2 = False
api_v3 = True
[service_available]
load_balancer = True
neutron = True
nova = True
glance = True
cinder = False
swift = False
barbican = False
[network]
project_networks_reachable = True
[load_balancer]
test_with_noop = False
provider = %[8]s
RBAC_test_type = advanced
enabled_provider_drivers = %[7]s
test_with_ipv6 = True
vip_subnet_cidr = 198.18.%[9]d.0/24
member_1_ipv4_subnet_cidr = 198.18.%[10]d.0/24
member_2_ipv4_subnet_cidr = 198.18.%[11]d.0/24
vip_ipv6_subnet_cidr = 2001:2:0:%[9]d::/64
member_1_ipv6_subnet_cidr = 2001:2:0:%[10]d::/64
member_2_ipv6_subnet_cidr = 2001:2:0:%[11]d::/64
build_interval = 0.5
build_timeout = 180
lb_build_interval = 0.5
lb_build_timeout = 180
check_interval = 0.5
check_timeout = 120
[enforce_scope]
octavia = False
`, work, keystoneURL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject, keystone.Region, providers, provider,
		230+3*slot, 231+3*slot, 232+3*slot)
}

// tempestCounts counts subunit2csv's rows of the plugin's tests by module
// as [passed, skipped, failed] (a class's setUpClass or tearDownClass
// counted as a test of its module), with the total under "total", and
// lists the failed ones.
func tempestCounts(rows [][]string) (map[string][3]int, []string) {
	counts := map[string][3]int{}
	var failed []string
	if len(rows) == 0 {
		return counts, nil
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	ti, si := col["test"], col["status"]
	for _, r := range rows[1:] {
		if len(r) <= ti || len(r) <= si {
			continue
		}
		id := r[ti]
		for _, p := range []string{"setUpClass (", "tearDownClass ("} {
			if strings.HasPrefix(id, p) {
				id = strings.TrimSuffix(strings.TrimPrefix(id, p), ")") + ".class"
			}
		}
		if !strings.HasPrefix(id, "octavia_tempest_plugin.") {
			continue
		}
		parts := strings.Split(id, ".")
		if len(parts) < 5 {
			continue
		}
		mod := parts[4]
		k := -1
		switch r[si] {
		case "success":
			k = 0
		case "skip":
			k = 1
		default:
			if tempestFailed(r[si]) {
				k = 2
				failed = append(failed, id)
			}
		}
		if k < 0 {
			continue
		}
		c, tot := counts[mod], counts["total"]
		c[k]++
		tot[k]++
		counts[mod], counts["total"] = c, tot
	}
	return counts, failed
}

// formatCounts is tempestCounts' result as a table, modules in order and
// the total last.
func formatCounts(counts map[string][3]int) string {
	var mods []string
	for m := range counts {
		if m != "total" {
			mods = append(mods, m)
		}
	}
	sort.Strings(mods)
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %7s %7s %7s\n", "module", "passed", "skipped", "failed")
	for _, m := range append(mods, "total") {
		c := counts[m]
		fmt.Fprintf(&b, "%-40s %7d %7d %7d\n", m, c[0], c[1], c[2])
	}
	return b.String()
}
