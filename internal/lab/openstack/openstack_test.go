package openstack_test

import (
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
	"github.com/flowlb/flowlb/internal/lab/openstack"
	"github.com/flowlb/flowlb/internal/shared/testutil"
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
		ln := openstack.Answer(t, b.NS, ":7000", "b")
		defer ln.Close()
		testutil.Eventually(t, 30*time.Second, "a -> b over Geneve", func() (bool, string) {
			got, err := openstack.Ask(func(ctx context.Context, n, addr string) (net.Conn, error) {
				return openstack.DialIn(ctx, a.NS, n, addr)
			},
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
			got, err := openstack.Ask(c.Dial, net.JoinHostPort(fip.FloatingIP.Address, "7000"))
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
