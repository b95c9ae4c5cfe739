// Package install tests what an operator installs: the systemd units and
// their sysusers.d and tmpfiles.d snippets (deploy/systemd), and the
// container image `make image` builds.
package install

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

const unitDir = "../../deploy/systemd"

// systemdTool finds a tool of Debian's systemd package, which
// hack/install-deps.sh --test installs.
func systemdTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is missing (Debian's systemd package; run hack/install-deps.sh --test): %v", name, err)
	}
	return p
}

// unitsForVerify copies the units into a temporary directory with their
// ExecStart pointing at an executable that exists here (the test binary):
// verify refuses a missing /usr/bin/flowlb, and everything else is left
// as shipped.
func unitsForVerify(t *testing.T) map[string]string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := map[string]string{}
	for _, u := range []string{"flowlb-server.service", "flowlb-agent.service"} {
		b, err := os.ReadFile(filepath.Join(unitDir, u))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("ExecStart=/usr/bin/flowlb ")) {
			t.Fatalf("%s: no ExecStart=/usr/bin/flowlb", u)
		}
		b = bytes.ReplaceAll(b, []byte("ExecStart=/usr/bin/flowlb "), []byte("ExecStart="+exe+" "))
		p := filepath.Join(dir, u)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[u] = p
	}
	return out
}

// TestUnitsVerify: systemd-analyze verify exits 0 even on unknown keys
// and bad values (it only warns), so any line about our units fails the
// test. Lines about the machine's other units (say, a keystone.service
// Debian installed) are not ours to judge.
func TestUnitsVerify(t *testing.T) {
	analyze := systemdTool(t, "systemd-analyze")
	for name, p := range unitsForVerify(t) {
		out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput()
		if ours := linesAbout(out, "flowlb"); err != nil || len(ours) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}

// linesAbout keeps the non-empty lines of out that mention word.
func linesAbout(out []byte, word string) []string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, word) {
			keep = append(keep, l)
		}
	}
	return keep
}

// TestUnitsExposure holds the units to the sandboxing they have now:
// systemd-analyze security's exposure score (0 = fully confined, 10 =
// not at all; --threshold counts tenths) fails past the threshold, so a
// dropped hardening option shows here.
func TestUnitsExposure(t *testing.T) {
	analyze := systemdTool(t, "systemd-analyze")
	units := unitsForVerify(t)
	for _, c := range []struct {
		unit      string
		threshold string
	}{
		// Measured 1.2 (server) and 2.1 (agent: root, NET_ADMIN and
		// NET_RAW, the host's network) with systemd 252 on 2026-11-24
		// (1.4 and 2.3 earlier).
		{"flowlb-server.service", "15"},
		{"flowlb-agent.service", "25"},
	} {
		out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold="+c.threshold, "--no-pager", units[c.unit]).CombinedOutput()
		if err != nil {
			t.Errorf("%s: exposure above %s tenths: %v\n%s", c.unit, c.threshold, err, out)
		}
	}
}

// TestUnitCapabilities: the agent keeps exactly the two capabilities it
// uses, the server none (the words that matter, checked as written so
// that a review of the unit and this test agree).
func TestUnitCapabilities(t *testing.T) {
	for unit, want := range map[string][]string{
		"flowlb-server.service": {"User=flowlb", "CapabilityBoundingSet=", "AmbientCapabilities=", "StateDirectory=flowlb",
			"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "ExecStart=/usr/bin/flowlb server --config /etc/flowlb/server.yaml"},
		"flowlb-agent.service": {"CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW", "AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW",
			"StateDirectory=flowlb-agent", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
			"ExecStart=/usr/bin/flowlb agent --config /etc/flowlb/agent.yaml"},
	} {
		b, err := os.ReadFile(filepath.Join(unitDir, unit))
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			lines[strings.TrimSpace(l)] = true
		}
		for _, w := range want {
			if !lines[w] {
				t.Errorf("%s: no line %q", unit, w)
			}
		}
		if unit == "flowlb-server.service" && lines["User=root"] {
			t.Errorf("%s runs as root", unit)
		}
	}
}

// TestSysusersTmpfiles applies the snippets to an empty root directory
// as systemd-sysusers and systemd-tmpfiles would at install: the user
// exists, and /etc/flowlb is root's, readable by its group only.
func TestSysusersTmpfiles(t *testing.T) {
	testutil.RequireRoot(t) // tmpfiles changes the directory's owner
	sysusers, tmpfiles := systemdTool(t, "systemd-sysusers"), systemdTool(t, "systemd-tmpfiles")
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// On standard input: with --root, a path given is taken inside root.
	run := func(tool string, args ...string) {
		t.Helper()
		in, err := os.Open(filepath.Join(unitDir, args[len(args)-1]))
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		cmd := exec.Command(tool, append(args[:len(args)-1], "-")...)
		cmd.Stdin = in
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", tool, err, out)
		}
	}
	run(sysusers, "--root="+root, "flowlb.sysusers")
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	var gid string
	for _, l := range strings.Split(string(passwd), "\n") {
		if f := strings.Split(l, ":"); len(f) == 7 && f[0] == "flowlb" {
			if f[5] != "/var/lib/flowlb" || !strings.HasSuffix(f[6], "nologin") {
				t.Errorf("flowlb's passwd entry: %q", l)
			}
			gid = f[3]
		}
	}
	if gid == "" {
		t.Fatalf("no flowlb user in\n%s", passwd)
	}
	run(tmpfiles, "--root="+root, "--create", "flowlb.tmpfiles")
	st, err := os.Stat(filepath.Join(root, "etc/flowlb"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode(); got != os.ModeDir|0o750 {
		t.Errorf("/etc/flowlb mode %v, want drwxr-x---", got)
	}
	if own := ownerOf(st); own != "0:"+gid {
		t.Errorf("/etc/flowlb owned by %s, want 0:%s (root, group flowlb)", own, gid)
	}
}

func ownerOf(st os.FileInfo) string {
	s := st.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d", s.Uid, s.Gid)
}
