package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// TestDeployExamples: every key of the example config files shipped with
// the systemd units (deploy/systemd) is a flag of its daemon (the config
// file's keys are the flag names), and its value parses as that flag's
// type.
func TestDeployExamples(t *testing.T) {
	for file, daemon := range map[string]string{"server.yaml": "server", "agent.yaml": "agent"} {
		b, err := os.ReadFile(filepath.Join("../../deploy/systemd", file))
		if err != nil {
			t.Fatal(err)
		}
		var keys map[string]any
		if err := yaml.Unmarshal(b, &keys); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(keys) == 0 {
			t.Fatalf("%s: no keys", file)
		}
		cmd, _, err := rootCmd.Find([]string{daemon})
		if err != nil || cmd.Name() != daemon {
			t.Fatalf("no %s command: %v", daemon, err)
		}
		for k, v := range keys {
			f := cmd.Flags().Lookup(k)
			if f == nil {
				t.Errorf("%s: %s is not a flag of flowlb %s", file, k, daemon)
				continue
			}
			if err := parsesAs(f.Value.Type(), fmt.Sprint(v)); err != nil {
				t.Errorf("%s: %s: %v", file, k, err)
			}
		}
	}
}

// parsesAs sets v on a new flag of type typ, leaving the command's own
// flags untouched.
func parsesAs(typ, v string) error {
	fs := pflag.NewFlagSet("example", pflag.ContinueOnError)
	switch typ {
	case "string":
		fs.String("x", "", "")
	case "stringSlice":
		fs.StringSlice("x", nil, "")
	case "duration":
		fs.Duration("x", 0, "")
	case "int":
		fs.Int("x", 0, "")
	case "bool":
		fs.Bool("x", false, "")
	default:
		return fmt.Errorf("flag type %s: teach parsesAs", typ)
	}
	return fs.Set("x", v)
}
