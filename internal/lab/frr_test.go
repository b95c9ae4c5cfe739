package lab

import (
	"strings"
	"testing"
)

// TestRouterFRR: the router's FRR configuration peers with each node
// given, spreads routes over them in both families, signs the sessions
// with the password, and runs BFD only when asked.
func TestRouterFRR(t *testing.T) {
	c := RouterFRR(RouterBGP{Nodes: []int{1, 3}, Password: "pw", BFD: true})
	for _, want := range []string{"router bgp 64500\n", " neighbor nodes remote-as 64512\n", " neighbor 198.18.0.1 peer-group nodes\n",
		" neighbor 198.18.0.3 peer-group nodes\n", " neighbor nodes password pw\n", " neighbor nodes bfd profile nodes\n",
		" bgp graceful-restart\n", " neighbor nodes timers 1 3\n",
		" address-family ipv4 unicast\n  neighbor nodes activate\n  maximum-paths 16\n",
		" address-family ipv6 unicast\n  neighbor nodes activate\n  maximum-paths 16\n"} {
		if !strings.Contains(c.BGPD, want) {
			t.Errorf("bgpd.conf lacks %q:\n%s", want, c.BGPD)
		}
	}
	// No check-control-plane-failure: FRR would ignore BFD for the
	// nodes' graceful-restart sessions and keep a dead node's routes.
	if strings.Contains(c.BGPD, "198.18.0.2 ") || strings.Contains(c.BGPD, "check-control-plane-failure") ||
		!strings.Contains(c.BFDD, "transmit-interval 300\n") || !strings.Contains(c.BFDD, "detect-multiplier 3") {
		t.Errorf("bgpd.conf:\n%s\nbfdd.conf:\n%s", c.BGPD, c.BFDD)
	}
	c = RouterFRR(RouterBGP{Nodes: []int{1}, HoldTime: 9})
	if c.BFDD != "" || strings.Contains(c.BGPD, "bfd") || strings.Contains(c.BGPD, "password") || !strings.Contains(c.BGPD, " timers 3 9\n") {
		t.Errorf("without BFD nor password, hold time 9:\n%s\nbfdd: %q", c.BGPD, c.BFDD)
	}
}
