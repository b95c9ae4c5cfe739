package lab

import (
	"reflect"
	"testing"
)

// TestExecPodArgs: the command line ExecPodArgv makes parses back; bad
// mounts are refused.
func TestExecPodArgs(t *testing.T) {
	mounts := []ExecPodMount{{Source: "/lab/v/a", Target: "/etc/flowlb/agent", ReadOnly: true}, {Source: "/lab/n1/x", Target: "/var/lib/flowlb"}}
	argv := []string{"/bin/flowlb", "agent", "--node=n1"}
	full := ExecPodArgv("/bin/flowlb", mounts, argv)
	if full[1] != "lab" || full[2] != "exec-pod" {
		t.Fatalf("argv %q", full)
	}
	m, a, err := parseExecPod(full[3:])
	if err != nil || !reflect.DeepEqual(m, mounts) || !reflect.DeepEqual(a, argv) {
		t.Errorf("parsed %v %q %v", m, a, err)
	}
	for _, bad := range [][]string{
		{"--mount", "a:relative", "--", "x"}, {"--mount", "a:/b:rw", "--", "x"}, {"--mount", ":/b", "--", "x"},
		{"--"}, {"--mount", "a:/b"}, {"x"},
	} {
		if _, _, err := parseExecPod(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
