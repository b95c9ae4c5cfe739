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
	"sort"
	"strings"
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
// are left out, each with its reason. FLOWLB_TEMPEST_PROVIDER=ovn runs
// the same suite through the same Octavia with provider ovn (Debian's
// ovn-octavia-provider, enabled beside flowlb), for the comparison. It
// fails on any failed test and logs the counts by module.
func TestRealOctaviaTempest(t *testing.T) {
	openstack.Require(t)
	provider := cmp.Or(os.Getenv("FLOWLB_TEMPEST_PROVIDER"), "flowlb")
	if provider != "flowlb" && provider != "ovn" {
		t.Fatalf("FLOWLB_TEMPEST_PROVIDER=%s: flowlb or ovn", provider)
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
	c, cloud, _, _ := newRealNeutronCluster(t)
	src, err := filepath.Abs("../../deploy/octavia-provider")
	if err != nil {
		t.Fatal(err)
	}
	oct := cloud.StartOctavia(openstack.OctaviaOptions{ProviderSource: src, FlowlbURL: c.api, FlowlbCA: c.tls.CACert,
		OVNProvider: provider == "ovn"})
	cloud.CreateRoles(openstack.OctaviaRoles...)
	drivers := "flowlb:" + openstack.OctaviaProviderDescription
	if provider == "ovn" {
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
	// A private workspace registry: the default one (~/.tempest) refuses
	// a second workspace of the same name.
	if out, err := run(5*time.Minute, fmt.Sprintf("cd %s && tempest init --workspace-path %s/workspace.yaml --name flowlb-%s ws",
		work, work, filepath.Base(work))); err != nil {
		t.Fatalf("tempest init: %v\n%s", err, out)
	}
	conf := tempestConf(work, cloud.KeystoneURL, provider, drivers) + string(features)
	if err := os.WriteFile(filepath.Join(work, "ws", "etc", "tempest.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	re := os.Getenv("FLOWLB_TEMPEST_REGEX")
	if re == "" {
		re = `^octavia_tempest_plugin\.tests\.api\.v2`
	}
	t.Logf("tempest: running %s through Octavia at %s", re, oct.URL)
	t0 := time.Now()
	// One test class at a time: classes on their own networks with the
	// same CIDRs would get the same VIP addresses at once, which one
	// flowlb data plane refuses (docs/operations.md, overlapping tenant
	// subnets).
	// The whole suite, one class at a time, takes 1.5 to 3 hours on 2
	// loaded cores: the run gets what the test's -timeout leaves, less
	// the time to count and report.
	budget := 170 * time.Minute
	if d, ok := t.Deadline(); ok {
		budget = time.Until(d) - 10*time.Minute
	}
	out, runErr := run(budget, fmt.Sprintf("cd %s/ws && tempest run --regex '%s' --exclude-list %s --concurrency 1 >%s/run.txt 2>&1",
		work, re, exclude, work))
	took := time.Since(t0).Round(time.Second)
	out2, csvErr := run(5*time.Minute, fmt.Sprintf("cd %s/ws && stestr last --subunit | subunit2csv --no-passthrough >%s/results.csv", work, work))
	keepTempestResults(t, work, provider)
	var rows [][]string
	if csvErr == nil {
		f, err := os.Open(filepath.Join(work, "results.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rows, err = csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(rows) < 2 {
		// A run cut short leaves stestr no result to give: count what
		// tempest's own output says of each test.
		log, err := os.ReadFile(filepath.Join(work, "run.txt"))
		if err != nil {
			t.Fatalf("tempest's results: %v; %v\n%s%s", csvErr, err, out, out2)
		}
		rows = runLogRows(string(log))
	}
	counts, failed := tempestCounts(rows)
	t.Logf("tempest through Octavia (provider %s): %s, %s\n%s", provider, took, re, formatCounts(counts))
	if len(failed) > 0 || runErr != nil {
		log, _ := os.ReadFile(filepath.Join(work, "run.txt"))
		var details []string
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "... FAILED") || strings.Contains(l, "Details:") || strings.Contains(l, "Error: ") ||
				strings.Contains(l, "MismatchError") {
				details = append(details, l)
			}
		}
		if len(details) > 200 {
			details = details[:200]
		}
		t.Errorf("tempest: %d failed (%v): %v\n%s", len(failed), runErr, failed, strings.Join(details, "\n"))
	}
	if counts["total"][0] == 0 {
		t.Errorf("tempest passed no test\n%s", out)
	}
}

// keepTempestResults copies tempest's output and results of a run to
// _artifacts/octavia-tempest-<provider> at the repository's root (git
// ignores it), so that they outlive the test's directory, a run cut
// short included.
func keepTempestResults(t *testing.T, work, provider string) {
	dir, err := filepath.Abs("../../_artifacts/octavia-tempest-" + provider)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = copyIfThere(work, dir, "run.txt", "results.csv")
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
// ranges, inside Neutron only.
func tempestConf(work, keystoneURL, provider, providers string) string {
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
vip_subnet_cidr = 198.18.230.0/24
member_1_ipv4_subnet_cidr = 198.18.231.0/24
member_2_ipv4_subnet_cidr = 198.18.232.0/24
vip_ipv6_subnet_cidr = 2001:2:0:230::/64
member_1_ipv6_subnet_cidr = 2001:2:0:231::/64
member_2_ipv6_subnet_cidr = 2001:2:0:232::/64
build_interval = 0.5
build_timeout = 180
lb_build_interval = 0.5
lb_build_timeout = 180
check_interval = 0.5
check_timeout = 120
[enforce_scope]
octavia = False
`, work, keystoneURL, keystone.AdminUser, keystone.AdminPassword, keystone.AdminProject, keystone.Region, providers, provider)
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
		case "fail", "failure", "error", "xfail", "uxsuccess":
			k = 2
			failed = append(failed, id)
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
