package openstack_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/labtest"
	"github.com/flowlb/flowlb/internal/testutil"
	"github.com/flowlb/flowlb/internal/testutil/openstack"
)

// TestCloud: two VMs on different chassis talk over Geneve, a floating
// IP reaches one from the external namespace, and the test bed leaves
// nothing behind: no namespace, process or file of the lab.
func TestCloud(t *testing.T) {
	openstack.Require(t)
	var name, dir string
	t.Run("up", func(t *testing.T) {
		l := labtest.New(t, 2, 0)
		name, dir = l.Name(), l.Dir()
		c := openstack.Start(t, l)
		a := c.VM("a", 1, openstack.VMOptions{})
		b := c.VM("b", 2, openstack.VMOptions{})
		ln := listen(t, b.NS, ":7000", "b")
		defer ln.Close()
		testutil.Eventually(t, 30*time.Second, "a -> b over Geneve", func() (bool, string) {
			got, err := ask(func(ctx context.Context, n, addr string) (net.Conn, error) { return dialIn(ctx, a.NS, addr) },
				net.JoinHostPort(b.Addr.String(), "7000"))
			return got == "b", fmt.Sprint(got, err)
		})
		var fip struct {
			FloatingIP struct {
				ID      string `json:"id"`
				Address string `json:"floating_ip_address"`
			} `json:"floatingip"`
		}
		if err := c.Call("POST", "/floatingips", map[string]any{"floatingip": map[string]any{
			"floating_network_id": c.External.NetworkID, "port_id": b.PortID}}, &fip); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 60*time.Second, "external -> floating IP of b", func() (bool, string) {
			got, err := ask(c.Dial, net.JoinHostPort(fip.FloatingIP.Address, "7000"))
			return got == "b", fmt.Sprint(got, err)
		})
	})
	if name == "" {
		return
	}
	var left []string
	if nss, _ := filepath.Glob(filepath.Join(lab.NetnsDir, lab.Prefix(name)+"*")); len(nss) > 0 {
		left = append(left, nss...)
	}
	if _, err := os.Stat(dir); err == nil {
		left = append(left, dir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), dir+"/") {
			left = append(left, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := lab.InNS(ns, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// listen answers every connection with name, from namespace ns.
func listen(t *testing.T, ns, addr, name string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := lab.InNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, name)
			c.Close()
		}
	}()
	return ln
}

func ask(dial func(context.Context, string, string) (net.Conn, error), addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}
