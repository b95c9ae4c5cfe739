package lab

import (
	"strings"
	"testing"
)

func TestAgentServers(t *testing.T) {
	cases := []struct {
		ks   []int
		want string
	}{
		{nil, ""},
		{[]int{1}, "198.18.0.241:9877"},
		{[]int{1, 2, 3}, "198.18.0.241:9877,198.18.0.242:9877,198.18.0.243:9877"},
		{[]int{2, 9}, "198.18.0.242:9877,198.18.0.249:9877"},
	}
	for _, c := range cases {
		if got := AgentServers(c.ks); got != c.want {
			t.Errorf("AgentServers(%v) = %q, want %q", c.ks, got, c.want)
		}
	}
}

func TestReplicaArgv(t *testing.T) {
	got := strings.Join(ReplicaArgv([]string{"/bin/flowlb"}, 2, ReplicaSecrets{"/run/tok", "/run/ca.crt", "/run/ca.key", APITLS{"/run/api-ca.crt", "/run/api.crt", "/run/api.key"}}, "/run/data-s2", "--ack-timeout", "3s"), " ")
	want := "/bin/flowlb server --listen 198.18.0.242:9876 --agent-listen 198.18.0.242:9877" +
		" --database " + PostgresDSN + " --data-dir /run/data-s2 --agent-token-file /run/tok" +
		" --agent-ca-cert /run/ca.crt --agent-ca-key /run/ca.key --tls-cert /run/api.crt --tls-key /run/api.key --replica-id s2 --ack-timeout 3s"
	if got != want {
		t.Errorf("ReplicaArgv:\n got %s\nwant %s", got, want)
	}
}
