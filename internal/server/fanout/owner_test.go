package fanout

import (
	"fmt"
	"testing"
)

func TestOwner(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	tests := []struct {
		name, member, node string
		nodes              []string
		want               string
	}{
		{"member's own node", "m1", "n3", nodes, "n3"},
		{"own node not connected", "m1", "n9", nil, ""},
		{"single agent", "m1", "", []string{"n2"}, "n2"},
		{"no agents", "m1", "", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := owner(tc.member, tc.node, tc.nodes); got != tc.want {
				t.Errorf("owner = %q, want %q", got, tc.want)
			}
		})
	}
}

// Rendezvous hashing: removing one agent moves only its members, and the
// members of unknown nodes spread over every agent.
func TestOwnerStableAndSpread(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4"}
	before := map[string]string{}
	count := map[string]int{}
	for i := range 4000 {
		m := fmt.Sprintf("member-%d", i)
		before[m] = owner(m, "", nodes)
		count[before[m]]++
	}
	for _, n := range nodes {
		if count[n] < 800 || count[n] > 1200 {
			t.Errorf("%s probes %d of 4000 members, want about 1000", n, count[n])
		}
	}
	left := []string{"n1", "n2", "n4"}
	for m, was := range before {
		now := owner(m, "", left)
		if was != "n3" && now != was {
			t.Fatalf("%s moved from %s to %s although %s stayed", m, was, now, was)
		}
		if now == "n3" {
			t.Fatalf("%s still on the departed agent", m)
		}
	}
}
