package config

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testFlags is a daemon's flag set in miniature: one flag of every kind.
func testFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("listen", "127.0.0.1:9876", "address to serve on")
	fs.Int("workers", 8, "workers")
	fs.Bool("leader-elect", true, "hold the lease")
	fs.Duration("token-cache-time", 5*time.Minute, "cache time")
	fs.StringSlice("server", []string{"127.0.0.1:9877"}, "servers")
	fs.String("auth", "noauth", "auth mode")
	fs.String("keystone-password", "", "password")
	fs.String("database", "", "DSN")
	fs.String("kubeconfig", "", "kubeconfig")
	fs.String("node", "this-host", "node name")
	fs.String("config", "", "the file")
	fs.Bool("print-config", false, "print")
	OneOf(fs, "auth", "noauth", "keystone")
	Secret(fs, "keystone-password", "FLOWLB_KEYSTONE_PASSWORD")
	SecretDSN(fs, "database", "FLOWLB_DATABASE")
	Env(fs, "kubeconfig", "KUBECONFIG")
	HostDefault(fs, "node", "node-1", "the host name")
	return fs
}

// values renders every key's value as the command line would take it.
func values(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	for _, f := range Keys(fs) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			m[f.Name] = "[" + strings.Join(sv.GetSlice(), "|") + "]"
			continue
		}
		m[f.Name] = f.Value.String()
	}
	return m
}

func TestLoad(t *testing.T) {
	defaults := values(testFlags())
	tests := []struct {
		name, file string
		want       map[string]string // keys that differ from the defaults
		err        string            // regexp of the error
	}{
		{name: "empty", file: ""},
		{name: "comments only", file: "# listen: x\n"},
		{name: "null document", file: "~\n"},
		{
			name: "every kind",
			file: "listen: 198.18.0.1:80\nworkers: 3\nleader-elect: false\ntoken-cache-time: 90s\nserver: [a:1, b:2]\nauth: keystone\nkeystone-password: s3cret\ndatabase: postgres://u:p@h/db\n",
			want: map[string]string{"listen": "198.18.0.1:80", "workers": "3", "leader-elect": "false", "token-cache-time": "1m30s",
				"server": "[a:1|b:2]", "auth": "keystone", "keystone-password": "s3cret", "database": "postgres://u:p@h/db"},
		},
		{name: "block list", file: "server:\n  - a:1\n  - b:2\n", want: map[string]string{"server": "[a:1|b:2]"}},
		{name: "list as one scalar", file: "server: a:1,b:2\n", want: map[string]string{"server": "[a:1|b:2]"}},
		{name: "empty list", file: "server: []\n", want: map[string]string{"server": "[]"}},
		{name: "empty string", file: "listen: \"\"\n", want: map[string]string{"listen": ""}},
		{name: "number as string", file: "listen: 9876\n", want: map[string]string{"listen": "9876"}},
		{name: "anchor and alias", file: "listen: &a x:1\nkubeconfig: *a\n", want: map[string]string{"listen": "x:1", "kubeconfig": "x:1"}},

		{name: "a printed secret", file: "keystone-password: REDACTED\n", err: `^f\.yaml:1: keystone-password: "REDACTED" is --print-config's placeholder for a secret, not the secret$`},
		{name: "a printed DSN", file: "database: postgres://u:REDACTED@h/db\n", err: `^f\.yaml:1: database: .* is --print-config's placeholder`},
		{name: "REDACTED is no secret here", file: "listen: REDACTED\n", want: map[string]string{"listen": "REDACTED"}},
		{name: "typo", file: "workers: 2\nlisten-address: x\n", err: `^f\.yaml:2: unknown key "listen-address" \(did you mean "listen"\?\)$`},
		{name: "dashes", file: "--workers: 2\n", err: `^f\.yaml:1: unknown key "--workers" \(did you mean "workers"\?\)$`},
		{name: "unrelated key", file: "frobnicate: 2\n", err: `^f\.yaml:1: unknown key "frobnicate": not a flag of this command \(see --help\)$`},
		{name: "config is no key", file: "config: other.yaml\n", err: `^f\.yaml:1: unknown key "config"`},
		{name: "print-config is no key", file: "print-config: true\n", err: `^f\.yaml:1: unknown key "print-config"`},
		{name: "help is no key", file: "help: true\n", err: `^f\.yaml:1: unknown key "help"`},
		{name: "bad int", file: "workers: many\n", err: `^f\.yaml:1: workers: .*invalid syntax`},
		{name: "bad duration", file: "\ntoken-cache-time: 5 minutes\n", err: `^f\.yaml:2: token-cache-time: .*unknown unit`},
		{name: "bad bool", file: "leader-elect: yes\n", err: `^f\.yaml:1: leader-elect: .*invalid syntax`},
		{name: "not one of", file: "auth: ldap\n", err: `^f\.yaml:1: auth: "ldap" is not one of noauth, keystone$`},
		{name: "list for a value", file: "listen: [a, b]\n", err: `^f\.yaml:1: listen: one value expected, not a list$`},
		{name: "mapping for a value", file: "listen:\n  host: a\n", err: `^f\.yaml:1: listen: a plain value expected$`},
		{name: "no value", file: "listen:\n", err: `^f\.yaml:1: listen: no value \(write "" for an empty one\)$`},
		{name: "null in a list", file: "server: [a, ~]\n", err: `^f\.yaml:1: server: line 1: a list of plain values expected$`},
		{name: "twice", file: "workers: 1\nworkers: 2\n", err: `^f\.yaml:2: key "workers" given twice$`},
		{name: "not a mapping", file: "- listen\n", err: `^f\.yaml:1: a mapping of keys to values expected$`},
		{name: "two documents", file: "workers: 1\n---\nworkers: 2\n", err: `^f\.yaml: one YAML document expected$`},
		{name: "syntax", file: "workers: [1\n", err: `^f\.yaml: yaml: `},
		{name: "tab", file: "workers:\t\t- 1\n\t", err: `^f\.yaml: yaml: `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := testFlags()
			err := Load(fs, "f.yaml", []byte(tc.file), Sources{})
			if tc.err != "" {
				if err == nil || !regexp.MustCompile(tc.err).MatchString(err.Error()) {
					t.Fatalf("error %v, want one matching %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := values(fs)
			for k, d := range defaults {
				want, ok := tc.want[k]
				if !ok {
					want = d
				}
				if got[k] != want {
					t.Errorf("%s = %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	file := "listen: file:1\nworkers: 3\nkeystone-password: from-file\ndatabase: file.db\nkubeconfig: file.kubeconfig\nserver: [file:1]\n"
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want map[string]string
		src  map[string]string // where Print says each came from
	}{
		{
			name: "file over defaults",
			want: map[string]string{"listen": "file:1", "workers": "3", "keystone-password": "from-file", "database": "file.db", "server": "[file:1]", "auth": "noauth"},
			src:  map[string]string{"listen": "file f.yaml", "keystone-password": "file f.yaml", "auth": ""},
		},
		{
			name: "flags over the file",
			args: []string{"--listen=cli:1", "--server=cli:1", "--server=cli:2", "--keystone-password=cli"},
			want: map[string]string{"listen": "cli:1", "workers": "3", "server": "[cli:1|cli:2]", "keystone-password": "cli"},
			src:  map[string]string{"listen": "command line", "workers": "file f.yaml", "server": "command line"},
		},
		{
			name: "environment over the file",
			env:  map[string]string{"FLOWLB_KEYSTONE_PASSWORD": "from-env", "FLOWLB_DATABASE": "postgres://u:p@h/db", "KUBECONFIG": "/env/kubeconfig", "FLOWLB_LISTEN": "ignored"},
			want: map[string]string{"listen": "file:1", "keystone-password": "from-env", "database": "postgres://u:p@h/db", "kubeconfig": "/env/kubeconfig"},
			src:  map[string]string{"keystone-password": "$FLOWLB_KEYSTONE_PASSWORD", "database": "$FLOWLB_DATABASE", "listen": "file f.yaml"},
		},
		{
			name: "an empty variable is unset",
			env:  map[string]string{"FLOWLB_KEYSTONE_PASSWORD": ""},
			want: map[string]string{"keystone-password": "from-file"},
		},
		{
			name: "flags over the environment",
			args: []string{"--keystone-password=cli"},
			env:  map[string]string{"FLOWLB_KEYSTONE_PASSWORD": "from-env"},
			want: map[string]string{"keystone-password": "cli"},
			src:  map[string]string{"keystone-password": "command line"},
		},
	}
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := testFlags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			src, err := Apply(fs, path, lookup)
			if err != nil {
				t.Fatal(err)
			}
			got := values(fs)
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("%s = %q, want %q", k, got[k], want)
				}
			}
			var out bytes.Buffer
			if err := write(&out, "t", fs, src, false); err != nil {
				t.Fatal(err)
			}
			for k, from := range tc.src {
				line := regexp.MustCompile(`(?m)^` + k + `: .*$`).FindString(out.String())
				want := strings.ReplaceAll(from, "f.yaml", path)
				if from == "" && strings.Contains(line, "#") || from != "" && !strings.HasSuffix(line, " # "+want) {
					t.Errorf("printed %q, want it from %q", line, from)
				}
			}
		})
	}
}

// A list set by the file and then by the environment is replaced, not
// appended to.
func TestEnvReplacesList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte("server: a:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := testFlags()
	Env(fs, "server", "FLOWLB_TEST_SERVERS")
	if _, err := Apply(fs, path, func(string) (string, bool) { return "b:1,c:1", true }); err != nil {
		t.Fatal(err)
	}
	if got := values(fs)["server"]; got != "[b:1|c:1]" {
		t.Errorf("server = %s, want [b:1|c:1]", got)
	}
}

func TestApplyErrors(t *testing.T) {
	fs := testFlags()
	if _, err := Apply(fs, filepath.Join(t.TempDir(), "missing.yaml"), os.LookupEnv); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v, want an error naming it", err)
	}
	fs = testFlags()
	OneOf(fs, "database", "a.db")
	_, err := Apply(fs, "", func(string) (string, bool) { return "b.db", true })
	if want := `$FLOWLB_DATABASE (database): "b.db" is not one of a.db`; err == nil || err.Error() != want {
		t.Errorf("bad variable: %v, want %s", err, want)
	}
}

func TestPrintRedacts(t *testing.T) {
	tests := []struct{ key, value, printed string }{
		{"keystone-password", "s3cret", Redacted},
		{"keystone-password", "", `""`},
		{"database", "postgres://flowlb:s3cret@db.example:5432/flowlb?sslmode=verify-full", "postgres://flowlb:" + Redacted + "@db.example:5432/flowlb?sslmode=verify-full"},
		{"database", "postgres://db.example/flowlb?password=s3cret", Redacted},
		{"database", "host=db.example password=s3cret", Redacted},
		{"database", "postgres://db.example/flowlb", "postgres://db.example/flowlb"},
		{"database", "/var/lib/flowlb/flowlb.db", "/var/lib/flowlb/flowlb.db"},
		{"listen", "s3cret:1", "s3cret:1"}, // not a secret
	}
	for _, tc := range tests {
		fs := testFlags()
		if err := fs.Set(tc.key, tc.value); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := Print(&out, "t", fs, nil); err != nil {
			t.Fatal(err)
		}
		want := tc.key + ": " + tc.printed + " # command line"
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("%s=%q printed\n%s\nwant the line %q", tc.key, tc.value, out.String(), want)
		}
		if tc.printed != tc.value && strings.Contains(out.String(), "s3cret") {
			t.Errorf("%s=%q: the secret is printed", tc.key, tc.value)
		}
	}
}

// RoundTrip is the check the daemons' tests run on their real flag sets;
// here it runs on testFlags with every key set.
func TestRoundTrip(t *testing.T) {
	file := "listen: \"true\"\nworkers: 3\nleader-elect: false\ntoken-cache-time: 90s\nserver: [a:1, \"b: 2\", \"\"]\nauth: keystone\nkeystone-password: \"0x10\"\ndatabase: postgres://u:p@h/db\nkubeconfig: \"#k\"\nnode: \"null\"\n"
	if err := RoundTrip(testFlags, []byte(file)); err != nil {
		t.Fatal(err)
	}
	fs := testFlags()
	if err := Load(fs, "f.yaml", []byte(file), Sources{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range Keys(fs) {
		if f.Value.String() == f.DefValue {
			t.Errorf("%s keeps its default: the test file should set every key", f.Name)
		}
	}
}

func TestExample(t *testing.T) {
	var out bytes.Buffer
	if err := Example(&out, "flowlb test\n\nline two", testFlags()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# flowlb test\n#\n# line two\n",
		"\n# address to serve on\n#listen: 127.0.0.1:9876\n",
		"\n# servers\n#server: ['127.0.0.1:9877']\n",
		"\n# hold the lease\n#leader-elect: true\n",
		"\n# cache time\n#token-cache-time: 5m0s\n",
		"\n# node name (default: the host name)\n#node: node-1\n",
		"\n# password; a secret: better in $FLOWLB_KEYSTONE_PASSWORD than in this file\n#keystone-password: \"\"\n",
		"\n# kubeconfig; $KUBECONFIG, when set, wins over this file\n#kubeconfig: \"\"\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("example lacks %q:\n%s", want, out.String())
		}
	}
	for _, absent := range []string{"\n#config:", "\n#print-config:", "this-host"} {
		if strings.Contains(out.String(), absent) {
			t.Errorf("example holds %q:\n%s", absent, out.String())
		}
	}
	if err := CheckExample(testFlags, out.Bytes()); err != nil {
		t.Fatal(err)
	}
}

func TestCheckExampleCatchesDrift(t *testing.T) {
	var out bytes.Buffer
	if err := Example(&out, "t", testFlags()); err != nil {
		t.Fatal(err)
	}
	stale := strings.Replace(out.String(), "#workers: 8\n", "#worker: 8\n", 1)
	if err := CheckExample(testFlags, []byte(stale)); err == nil || !strings.Contains(err.Error(), `unknown key "worker"`) {
		t.Errorf("a renamed key: %v", err)
	}
	missing := strings.Replace(out.String(), "#workers: 8\n", "", 1)
	if err := CheckExample(testFlags, []byte(missing)); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Errorf("a missing key: %v", err)
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"listen", "listen", 0}, {"listne", "listen", 2}, {"kitten", "sitting", 3}, {"workers", "--workers", 2}} {
		if got := distance(tc.a, tc.b); got != tc.d {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}
