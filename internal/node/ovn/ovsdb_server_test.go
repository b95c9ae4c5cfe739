package ovn

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/node/dataplane"
	"github.com/flowlb/flowlb/internal/shared/flows"
)

// RequireEnv set to 1 makes a missing ovsdb-server, ovsdb-tool or
// ovn-nbctl a failure instead of a skip.
const RequireEnv = "FLOWLB_REQUIRE_OVN"

const nbSchema = "/usr/share/ovn/ovn-nb.ovsschema"
const sbSchema = "/usr/share/ovn/ovn-sb.ovsschema"

// ovnDB is a real ovsdb-server serving a northbound database (and, when
// ovn-northd is installed, a southbound one with ovn-northd between
// them) on unix sockets in a temporary directory: no network, no root.
type ovnDB struct {
	dir string
	nb  string // unix:PATH
	sb  string // unix:PATH, or "" without ovn-northd
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(RequireEnv) == "1" {
				t.Fatalf("%s: %v", tool, err)
			}
			t.Skipf("%s not installed (%s=1 makes this a failure)", tool, RequireEnv)
		}
	}
	if _, err := os.Stat(nbSchema); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// daemon starts a process that the test stops at its end, also on failure.
func daemon(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
}

func startOVNDB(t *testing.T) *ovnDB {
	t.Helper()
	needTools(t, "ovsdb-server", "ovsdb-tool", "ovn-nbctl")
	// A short path: a unix socket's path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "flowlb-ovn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	db := &ovnDB{dir: dir, nb: "unix:" + filepath.Join(dir, "nb.sock")}
	run(t, "ovsdb-tool", "create", filepath.Join(dir, "nb.db"), nbSchema)
	daemon(t, dir, "ovsdb-server", "--no-chdir", "--remote=punix:"+filepath.Join(dir, "nb.sock"),
		"--unixctl="+filepath.Join(dir, "nb.ctl"), "--log-file="+filepath.Join(dir, "nb.log"), filepath.Join(dir, "nb.db"))
	if _, err := exec.LookPath("ovn-northd"); err == nil {
		if _, err := os.Stat(sbSchema); err == nil {
			db.sb = "unix:" + filepath.Join(dir, "sb.sock")
			run(t, "ovsdb-tool", "create", filepath.Join(dir, "sb.db"), sbSchema)
			daemon(t, dir, "ovsdb-server", "--no-chdir", "--remote=punix:"+filepath.Join(dir, "sb.sock"),
				"--unixctl="+filepath.Join(dir, "sb.ctl"), "--log-file="+filepath.Join(dir, "sb.log"), filepath.Join(dir, "sb.db"))
			daemon(t, dir, "ovn-northd", "--no-chdir", "--ovnnb-db="+db.nb, "--ovnsb-db="+db.sb,
				"--unixctl="+filepath.Join(dir, "northd.ctl"), "--log-file="+filepath.Join(dir, "northd.log"))
		}
	}
	eventually(t, "the northbound database", func() error {
		_, err := exec.Command("ovn-nbctl", "--db="+db.nb, "--timeout=1", "show").CombinedOutput()
		return err
	})
	return db
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (db *ovnDB) nbctl(t *testing.T, args ...string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "ovn-nbctl", append([]string{"--db=" + db.nb, "--timeout=5"}, args...)...))
}

// TestWriterOVSDBServer runs the writer's cases against a real
// ovsdb-server, with ovn-nbctl lb-del as the other client that deletes.
func TestWriterOVSDBServer(t *testing.T) {
	db := startOVNDB(t)
	exercise(t, db.nb, func(name string) { db.nbctl(t, "lb-del", name) })
	// The foreign row and the topology are still there, the flowlb rows gone.
	if got := db.nbctl(t, "--bare", "--columns=name", "find", "load_balancer", "external_ids:\"flowlb:load_balancer\"!=\"\""); got != "" {
		t.Errorf("flowlb rows left: %q", got)
	}
	if got := db.nbctl(t, "--bare", "--columns=name", "list", "load_balancer"); got != "foreign" {
		t.Errorf("load balancers left: %q, want the foreign one", got)
	}
}

// TestRepairOVSDBServer: with the agent's loop (a check on every drift
// signal), ovn-nbctl's changes to flowlb's row are undone within a
// second, as seen by ovn-nbctl; ovn-northd, when installed, turns the
// row into the switch's load-balancing flows, repeated backends and all.
func TestRepairOVSDBServer(t *testing.T) {
	db := startOVNDB(t)
	db.nbctl(t, "ls-add", "net-a")
	db.nbctl(t, "lsp-add", "net-a", "vip-port")
	db.nbctl(t, "lsp-set-addresses", "vip-port", "fa:16:3e:00:00:10 198.18.0.10")
	db.nbctl(t, "lr-add", "r1")
	db.nbctl(t, "lrp-add", "r1", "lrp-a", "fa:16:3e:00:00:01", "198.18.0.1/24")
	db.nbctl(t, "lsp-add", "net-a", "rtr-port")
	db.nbctl(t, "lsp-set-type", "rtr-port", "router")
	db.nbctl(t, "lsp-set-addresses", "rtr-port", "router")
	db.nbctl(t, "lsp-set-options", "rtr-port", "router-port=lrp-a")
	db.nbctl(t, "lb-add", "other", "198.18.0.99:80", "198.18.1.99:80", "tcp")
	db.nbctl(t, "ls-lb-add", "net-a", "other")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := New(ctx, Config{NB: db.nb}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	web := svc("198.18.0.10", 80, "lb1", be("198.18.1.1", 8080, 2), be("198.18.1.2", 8080, 1))
	if err := d.Sync(ctx, flows.Table{Revision: 1, Services: table(web)}); err != nil {
		t.Fatal(err)
	}
	const vips = `{"198.18.0.10:80"="198.18.1.1:8080,198.18.1.1:8080,198.18.1.2:8080"}`
	show := func() string {
		return db.nbctl(t, "--bare", "--columns=vips", "find", "load_balancer", "name=flowlb-lb1-tcp") + " | " +
			db.nbctl(t, "--bare", "--columns=load_balancer", "list", "logical_switch", "net-a") + " | " +
			db.nbctl(t, "--bare", "--columns=load_balancer", "list", "logical_router", "r1")
	}
	uuidOf := func() string {
		return db.nbctl(t, "--bare", "--columns=_uuid", "find", "load_balancer", "name=flowlb-lb1-tcp")
	}
	other := db.nbctl(t, "--bare", "--columns=_uuid", "find", "load_balancer", "name=other")
	inPlace := func() error {
		u := uuidOf()
		if u == "" {
			return fmt.Errorf("no row")
		}
		if got := db.nbctl(t, "get", "load_balancer", u, "vips"); got != vips {
			return fmt.Errorf("vips %s", got)
		}
		sw := db.nbctl(t, "--bare", "--columns=load_balancer", "list", "logical_switch", "net-a")
		if !strings.Contains(sw, u) || !strings.Contains(sw, other) {
			return fmt.Errorf("switch holds %q", sw)
		}
		if lr := db.nbctl(t, "--bare", "--columns=load_balancer", "list", "logical_router", "r1"); lr != u {
			return fmt.Errorf("router holds %q", lr)
		}
		return nil
	}
	eventually(t, "written", inPlace)
	t.Logf("written: %s", show())

	if db.sb != "" {
		eventually(t, "ovn-northd's flows", func() error {
			// Fails until ovn-northd made the switch's datapath.
			out, err := exec.Command("ovn-sbctl", "--db="+db.sb, "--timeout=5", "lflow-list", "net-a").CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			want := "ct_lb_mark(backends=198.18.1.1:8080,198.18.1.1:8080,198.18.1.2:8080)"
			if !strings.Contains(string(out), want) {
				return fmt.Errorf("no %s in the switch's flows", want)
			}
			return nil
		})
	} else {
		t.Log("ovn-northd not installed: the logical flows are not checked")
	}

	// The agent's loop: a check on every drift signal.
	repairs := make(chan dataplane.Check, 16)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.Drift():
				c, err := d.Verify(ctx)
				if err != nil {
					t.Error(err)
				}
				if c.Repairs() > 0 {
					repairs <- c
				}
			}
		}
	}()
	for _, tc := range []struct {
		name   string
		change []string
		kind   string
	}{
		{"lb-del", []string{"lb-del", "flowlb-lb1-tcp"}, dataplane.OVNLoadBalancer},
		{"vips changed", []string{"set", "load_balancer", "flowlb-lb1-tcp", `vips={"198.18.0.10:80"="198.18.9.9:80"}`}, dataplane.OVNLoadBalancer},
		{"ls-lb-del", []string{"ls-lb-del", "net-a", "flowlb-lb1-tcp"}, dataplane.OVNAttach},
		{"lr-lb-del", []string{"lr-lb-del", "r1", "flowlb-lb1-tcp"}, dataplane.OVNAttach},
	} {
		start := time.Now()
		db.nbctl(t, tc.change...)
		select {
		case c := <-repairs:
			if c.Repaired[tc.kind] == 0 {
				t.Errorf("%s: repaired %v, want %s", tc.name, c.Repaired, tc.kind)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: not repaired within 1 s", tc.name)
		}
		if err := inPlace(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: repaired, as ovn-nbctl reads it, %v after the change began", tc.name, time.Since(start).Round(time.Millisecond))
	}
	if got := db.nbctl(t, "get", "load_balancer", other, "vips"); got != `{"198.18.0.99:80"="198.18.1.99:80"}` {
		t.Errorf("the other load balancer changed: %s", got)
	}
}

// TestACLOVSDBServer: a listener's allowed_cidrs as flowlb's ACL, on the
// VIP's switch and on the external network behind the router's gateway
// port, against a real ovsdb-server (and, when installed, ovn-northd
// and ovn-trace: the match parsed, the packets dropped or let through):
// written, rewritten when the prefixes change, repaired after another
// client's acl-del, match change or detach, and gone with the service.
func TestACLOVSDBServer(t *testing.T) {
	db := startOVNDB(t)
	for _, c := range [][]string{
		{"ls-add", "net-a"}, {"ls-add", "ext"}, {"lr-add", "r1"},
		{"lsp-add", "net-a", "vip-port"}, {"lsp-set-addresses", "vip-port", "fa:16:3e:00:00:10 198.18.0.10 2001:2::10"},
		{"set", "logical_switch_port", "vip-port", `external_ids:"neutron:port_fip"=198.19.0.50`},
		{"lsp-add", "net-a", "cl-in"}, {"lsp-set-addresses", "cl-in", "fa:16:3e:00:00:20 198.18.0.20 2001:2::20"},
		{"lsp-add", "net-a", "cl-out"}, {"lsp-set-addresses", "cl-out", "fa:16:3e:00:00:21 198.18.0.21 2001:2::21"},
		{"lrp-add", "r1", "lrp-a", "fa:16:3e:00:00:01", "198.18.0.1/24"},
		{"lsp-add", "net-a", "rtr-port"}, {"lsp-set-type", "rtr-port", "router"}, {"lsp-set-addresses", "rtr-port", "router"},
		{"lsp-set-options", "rtr-port", "router-port=lrp-a"},
		{"lrp-add", "r1", "lrp-gw", "fa:16:3e:00:00:02", "198.19.0.1/24"}, {"lrp-set-gateway-chassis", "lrp-gw", "ch1", "1"},
		{"lsp-add", "ext", "ext-rtr"}, {"lsp-set-type", "ext-rtr", "router"}, {"lsp-set-addresses", "ext-rtr", "router"},
		{"lsp-set-options", "ext-rtr", "router-port=lrp-gw"},
		{"lsp-add", "ext", "ln"}, {"lsp-set-type", "ln", "localnet"}, {"lsp-set-addresses", "ln", "unknown"},
		{"lsp-set-options", "ln", "network_name=physnet1"},
		{"acl-add", "net-a", "to-lport", "1002", "ip4.src == 198.18.5.5", "allow-related"}, // another's
	} {
		db.nbctl(t, c...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := New(ctx, Config{NB: db.nb}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	web := svc("198.18.0.10", 80, "lb1", be("198.18.1.1", 8080, 1))
	web.AllowedCIDRs = prefixes("198.18.0.20/32", "2001:2::/64")
	if err := d.Sync(ctx, flows.Table{Revision: 1, Services: table(web)}); err != nil {
		t.Fatal(err)
	}
	acls := func(sw string) []string {
		var out []string
		for _, l := range strings.Split(db.nbctl(t, "acl-list", sw), "\n") {
			if strings.Contains(l, "1100") {
				out = append(out, strings.TrimSpace(l))
			}
		}
		return out
	}
	wantOn := func(line string) func() error {
		return func() error {
			for _, sw := range []string{"net-a", "ext"} {
				if got := acls(sw); line == "" && len(got) != 0 || line != "" && (len(got) != 1 || got[0] != line) {
					return fmt.Errorf("%s's flowlb acls %q, want %q", sw, got, line)
				}
			}
			if got := db.nbctl(t, "acl-list", "net-a"); !strings.Contains(got, "ip4.src == 198.18.5.5") {
				return fmt.Errorf("the other acl gone: %s", got)
			}
			return nil
		}
	}
	const first = `from-lport  1100 (ip4.dst == {198.18.0.10, 198.19.0.50} && tcp.dst == 80 && ip4.src != 198.18.0.20/32) drop`
	eventually(t, "the acl on the VIP's switch and the external one", wantOn(first))
	if got := db.nbctl(t, "--bare", "--columns=external_ids", "find", "acl", "priority=1100"); !strings.Contains(got, "flowlb:acl=tcp/198.18.0.10:80") ||
		!strings.Contains(got, "flowlb:load_balancer=lb1") {
		t.Fatalf("the acl's external ids: %q", got)
	}

	// What OVN makes of it: the match parses, a client outside the
	// prefix is dropped on its own switch, as one from the external
	// network (its localnet port) to the floating IP; those inside
	// pass.
	trace := func(sw, inport, srcMAC, dstMAC, src, dst string) string {
		flow := fmt.Sprintf(`inport == "%s" && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == %s && ip.ttl == 64 && tcp.src == 40000 && tcp.dst == 80`,
			inport, srcMAC, dstMAC, src, dst)
		out, err := exec.Command("ovn-trace", "--db="+db.sb, "--ct=new", "--summary", sw, flow).CombinedOutput()
		if err != nil {
			t.Fatalf("ovn-trace %s: %v\n%s", flow, err, out)
		}
		if strings.Contains(string(out), "parse") || strings.Contains(string(out), "error") {
			t.Fatalf("ovn-trace %s:\n%s", flow, out)
		}
		return string(out)
	}
	// dropped: the packet is output nowhere (a drop ACL's action is no
	// action: the pipeline ends).
	dropped := func(out string) bool { return !strings.Contains(out, "output;") }
	if _, err := exec.LookPath("ovn-trace"); err == nil && db.sb != "" {
		eventually(t, "ovn-northd's acl flows", func() error {
			out, err := exec.Command("ovn-sbctl", "--db="+db.sb, "--timeout=5", "lflow-list", "ext").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ip4.src != 198.18.0.20/32") {
				return fmt.Errorf("no acl flow on ext: %v %s", err, out)
			}
			return nil
		})
		for _, tc := range []struct {
			name                     string
			sw, in, srcMAC, src, dst string
			drop                     bool
		}{
			{"a VM outside the prefix -> VIP", "net-a", "cl-out", "fa:16:3e:00:00:21", "198.18.0.21", "198.18.0.10", true},
			{"a VM inside it -> VIP", "net-a", "cl-in", "fa:16:3e:00:00:20", "198.18.0.20", "198.18.0.10", false},
			{"external, outside -> floating IP", "ext", "ln", "02:00:00:00:00:09", "198.18.9.9", "198.19.0.50", true},
			{"external, inside -> floating IP", "ext", "ln", "02:00:00:00:00:09", "198.18.0.20", "198.19.0.50", false},
		} {
			dstMAC := "fa:16:3e:00:00:10"
			if tc.sw == "ext" {
				dstMAC = "fa:16:3e:00:00:02"
			}
			if out := trace(tc.sw, tc.in, tc.srcMAC, dstMAC, tc.src, tc.dst); dropped(out) != tc.drop {
				t.Errorf("%s: dropped %v, want %v:\n%s", tc.name, dropped(out), tc.drop, out)
			}
		}
	} else {
		t.Log("ovn-northd or ovn-trace not installed: the logical flows are not traced")
	}

	// The prefixes change: the same row rewritten.
	uuid := db.nbctl(t, "--bare", "--columns=_uuid", "find", "acl", "priority=1100")
	web.AllowedCIDRs = prefixes("198.18.0.16/28", "198.18.0.20/32")
	if err := d.Apply(ctx, []flows.Service{web}, nil); err != nil {
		t.Fatal(err)
	}
	const second = `from-lport  1100 (ip4.dst == {198.18.0.10, 198.19.0.50} && tcp.dst == 80 && ip4.src != {198.18.0.16/28, 198.18.0.20/32}) drop`
	eventually(t, "the acl rewritten", wantOn(second))
	if got := db.nbctl(t, "--bare", "--columns=_uuid", "find", "acl", "priority=1100"); got != uuid {
		t.Errorf("the acl %s replaced by %s, not rewritten", uuid, got)
	}

	// Another client's changes: repaired on the drift signal.
	repairs := make(chan dataplane.Check, 16)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.Drift():
				c, err := d.Verify(ctx)
				if err != nil {
					t.Error(err)
				}
				if c.Repairs() > 0 {
					repairs <- c
				}
			}
		}
	}()
	for _, tc := range []struct {
		name   string
		change func() []string
	}{
		{"acl-del of the external switch", func() []string { return []string{"acl-del", "ext"} }},
		{"the match changed", func() []string {
			u := db.nbctl(t, "--bare", "--columns=_uuid", "find", "acl", "priority=1100")
			return []string{"set", "acl", u, `match="ip4.dst == 198.18.0.10"`}
		}},
		{"taken off the VIP's switch", func() []string {
			u := db.nbctl(t, "--bare", "--columns=_uuid", "find", "acl", "priority=1100")
			return []string{"remove", "logical_switch", "net-a", "acls", u}
		}},
	} {
		change := tc.change()
		start := time.Now()
		db.nbctl(t, change...)
		select {
		case c := <-repairs:
			if c.Repaired[dataplane.OVNACL] == 0 {
				t.Errorf("%s: repaired %v, want %s", tc.name, c.Repaired, dataplane.OVNACL)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: not repaired within 1 s", tc.name)
		}
		if err := wantOn(second)(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: repaired, as ovn-nbctl reads it, %v after the change began", tc.name, time.Since(start).Round(time.Millisecond))
	}

	// allowed_cidrs lifted: the acl goes, the row stays; then the
	// service goes.
	web.AllowedCIDRs = nil
	if err := d.Apply(ctx, []flows.Service{web}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the acl gone with allowed_cidrs", wantOn(""))
	if got := db.nbctl(t, "--bare", "--columns=_uuid", "find", "acl", "priority=1100"); got != "" {
		t.Fatalf("an acl row of flowlb's left: %q", got)
	}
	web.AllowNone = true
	if err := d.Apply(ctx, []flows.Service{web}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "admitting none", wantOn(`from-lport  1100 (ip4.dst == {198.18.0.10, 198.19.0.50} && tcp.dst == 80) drop`))
	if err := d.Apply(ctx, nil, []flows.Key{web.Key}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the acl gone with the service", wantOn(""))
	if got := db.nbctl(t, "--bare", "--columns=_uuid", "find", "acl", "priority=1100"); got != "" {
		t.Fatalf("an acl row of flowlb's left: %q", got)
	}

	// IPv6: ip6 fields, the IPv4 prefix admitting nobody of this
	// family (the floating IP, IPv4, is not guarded here).
	web6 := svc("2001:2::10", 80, "lb1", be("2001:2::1:1", 8080, 1))
	web6.AllowedCIDRs = prefixes("2001:2::20/128", "198.18.0.21/32")
	if err := d.Apply(ctx, []flows.Service{web6}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the IPv6 acl", wantOn(`from-lport  1100 (ip6.dst == 2001:2::10 && tcp.dst == 80 && ip6.src != 2001:2::20/128) drop`))
	if _, err := exec.LookPath("ovn-trace"); err == nil && db.sb != "" {
		eventually(t, "ovn-northd's IPv6 acl flows", func() error {
			out, err := exec.Command("ovn-sbctl", "--db="+db.sb, "--timeout=5", "lflow-list", "net-a").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ip6.src != 2001:2::20/128") {
				return fmt.Errorf("no IPv6 acl flow on net-a: %v %s", err, out)
			}
			return nil
		})
		for _, tc := range []struct {
			in, srcMAC, src string
			drop            bool
		}{{"cl-out", "fa:16:3e:00:00:21", "2001:2::21", true}, {"cl-in", "fa:16:3e:00:00:20", "2001:2::20", false}} {
			flow := fmt.Sprintf(`inport == "%s" && eth.src == %s && eth.dst == fa:16:3e:00:00:10 && ip6.src == %s && ip6.dst == 2001:2::10 && ip.ttl == 64 && tcp.src == 40000 && tcp.dst == 80`,
				tc.in, tc.srcMAC, tc.src)
			out, err := exec.Command("ovn-trace", "--db="+db.sb, "--ct=new", "--summary", "net-a", flow).CombinedOutput()
			if err != nil {
				t.Fatalf("ovn-trace %s: %v\n%s", flow, err, out)
			}
			if dropped(string(out)) != tc.drop {
				t.Errorf("IPv6 from %s: dropped %v, want %v:\n%s", tc.src, dropped(string(out)), tc.drop, out)
			}
		}
	}
	if err := d.Apply(ctx, nil, []flows.Key{web6.Key}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the IPv6 acl gone with the service", wantOn(""))
}
