package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FRR (Debian's frr package) runs in a lab host as the lab's processes:
// zebra, bfdd and bgpd with configurations, sockets and pid files of
// their own under the lab's state directory (FRRDir), never the host's
// /etc/frr or /run/frr, and as the package's user frr. docs/lab.md.

// The FRR daemons' process names in a host.
const (
	ProcZebra = "zebra"
	ProcBFDD  = "bfdd"
	ProcBGPD  = "bgpd"
)

// The lab's autonomous systems: the router's, and the one every node's
// speaker shares (one AS for the nodes: the router's paths to a VIP are
// equal and spread with ECMP).
const (
	RouterASN = 64500
	NodeASN   = 64512
)

// FRRDaemons is where Debian installs the daemons.
var FRRDaemons = "/usr/lib/frr"

// FRRConf is a configuration per daemon ("" leaves bfdd out).
type FRRConf struct {
	Zebra, BFDD, BGPD string
}

// FRRDir is the state directory of host's FRR.
func (l *Lab) FRRDir(host string) string { return filepath.Join(l.dir, "frr", host) }

// StartFRR writes c into host's FRR directory and starts zebra, then
// bfdd (if configured) and bgpd, once zebra's socket is there.
func (l *Lab) StartFRR(host string, c FRRConf) error {
	for _, d := range []string{ProcZebra, ProcBGPD} {
		if _, err := os.Stat(filepath.Join(FRRDaemons, d)); err != nil {
			return fmt.Errorf("FRR's %s: %w (apt-get install frr)", d, err)
		}
	}
	dir := l.FRRDir(host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{ProcZebra: c.Zebra, ProcBFDD: c.BFDD, ProcBGPD: c.BGPD}
	for d, text := range files {
		if text == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, d+".conf"), []byte(text), 0o644); err != nil {
			return err
		}
	}
	// The daemons drop to the package's user, which must own what they
	// write: sockets, pid files and vtysh's configuration saves.
	if err := chownFRR(dir); err != nil {
		return err
	}
	h, err := l.Host(host)
	if err != nil {
		return err
	}
	zserv := filepath.Join(dir, "zserv.api")
	argv := func(d string, extra ...string) []string {
		return append([]string{filepath.Join(FRRDaemons, d), "--vty_socket", dir, "-z", zserv, "-P", "0", "--log", "stdout",
			"-f", filepath.Join(dir, d+".conf"), "-i", filepath.Join(dir, d+".pid")}, extra...)
	}
	if _, err := h.Start(ProcZebra, argv(ProcZebra)); err != nil {
		return err
	}
	if err := waitFile(zserv, 10*time.Second); err != nil {
		return fmt.Errorf("zebra in %s: %w (log %s)", host, err, l.LogPath(host, ProcZebra))
	}
	if c.BFDD != "" {
		if _, err := h.Start(ProcBFDD, argv(ProcBFDD, "--bfdctl", filepath.Join(dir, "bfdd.sock"))); err != nil {
			return err
		}
	}
	if _, err := h.Start(ProcBGPD, argv(ProcBGPD)); err != nil {
		return err
	}
	return waitFile(filepath.Join(dir, "bgpd.vty"), 10*time.Second)
}

func chownFRR(dir string) error {
	u, err := user.Lookup("frr")
	if err != nil {
		return fmt.Errorf("FRR's user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func waitFile(path string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s after %s", path, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Vtysh runs FRR's vtysh commands against host's FRR, from the host's
// namespace, and returns what it prints.
func (l *Lab) Vtysh(ctx context.Context, host string, cmds ...string) (string, error) {
	h, err := l.Host(host)
	if err != nil {
		return "", err
	}
	dir := l.FRRDir(host)
	if _, err := os.Stat(filepath.Join(dir, "bgpd.vty")); err != nil {
		return "", fmt.Errorf("no FRR in %s: %w", host, err)
	}
	if _, err := exec.LookPath("vtysh"); err != nil {
		return "", err
	}
	argv := []string{"vtysh", "--vty_socket", dir, "--config_dir", dir}
	for _, c := range cmds {
		argv = append(argv, "-c", c)
	}
	var out, errb bytes.Buffer
	if err := h.Run(ctx, nil, &out, &errb, argv...); err != nil {
		return out.String(), fmt.Errorf("vtysh %s: %w: %s", strings.Join(cmds, "; "), err, errb.String())
	}
	return out.String(), nil
}

// RouterBGP is the router's side of the nodes' BGP sessions.
type RouterBGP struct {
	// Nodes peer with the router over their IPv4 fabric address; each
	// session carries both families (IPv6 routes with the node's IPv6
	// next hop).
	Nodes []int
	// Password, if set, signs the sessions (TCP MD5).
	Password string
	// HoldTime in seconds (keepalive a third of it); 0: 3.
	HoldTime int
	// BFD runs bfdd with 300 ms intervals, multiplier 3: a node whose
	// BFD goes down is taken for dead and its routes withdrawn at once.
	// A restarting agent says AdminDown first, which is no failure (RFC
	// 5880), so its routes stay for graceful restart. No
	// check-control-plane-failure: with it FRR ignores BFD for every
	// graceful-restart peer whose BFD shares its fate (C bit clear), and
	// a dead node's routes would stay until the hold time.
	BFD bool
}

// RouterFRR is the router's FRR configuration for o: AS RouterASN, one
// eBGP session per node to AS NodeASN, routes to a VIP spread over all
// the nodes that announce it (ECMP, maximum-paths), graceful restart
// (the router keeps a restarting node's routes until its End-of-RIB),
// nothing required of the nodes' routes by policy.
func RouterFRR(o RouterBGP) FRRConf {
	hold := o.HoldTime
	if hold == 0 {
		hold = 3
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hostname router\nlog stdout informational\n!\nrouter bgp %d\n", RouterASN)
	fmt.Fprintf(&b, " bgp router-id %s\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n", RouterFabricAddr)
	b.WriteString(" bgp graceful-restart\n bgp log-neighbor-changes\n")
	fmt.Fprintf(&b, " neighbor nodes peer-group\n neighbor nodes remote-as %d\n neighbor nodes timers %d %d\n", NodeASN, max(hold/3, 1), hold)
	if o.Password != "" {
		fmt.Fprintf(&b, " neighbor nodes password %s\n", o.Password)
	}
	if o.BFD {
		b.WriteString(" neighbor nodes bfd\n neighbor nodes bfd profile nodes\n")
	}
	for _, n := range o.Nodes {
		fmt.Fprintf(&b, " neighbor %s peer-group nodes\n", NodeAddr(n))
	}
	for _, af := range []string{"ipv4", "ipv6"} {
		fmt.Fprintf(&b, " address-family %s unicast\n  neighbor nodes activate\n  maximum-paths 16\n exit-address-family\n", af)
	}
	b.WriteString("exit\n")
	c := FRRConf{Zebra: "hostname router\nlog stdout informational\n", BGPD: b.String()}
	if o.BFD {
		c.BFDD = "hostname router\nlog stdout informational\n!\nbfd\n profile nodes\n  receive-interval 300\n  transmit-interval 300\n  detect-multiplier 3\n exit\nexit\n"
	}
	return c
}

// StartRouterBGP starts FRR in the router with RouterFRR(o), and takes
// away the router's static routes to the external VIP ranges
// (SetNextHops): the router reaches a VIP only through what the nodes
// announce.
func (l *Lab) StartRouterBGP(o RouterBGP) error {
	if err := l.SetNextHops(); err != nil {
		return err
	}
	return l.StartFRR(HostRouter, RouterFRR(o))
}

// RouterRunsBGP reports whether FRR's bgpd runs in the router.
func (l *Lab) RouterRunsBGP() bool {
	h, err := l.Host(HostRouter)
	return err == nil && h.Running(ProcBGPD)
}
