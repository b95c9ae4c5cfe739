package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/flowlb/flowlb/internal/shared/config"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

var update = flag.Bool("update", false, "rewrite deploy/config from the flags")

// daemons are the commands that take --config, with their example file.
var daemons = []struct {
	name, example string
	cmd           func() *cobra.Command
}{
	{"server", "server.yaml", newServerCmd},
	{"agent", "agent.yaml", newAgentCmd},
	{"kube-controller", "kube-controller.yaml", newKubeControllerCmd},
}

func flagsOf(newCmd func() *cobra.Command) func() *pflag.FlagSet {
	return func() *pflag.FlagSet { return newCmd().Flags() }
}

func exampleHeader(daemon string) string {
	return fmt.Sprintf(`flowlb %[1]s: a complete example configuration, generated from the flags
by "go generate ./cmd/flowlb" (do not edit; copy it).

flowlb %[1]s --config /etc/flowlb/%[1]s.yaml
Every key is a flag of "flowlb %[1]s --help", without its dashes, and every
flag is a key. A flag on the command line wins over the file, the file over
the default; the variables named below win over the file. Unknown keys and
bad values stop the daemon at start. "flowlb %[1]s --config FILE
--print-config" shows the effective configuration. Each key below is
commented out and shows its default.`, daemon)
}

// TestConfigExamples keeps deploy/config in step with the flags; -update
// (go generate) rewrites it.
func TestConfigExamples(t *testing.T) {
	for _, d := range daemons {
		var out bytes.Buffer
		if err := config.Example(&out, exampleHeader(d.name), d.cmd().Flags()); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "deploy", "config", d.example)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, out.Bytes()) {
			t.Errorf("%s differs from the flags of flowlb %s: run go generate ./cmd/flowlb", path, d.name)
		}
		if err := config.CheckExample(flagsOf(d.cmd), b); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// samples are values for the keys whose flag checks more than its type.
var samples = map[string]string{
	"log-level": "debug",
}

// everyKey is a config file setting every key of fs to a value other
// than its default, of the flag's type.
func everyKey(t *testing.T, fs *pflag.FlagSet) []byte {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range config.Keys(fs) {
		var v *yaml.Node
		str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
		switch allowed := config.Allowed(f); {
		case samples[f.Name] != "":
			v = str(samples[f.Name])
		case len(allowed) > 0:
			v = str(allowed[len(allowed)-1])
			if v.Value == f.DefValue {
				v = str(allowed[0])
			}
		case f.Value.Type() == "stringSlice":
			v = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{str("198.18.0.1:1"), str(f.Name + ", with a comma")}}
		case f.Value.Type() == "bool":
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(f.DefValue != "true")}
		case f.Value.Type() == "int":
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "4242"}
		case f.Value.Type() == "duration":
			v = str("1h2m3s")
		case f.Value.Type() == "string":
			v = str("x-" + f.Name + ": y")
		default:
			t.Fatalf("%s: no sample value for type %s", f.Name, f.Value.Type())
		}
		m.Content = append(m.Content, str(f.Name), v)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConfigEveryKey: every key of every daemon is read from the file,
// printed, and read back the same.
func TestConfigEveryKey(t *testing.T) {
	for _, d := range daemons {
		t.Run(d.name, func(t *testing.T) {
			file := everyKey(t, d.cmd().Flags())
			if err := config.RoundTrip(flagsOf(d.cmd), file); err != nil {
				t.Fatal(err)
			}
			fs := d.cmd().Flags()
			if err := config.Load(fs, "f.yaml", file, config.Sources{}); err != nil {
				t.Fatal(err)
			}
			for _, f := range config.Keys(fs) {
				if f.Value.String() == f.DefValue {
					t.Errorf("%s keeps its default after the file set it", f.Name)
				}
			}
		})
	}
}

// runDaemon runs a daemon command as main would, with args and a config
// file, and returns its output.
func runDaemon(t *testing.T, newCmd func() *cobra.Command, file string, args ...string) (string, error) {
	t.Helper()
	if file != "" {
		path := filepath.Join(t.TempDir(), "flowlb.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	cmd := newCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

func TestPrintConfig(t *testing.T) {
	t.Setenv("FLOWLB_KEYSTONE_PASSWORD", "env-s3cret")
	t.Setenv("FLOWLB_DATABASE", "postgres://flowlb:db-s3cret@198.18.0.5/flowlb")
	out, err := runDaemon(t, newServerCmd, "listen: 198.18.0.1:9876\nauth: keystone\nack-timeout: 3s\n", "--print-config", "--ack-timeout=4s")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# effective configuration of flowlb server\n",
		"\nlisten: 198.18.0.1:9876 # file ",
		"\nauth: keystone # file ",
		"\nack-timeout: 4s # command line\n",
		"\nkeystone-password: " + config.Redacted + " # $FLOWLB_KEYSTONE_PASSWORD\n",
		"\ndatabase: postgres://flowlb:" + config.Redacted + "@198.18.0.5/flowlb # $FLOWLB_DATABASE\n",
		"\nhttp-idle-timeout: 1m0s\n",
		"\nvip-cidr: 198.19.0.0/17\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("--print-config shows a secret:\n%s", out)
	}
}

// TestConfigRefusedAtStart: a daemon given a bad file stops before doing
// anything, naming the file, line and key.
func TestConfigRefusedAtStart(t *testing.T) {
	tests := []struct {
		cmd  func() *cobra.Command
		file string
		want string
	}{
		{newServerCmd, "listen: x:1\nlisten-adress: y:1\n", `:2: unknown key "listen-adress" (did you mean "listen"?)`},
		{newServerCmd, "auth: ldap\n", `:1: auth: "ldap" is not one of noauth, keystone`},
		{newServerCmd, "rbac: owner\n", `:1: rbac: "owner" is not one of advanced, keystone_default_roles`},
		{newServerCmd, "network: nova\n", `:1: network: "nova" is not one of neutron, neutron-api, noop`},
		{newServerCmd, "ack-timeout: 10\n", `:1: ack-timeout: time: missing unit in duration "10"`},
		{newServerCmd, "log-level: loud\n", `:1: log-level: slog: level string "loud": unknown name`},
		{newAgentCmd, "server: 198.18.0.1:9877\ntoken-file: /t\nannounce-table: main\n", `:3: announce-table: strconv.ParseInt: parsing "main": invalid syntax`},
		{newAgentCmd, "servers: [198.18.0.1:9877]\n", `:1: unknown key "servers" (did you mean "server"?)`},
		{newKubeControllerCmd, "leader-elect: no\n", `:1: leader-elect: strconv.ParseBool: parsing "no": invalid syntax`},
		{newKubeControllerCmd, "listen: x\n", `:1: unknown key "listen": not a flag of this command (see --help)`},
	}
	for _, tc := range tests {
		_, err := runDaemon(t, tc.cmd, tc.file, "--print-config")
		if err == nil || !strings.Contains(err.Error(), "flowlb.yaml"+tc.want) {
			t.Errorf("%q: %v, want an error ending %q", tc.file, err, tc.want)
		}
	}
	// The same checks on the command line.
	if _, err := runDaemon(t, newServerCmd, "", "--auth=ldap"); err == nil || !strings.Contains(err.Error(), `"ldap" is not one of noauth, keystone`) {
		t.Errorf("--auth=ldap: %v", err)
	}
}

// TestDaemonsStartWithZeroConfig: without a file each daemon's printout
// is its defaults, and --config names no key (systemd units give it).
func TestDaemonsStartWithZeroConfig(t *testing.T) {
	for _, d := range daemons {
		t.Setenv("KUBECONFIG", "")
		t.Setenv("OS_CLOUD", "")
		out, err := runDaemon(t, d.cmd, "", "--print-config")
		if err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		if strings.Contains(out, " # ") || strings.Contains(out, "\nconfig:") || strings.Contains(out, "\nprint-config:") {
			t.Errorf("%s: defaults only expected:\n%s", d.name, out)
		}
		fs := d.cmd().Flags()
		if err := config.Load(fs, "printout", []byte(out), config.Sources{}); err != nil {
			t.Errorf("%s: its printout does not load: %v", d.name, err)
		}
	}
}

// TestServerFromConfigFile starts a real server as a unit would
// (`flowlb server --config FILE`) and finds it where the file said.
func TestServerFromConfigFile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	file := fmt.Sprintf("listen: %s\nagent-listen: 127.0.0.1:0\ndata-dir: %s\nlog-level: warn\nvip-cidr: \"\"\nexternal-vip-cidr: \"\"\n", addr, dir)
	path := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newServerCmd()
	cmd.SetArgs([]string{"--config", path})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	testutil.Eventually(t, 30*time.Second, "the server answers on the file's address", func() (bool, string) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("server stopped: %v", err)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthcheck")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	if _, err := os.Stat(filepath.Join(dir, "flowlb.db")); err != nil {
		t.Errorf("the database is not in the file's data-dir: %v", err)
	}
}
