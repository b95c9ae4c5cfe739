package upstream

import (
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// The specs: every [sig-network] Services spec and every [sig-network]
// [Conformance] spec (81 in v1.34.4), but those the bed cannot run, each
// skipped for a reason docs/kubernetes.md gives ("Kubernetes' own e2e
// tests"): [Serial] and [Disruptive] ones change or restart the cluster
// for everyone (restarting the API server, kube-proxy; the SCTP spec,
// which needs SCTP sockets this machine lacks, is [Serial] too); [Slow],
// [Feature:X], [FeatureGate:X] and [Flaky] ones are not what Kubernetes
// asks of every cluster (none of the 81 is, in v1.34.4).
const (
	E2EFocus = `\[sig-network\] Services|\[sig-network\].*\[Conformance\]`
	E2ESkip  = `\[Serial\]|\[Disruptive\]|\[Slow\]|\[Feature:|\[FeatureGate:|\[Flaky\]`
)

// artifacts is where the junit reports are kept for CI: $FLOWLB_ARTIFACTS,
// else _artifacts at the repository's root (git ignores it).
func artifacts(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("FLOWLB_ARTIFACTS")
	if dir == "" {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "_artifacts")
	}
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// e2eProcs is how many ginkgo processes run the specs side by side: the
// specs mostly wait (pods starting, polls), so a few share 2 cores.
func e2eProcs() int {
	if n, err := strconv.Atoi(os.Getenv("FLOWLB_E2E_PROCS")); err == nil && n > 0 {
		return n
	}
	return max(5, runtime.NumCPU())
}

// runE2E runs the specs focus minus skip with the pinned e2e.test in
// the lab's fabric namespace (where the API server and every node are
// reached, and nothing else), through the ginkgo CLI in procs processes,
// and returns the parsed junit report, kept in dir.
func (r *realLab) runE2E(t *testing.T, dir, focus, skip string, procs int) *junit {
	t.Helper()
	report := filepath.Join(dir, "junit.xml")
	_ = os.Remove(report)
	argv := []string{"lab", "exec", "--name", r.name, "fabric", "--",
		filepath.Join(r.kube, "ginkgo"), "--procs=" + strconv.Itoa(procs), "--no-color", "--silence-skips", "--timeout=90m",
		"--focus=" + focus, "--skip=" + skip,
		"--output-dir=" + dir, "--junit-report=junit.xml",
		filepath.Join(r.kube, "e2e.test"), "--",
		"--kubeconfig=" + r.labKubeconfig(), "--kubectl-path=" + filepath.Join(r.kube, "kubectl"),
		"--provider=local", "--report-dir=" + dir,
		// The cluster's kube-system pods are CoreDNS; give them time
		// on a busy machine.
		"--system-pods-startup-timeout=5m",
		// Told, not counted: e2e.test counts the schedulable nodes in
		// its first ginkgo process only, so a spec that needs two nodes
		// ran or was skipped by which process it fell to.
		"--num-nodes=" + strconv.Itoa(r.nodes),
	}
	t0 := time.Now()
	out, err := r.run(100*time.Minute, argv...)
	_ = os.WriteFile(filepath.Join(dir, "e2e.log"), out, 0o644)
	t.Logf("e2e.test ran in %s (%d processes); log %s", time.Since(t0).Round(time.Second), procs, filepath.Join(dir, "e2e.log"))
	j, perr := readJUnit(report)
	if perr != nil {
		t.Fatalf("no junit report (%v); e2e: %v\n%s", perr, err, tail(out, 60))
	}
	return j
}

func tail(b []byte, lines int) string {
	l := strings.Split(string(b), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// junit is the part of ginkgo's junit report read here.
type junit struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Skipped *struct{} `xml:"skipped"`
}

func readJUnit(path string) (*junit, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j junit
	if err := xml.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &j, nil
}

// specName is a report case's spec, without ginkgo's "[It] " and labels.
var specLabels = regexp.MustCompile(`^\[It\] | \[[^\]]*\]$`)

func specName(name string) string { return strings.TrimSpace(specLabels.ReplaceAllString(name, "")) }

// results are the specs that ran, by outcome.
func (j *junit) results() (passed, failed []junitCase) {
	for _, s := range j.Suites {
		for _, c := range s.Cases {
			switch {
			case c.Failure != nil || c.Status == "failed" || c.Status == "panicked" || c.Status == "timedout":
				failed = append(failed, c)
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
			case !strings.HasPrefix(c.Name, "[It] "):
				// The suite's own nodes ([SynchronizedBeforeSuite],
				// [ReportBeforeSuite], ...) are no specs; they count only
				// when they fail.
			default:
				passed = append(passed, c)
			}
		}
	}
	sort.Slice(passed, func(a, b int) bool { return passed[a].Name < passed[b].Name })
	return passed, failed
}

// TestKubernetesE2E runs Kubernetes' own specs (E2EFocus minus E2ESkip)
// on two real nodes with flowlb installed by kubectl apply -k as the only
// service proxy, and fails on any failed spec. The junit report and the
// log stay in _artifacts/upstream-e2e.
func TestKubernetesE2E(t *testing.T) {
	r := upRealLab(t, 2, "--flowlb")
	dir := artifacts(t, "upstream-e2e")
	j := r.runE2E(t, dir, E2EFocus, E2ESkip, e2eProcs())
	passed, failed := j.results()
	for _, c := range failed {
		msg := ""
		if c.Failure != nil {
			msg = c.Failure.Message
		}
		t.Errorf("FAILED %s\n%s", specName(c.Name), strings.TrimSpace(msg))
	}
	if len(passed)+len(failed) == 0 {
		t.Fatal("no spec ran")
	}
	t.Logf("%d specs passed, %d failed; junit report in %s", len(passed), len(failed), dir)
}

// TestKubernetesE2EKubeProxy runs the same specs with the real kube-proxy
// of the pinned release instead of flowlb, in each mode that
// FLOWLB_E2E_KUBE_PROXY lists (nftables, iptables; make
// upstream-kube-proxy), on the same bed, for the side-by-side table of
// docs/kubernetes.md (hack/e2etable). It skips without the variable: it
// tests kube-proxy, not flowlb, and make test runs flowlb's alone.
func TestKubernetesE2EKubeProxy(t *testing.T) {
	modes := strings.FieldsFunc(os.Getenv("FLOWLB_E2E_KUBE_PROXY"), func(r rune) bool { return r == ',' || r == ' ' })
	if len(modes) == 0 {
		t.Skip("FLOWLB_E2E_KUBE_PROXY is empty (make upstream-kube-proxy sets it)")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			r := upRealLab(t, 2)
			r.startKubeProxies(t, mode)
			dir := artifacts(t, "upstream-e2e-kube-proxy-"+mode)
			j := r.runE2E(t, dir, E2EFocus, E2ESkip, e2eProcs())
			passed, failed := j.results()
			for _, c := range failed {
				t.Logf("kube-proxy %s failed %s", mode, specName(c.Name))
			}
			t.Logf("kube-proxy %s: %d specs passed, %d failed; junit report in %s", mode, len(passed), len(failed), dir)
		})
	}
}

// startKubeProxies runs kube-proxy in mode on every node of the lab, as
// a node process (the lab's own, in the node's network namespace), and
// waits until each answers its health check. Its local traffic is the
// node's own pod network (--detect-local-mode NodeCIDR, the routed pods'
// natural choice); it leaves the machine's conntrack table size alone.
func (r *realLab) startKubeProxies(t *testing.T, mode string) {
	t.Helper()
	for _, n := range []string{"n1", "n2"} {
		argv := []string{"lab", "--name", r.name, "proc", "start", n, "kube-proxy", "--",
			filepath.Join(r.kube, "kube-proxy"), "--kubeconfig", r.labKubeconfig(), "--hostname-override", n,
			"--proxy-mode", mode, "--detect-local-mode", "NodeCIDR",
			"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0", "--conntrack-tcp-timeout-close-wait", "0", "--v", "2"}
		if out, err := r.run(time.Minute, argv...); err != nil {
			t.Fatalf("flowlb %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		testutil.Eventually(t, 2*time.Minute, "kube-proxy healthy on "+n, func() (bool, string) {
			out, err := r.run(10*time.Second, "lab", "exec", "--name", r.name, n, "--", "curl", "-s", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:10256/healthz")
			return err == nil && strings.TrimSpace(string(out)) == "200", fmt.Sprintf("%v %s", err, out)
		})
	}

}

// TestJUnitResults: only specs count as passed; the suite's own nodes
// count when they fail.
func TestJUnitResults(t *testing.T) {
	var j junit
	doc := `<testsuites><testsuite>
<testcase name="[ReportBeforeSuite]" status="passed"></testcase>
<testcase name="[SynchronizedBeforeSuite]" status="failed"><failure message="m">t</failure></testcase>
<testcase name="[It] [sig-network] Services should a [Conformance]" status="passed"></testcase>
<testcase name="[It] [sig-network] Services should b" status="skipped"><skipped message="skipped - Need at least 3 schedulable nodes"></skipped></testcase>
<testcase name="[It] [sig-network] Services should c" status="failed"><failure message="m">t</failure></testcase>
<testcase name="[ReportAfterSuite] Kubernetes e2e suite report" status="passed"></testcase>
</testsuite></testsuites>`
	if err := xml.Unmarshal([]byte(doc), &j); err != nil {
		t.Fatal(err)
	}
	passed, failed := j.results()
	var p, f []string
	for _, c := range passed {
		p = append(p, c.Name)
	}
	for _, c := range failed {
		f = append(f, c.Name)
	}
	if want := []string{"[It] [sig-network] Services should a [Conformance]"}; !slices.Equal(p, want) {
		t.Errorf("passed %q, want %q", p, want)
	}
	if want := []string{"[SynchronizedBeforeSuite]", "[It] [sig-network] Services should c"}; !slices.Equal(f, want) {
		t.Errorf("failed %q, want %q", f, want)
	}
}
