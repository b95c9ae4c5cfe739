package dashboard

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// headless starts Debian's chromium for one test (skipped without it,
// failed under FLOWLB_REQUIRE_ROOT=1, as test/e2e's browser test); the
// test's cleanup kills it.
func headless(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(testutil.RequireRootEnv) == "1" {
			t.Fatalf("chromium is missing (apt-get install chromium) and %s=1 is set", testutil.RequireRootEnv)
		}
		t.Skip("chromium is not installed")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()), chromedp.NoSandbox)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// The page under Keystone: the sign-in form until a token is accepted, a
// refusal said on the form, the caller's view once signed in (a project
// member: its load balancer, no agents), and back to the form on log out.
func TestPageKeystoneSignIn(t *testing.T) {
	login := func(_ context.Context, r LoginRequest) (string, time.Time, error) {
		if r.User != "alice" || r.Password != "pw" {
			return "", time.Time{}, ErrLoginRefused
		}
		return "member", time.Now().Add(time.Hour), nil
	}
	_, srv := newTest(t, login)
	ctx := headless(t)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := chromedp.Do(c, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	wait := func(what, cond string) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, what, func() (bool, string) {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ok, err := chromedp.Run(c, chromedp.Evaluate[bool](cond))
			if err != nil {
				return false, err.Error()
			}
			text, _ := chromedp.Run(c, chromedp.Evaluate[string](`document.body.innerText`))
			return ok, text
		})
	}
	do("open", chromedp.Navigate(srv.URL+"/dashboard/"))
	wait("the sign-in form", `!document.getElementById("login").hidden && document.getElementById("main").hidden`)

	fill := func(password string) {
		do("sign in",
			chromedp.SetValue(chromedp.CSS(`#login-form input[name="username"]`), "alice"),
			chromedp.SetValue(chromedp.CSS(`#login-form input[name="password"]`), password),
			chromedp.SetValue(chromedp.CSS(`#login-form input[name="project"]`), "p1"),
			chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)))
	}
	fill("wrong")
	wait("the refusal on the form", `document.getElementById("login-error").textContent.includes("requires authentication")`)
	fill("pw")
	wait("alice's load balancer, and no agents", `!!document.querySelector('[data-lb="lb1"]') && !document.querySelector('[data-lb="lb2"]')`+
		` && document.getElementById("agents-section").hidden && sessionStorage.getItem("flowlb-token") === "member"`)

	do("log out", chromedp.Click(chromedp.CSS(`#logout`)))
	wait("the form again, the token gone", `!document.getElementById("login").hidden && sessionStorage.getItem("flowlb-token") === null`)

	// A pasted token works as well: an admin's shows every project and the
	// agents.
	do("paste a token",
		chromedp.SetValue(chromedp.CSS(`#token-form input[name="token"]`), "admin"),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)))
	wait("the admin's view", `!!document.querySelector('[data-lb="lb2"]') && document.querySelectorAll("[data-agent]").length === 2`)
	// Each agent's kernel: n1's refuses its writes, and was repaired
	// once; n2's is another replica's to know.
	wait("the agents' kernels", `(() => {
		const n1 = document.querySelector('[data-agent="n1"] [data-kernel]'), n2 = document.querySelector('[data-agent="n2"] [data-kernel]');
		return n1.dataset.kernel === "refusing" && n1.dataset.repairs === "1" && n1.textContent.includes("operation not permitted") &&
			n1.textContent.includes("table rebuilt") && n2.dataset.kernel === "unknown";
	})()`)
	// What each node announces: n1 two VIPs over its one BGP session,
	// established; n2 nothing.
	wait("the agents' announcements", `(() => {
		const n1 = document.querySelector('[data-agent="n1"] [data-announce]'), n2 = document.querySelector('[data-agent="n2"] [data-announce]');
		return n1.dataset.announce === "bgp" && n1.dataset.vips === "2" && n1.dataset.sessionsUp === "1" &&
			n1.textContent === "BGP 1/1 established: 2 VIPs" && n1.title.includes("198.18.0.254 AS 64500 established") && n2.dataset.announce === "none";
	})()`)
	// What the servers give each node to answer ARP and neighbour
	// discovery for: n2 two VIPs, n1 none.
	wait("the agents' L2 VIPs", `(() => {
		const n1 = document.querySelector('[data-agent="n1"] [data-l2]'), n2 = document.querySelector('[data-agent="n2"] [data-l2]');
		return n1.dataset.l2Vips === "0" && n1.textContent === "0 VIPs" &&
			n2.dataset.l2 === "198.19.128.10 2001:2:0:8000::7" && n2.textContent === "2 VIPs: 198.19.128.10, 2001:2:0:8000::7";
	})()`)
}
