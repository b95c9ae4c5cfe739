package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// screenshotsEnv names a directory where the browser test saves its
// screenshots (docs/images for the README); unset, they go to a
// temporary directory.
const screenshotsEnv = "FLOWLB_SCREENSHOTS"

// chromiumPath finds Debian's chromium; without it the test skips, or
// fails when FLOWLB_REQUIRE_ROOT=1 (every root test must run).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(testutil.RequireRootEnv) == "1" {
		t.Fatalf("chromium is missing (apt-get install chromium; hack/install-deps.sh --test) and %s=1 is set", testutil.RequireRootEnv)
	}
	t.Skip("chromium is not installed")
	return ""
}

// browser is a headless chromium driven by chromedp; the test's cleanup
// ends it (the allocator's cancel kills the process).
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func newBrowser(t *testing.T, path string) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1440, 1000),
		chromedp.UserDataDir(t.TempDir()),
		// Root has no user namespace sandbox to spare; the page is ours.
		chromedp.NoSandbox)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser, under the test's lifetime.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	return &browser{t: t, ctx: ctx, dir: dir}
}

// run runs one action, bounded.
func run[T any](b *browser, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, js string, opts ...chromedp.EvaluateOption) (T, error) {
	return run(b, chromedp.Evaluate[T](js, opts...))
}

// waitFor waits until the expression, evaluated in the page, is true;
// show says what the page has instead.
func (b *browser) waitFor(within time.Duration, what, cond, show string) {
	b.t.Helper()
	testutil.Eventually(b.t, within, what, func() (bool, string) {
		ok, err := eval[bool](b, cond)
		if err != nil {
			return false, err.Error()
		}
		seen, _ := eval[string](b, show)
		return ok, seen
	})
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := run(b, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", p, len(png))
}

// TestDashboardInBrowser opens the dashboard in headless chromium through
// the lab's loopback forwarder: it lists the load balancers with their
// members, shows a member turning ERROR when its backend dies and ONLINE
// when it returns (with the transitions), and the nodes' revisions
// catching up after a change that one node was too frozen to program at
// once.
func TestDashboardInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	c := newCluster(t, 2, 2)
	pods := c.lab.Pods()
	lb, pool, members := c.createLB(c.subnet("flowlb-vip-subnet"), nil, "ROUND_ROBIN", pods)
	lbID := lb["id"].(string)
	c.createMonitor(lbID, pool, map[string]any{"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1, "max_retries_down": 2})
	for _, id := range members {
		c.waitMemberStatus(pool, id, "ONLINE", 10*time.Second)
	}
	// A second load balancer, with no monitor, to list.
	other, _, _ := c.createLB(c.subnet("flowlb-vip-subnet"), map[string]any{"protocol_port": 81}, "SOURCE_IP", pods[2:])
	// Some traffic, for the statistics.
	vip := net.JoinHostPort(lb["vip_address"].(string), "80")
	answered, fails, err := spread([]lab.Host{pods[1], pods[3]}, vip, 10)
	if fails > 0 {
		t.Errorf("%d requests through %s failed: %v", fails, vip, err)
	}

	url, err := c.lab.StartDashboardProxy([]string{flowlb(t), "lab", "dashboard-proxy"}, c.api, c.tls.CACert)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, chromium)
	if _, err := run(b, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	lbsShown := `JSON.stringify([...document.querySelectorAll("[data-lb]")].map(e => e.dataset.lb))`
	b.waitFor(15*time.Second, "both load balancers listed",
		fmt.Sprintf(`!!document.querySelector('[data-lb=%q]') && !!document.querySelector('[data-lb=%q]')`, lbID, other["id"]), lbsShown)
	memberStatus := func(id string) string {
		return fmt.Sprintf(`((document.querySelector('[data-member=%q]') || {dataset: {}}).dataset.status || "absent")`, id)
	}
	for name, id := range members {
		b.waitFor(10*time.Second, name+" ONLINE on the page", memberStatus(id)+` === "ONLINE"`, memberStatus(id))
	}
	// Each member's connections: those it answered through the VIP (the
	// monitor's probes go to it directly).
	memberConns := func(id string) string {
		return fmt.Sprintf(`((document.querySelector('[data-member=%q] [data-member-connections]') || {dataset: {}}).dataset.memberConnections || "0")`, id)
	}
	for name, id := range members {
		b.waitFor(15*time.Second, fmt.Sprintf("%s's %d connections on the page", name, answered[name]),
			fmt.Sprintf(`%s === "%d"`, memberConns(id), answered[name]), memberConns(id))
	}
	agentsShown := `JSON.stringify([...document.querySelectorAll("[data-agent]")].map(e => [e.dataset.agent, e.dataset.revision, e.dataset.lag]))`
	b.waitFor(10*time.Second, "both agents listed", `document.querySelectorAll("[data-agent]").length === 2`, agentsShown)
	b.screenshot("dashboard.png")

	// The victim's backend dies: its member turns ERROR on the page, with
	// the transition listed; it comes back ONLINE when the backend does.
	victim := pods[0].Name
	if err := c.lab.StopEcho(victim); err != nil {
		t.Fatal(err)
	}
	b.waitFor(15*time.Second, victim+" ERROR on the page", memberStatus(members[victim])+` === "ERROR"`, memberStatus(members[victim]))
	b.waitFor(5*time.Second, victim+"'s transition to ERROR listed",
		fmt.Sprintf(`!!document.querySelector('[data-transition=%q][data-status="ERROR"]')`, members[victim]),
		`document.querySelector("#transitions").innerText`)
	b.screenshot("dashboard-member-error.png")
	if err := c.lab.StartEcho(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	b.waitFor(15*time.Second, victim+" ONLINE again on the page", memberStatus(members[victim])+` === "ONLINE"`, memberStatus(members[victim]))

	// Node 2's agent is frozen while a change is made: the page shows it
	// behind, then catching up when it thaws.
	agent2, err := c.lab.Node(2).Proc("agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(agent2.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, agent2.PID)
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := syscall.Kill(agent2.PID, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw)
	if code, body := c.call("PUT", "/v2/lbaas/loadbalancers/"+lbID, map[string]any{"loadbalancer": map[string]any{"description": "changed"}}); code != 200 {
		t.Fatalf("update: %d %v", code, body)
	}
	changeRow := fmt.Sprintf(`document.querySelector('[data-change-lb=%q]')`, lbID)
	b.waitFor(10*time.Second, "the change listed, programmed on n1, pending on n2",
		changeRow+` && !!`+changeRow+`.querySelector('[data-node="n1"]') && !!`+changeRow+`.querySelector('[data-pending="n2"]')`,
		`document.querySelector("#changes").innerText`)
	rev, err := eval[int64](b, `+`+changeRow+`.dataset.change`)
	if err != nil {
		t.Fatal(err)
	}
	agentRev := func(node string) string {
		return fmt.Sprintf(`(+(document.querySelector('[data-agent=%q]') || {dataset: {revision: -1}}).dataset.revision)`, node)
	}
	b.waitFor(5*time.Second, "n2 shown behind the change", fmt.Sprintf(`%s < %d && %s >= %d`, agentRev("n2"), rev, agentRev("n1"), rev), agentsShown)
	b.screenshot("dashboard-node-lagging.png")
	thaw()
	b.waitFor(15*time.Second, "n2 caught up, the change programmed on both nodes",
		fmt.Sprintf(`%s >= %d && %s.dataset.pendingCount === "0" && !!%s.querySelector('[data-node="n2"]')`, agentRev("n2"), rev, changeRow, changeRow),
		agentsShown+` + " " + document.querySelector("#changes").innerText`)
	b.screenshot("dashboard-caught-up.png")

	// What the page showed is what the JSON says.
	var st struct {
		Agents []struct {
			Node     string `json:"node"`
			Revision int64  `json:"revision"`
		} `json:"agents"`
	}
	raw, err := eval[string](b, `fetch("api/state").then(r => r.text())`, chromedp.EvalAwaitPromise)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
	for _, a := range st.Agents {
		if a.Revision < rev {
			t.Errorf("the JSON has %s at %d, behind %d", a.Node, a.Revision, rev)
		}
	}
	if len(st.Agents) != 2 {
		t.Errorf("the JSON lists agents %+v", st.Agents)
	}
}

// waitStopped waits until every thread of pid is stopped: SIGSTOP is
// queued at once but each thread stops only when it next runs, so a
// change made right after kill can still be taken by a thread of a
// loaded machine.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			t.Fatal(err)
		}
		if len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: threads %v not stopped within 5s", pid, running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runningThreads lists the threads of pid not in the stopped state.
func runningThreads(pid int) ([]string, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return nil, fmt.Errorf("threads of %d: %v (%d found)", pid, err, len(tasks))
	}
	var running []string
	for _, f := range tasks {
		fields, err := lab.StatFields(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return nil, err
		}
		if st := fields[0]; st != "T" && st != "t" {
			running = append(running, filepath.Base(filepath.Dir(f))+":"+st)
		}
	}
	return running, nil
}
