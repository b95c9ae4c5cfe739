package main

import (
	"slices"
	"strings"
	"testing"
)

func TestOVNConfig(t *testing.T) {
	tests := []struct {
		name string
		o    agentOptions
		nb   string // "" with no error: not the OVN data plane
		of   []string
		err  string
	}{
		{"nftables", agentOptions{dataplane: "nftables"}, "", nil, ""},
		{"ovn", agentOptions{dataplane: "ovn", ovnNB: "tcp:198.18.0.250:6641"}, "tcp:198.18.0.250:6641", nil, ""},
		{"ovn counting", agentOptions{dataplane: "ovn", ovnNB: "tcp:198.18.0.250:6641", ovnOpenFlow: []string{"unix:/a/br-int.mgmt", "tcp:198.18.0.7:6653"}},
			"tcp:198.18.0.250:6641", []string{"unix:/a/br-int.mgmt", "tcp:198.18.0.7:6653"}, ""},
		{"ovn without the database", agentOptions{dataplane: "ovn"}, "", nil, "needs --ovn-nb"},
		{"the database without ovn", agentOptions{dataplane: "ebpf", ovnNB: "unix:/run/ovn/ovnnb_db.sock"}, "", nil, "--ovn-nb and --ovn-openflow are for --dataplane ovn"},
		{"bridges without ovn", agentOptions{dataplane: "nftables", ovnOpenFlow: []string{"unix:/run/openvswitch/br-int.mgmt"}}, "", nil, "--ovn-openflow are for --dataplane ovn"},
		{"announcing", agentOptions{dataplane: "ovn", ovnNB: "unix:/x", announce: []string{"198.18.0.0/24"}}, "", nil, "--announce-cidrs is not for"},
		{"L2", agentOptions{dataplane: "ovn", ovnNB: "unix:/x", l2Interface: "eth0"}, "", nil, "--l2-interface is not for"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ovnConfig(tc.o)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.nb == "" && c != nil, tc.nb != "" && (c == nil || c.NB != tc.nb || !slices.Equal(c.OpenFlow, tc.of)):
				t.Fatalf("config %+v, want NB %q, OpenFlow %q", c, tc.nb, tc.of)
			}
		})
	}
}
