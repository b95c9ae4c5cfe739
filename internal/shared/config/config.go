// Package config lets a daemon's YAML file and environment set its
// command-line flags. The keys of the file are exactly the daemon's long
// flag names, so every flag is configurable and the two cannot drift;
// each value goes through the flag's own parser. Precedence: command
// line > environment (secrets and a few conventional variables) > file >
// the flag's default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Annotations on a pflag.Flag; they travel with the flag, so the file,
// the printout and the examples all see the same declaration.
const (
	annEnv         = "flowlb.io/config-env"
	annSecret      = "flowlb.io/config-secret"
	annHostDefault = "flowlb.io/config-host-default"
)

// Flags that are not keys: they choose the file and the mode.
var reserved = map[string]bool{"help": true, "config": true, "print-config": true}

// Env makes $env set flag name when the command line does not; it wins
// over the file.
func Env(fs *pflag.FlagSet, name, env string) {
	must(fs.SetAnnotation(name, annEnv, []string{env}))
}

// Secret marks flag name as a secret: set it from $env (preferred) or the
// file, never shown by Print.
func Secret(fs *pflag.FlagSet, name, env string) {
	Env(fs, name, env)
	must(fs.SetAnnotation(name, annSecret, []string{"all"}))
}

// SecretDSN is Secret for a database DSN: only the password of a URL is
// hidden, the rest (a SQLite path, the PostgreSQL host) is shown.
func SecretDSN(fs *pflag.FlagSet, name, env string) {
	Env(fs, name, env)
	must(fs.SetAnnotation(name, annSecret, []string{"dsn"}))
}

// HostDefault documents a default computed from the host (its name, the
// user running the daemon): the examples show example and text instead
// of this machine's value, so they are the same everywhere.
func HostDefault(fs *pflag.FlagSet, name, example, text string) {
	must(fs.SetAnnotation(name, annHostDefault, []string{example, text}))
}

func must(err error) {
	if err != nil {
		panic(err) // a misspelt flag name in a command's definition
	}
}

// Keys returns fs's configurable flags, sorted by name.
func Keys(fs *pflag.FlagSet) []*pflag.Flag {
	var out []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !reserved[f.Name] {
			out = append(out, f)
		}
	})
	slices.SortFunc(out, func(a, b *pflag.Flag) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Sources tells where each key's value came from, for Print: "file
// NAME", "$VAR"; keys absent have their default or were on the command
// line (fs.Changed).
type Sources map[string]string

// Apply sets the flags of fs not given on the command line from the YAML
// file at path (none if path is ""), then from their environment
// variables.
func Apply(fs *pflag.FlagSet, path string, lookupEnv func(string) (string, bool)) (Sources, error) {
	src := Sources{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := Load(fs, path, b, src); err != nil {
			return nil, err
		}
	}
	for _, f := range Keys(fs) {
		env := envOf(f)
		if env == "" || f.Changed {
			continue
		}
		v, ok := lookupEnv(env)
		if !ok || v == "" {
			continue
		}
		if err := setString(f, v); err != nil {
			return nil, fmt.Errorf("$%s (%s): %w", env, f.Name, err)
		}
		src[f.Name] = "$" + env
	}
	return src, nil
}

// Load sets the flags of fs not given on the command line from the YAML
// document data, read from file name (for messages), recording each in
// src. Unknown keys, duplicates and values the flag refuses are errors
// naming the file, line and key.
func Load(fs *pflag.FlagSet, name string, data []byte, src Sources) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty, or only comments
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: one YAML document expected", name)
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: a mapping of keys to values expected", name, root.Line)
	}
	keys := Keys(fs)
	seen := map[string]bool{}
	for i := 0; i < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		at := fmt.Sprintf("%s:%d", name, k.Line)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: a key must be a flag name", at)
		}
		f := fs.Lookup(k.Value)
		if f == nil || reserved[k.Value] {
			return fmt.Errorf("%s: unknown key %q%s", at, k.Value, suggest(k.Value, keys))
		}
		if seen[f.Name] {
			return fmt.Errorf("%s: key %q given twice", at, k.Value)
		}
		seen[f.Name] = true
		if f.Changed {
			continue // the command line wins
		}
		if v.Kind == yaml.ScalarNode && isPlaceholder(f, v.Value) {
			return fmt.Errorf("%s: %s: %q is --print-config's placeholder for a secret, not the secret", at, f.Name, v.Value)
		}
		if err := set(f, v); err != nil {
			return fmt.Errorf("%s: %s: %w", at, f.Name, err)
		}
		src[f.Name] = "file " + name
	}
	return nil
}

// set gives one YAML value to f through its own parser.
func set(f *pflag.Flag, v *yaml.Node) error {
	sv, isSlice := f.Value.(pflag.SliceValue)
	switch {
	case v.Kind == yaml.AliasNode:
		return set(f, v.Alias)
	case v.Kind == yaml.SequenceNode && isSlice:
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
				return fmt.Errorf("line %d: a list of plain values expected", it.Line)
			}
			items = append(items, it.Value)
		}
		return sv.Replace(items)
	case v.Kind == yaml.SequenceNode:
		return fmt.Errorf("one value expected, not a list")
	case v.Kind != yaml.ScalarNode:
		return fmt.Errorf("a plain value expected")
	case v.Tag == "!!null":
		return fmt.Errorf(`no value (write "" for an empty one)`)
	}
	return setString(f, v.Value)
}

// setString sets f from one string, as on the command line; a list flag
// takes one item or several separated by commas, in place of what it
// held (a second pflag Set would append).
func setString(f *pflag.Flag, s string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if err := sv.Replace(nil); err != nil {
			return err
		}
	}
	return f.Value.Set(s)
}

// suggest names the known key closest to k, if one is close.
func suggest(k string, keys []*pflag.Flag) string {
	k = strings.TrimLeft(k, "-")
	best, bestD := "", len(k)/3+2
	for _, f := range keys {
		d := distance(k, f.Name)
		if strings.HasPrefix(k, f.Name+"-") || strings.HasPrefix(f.Name, k+"-") {
			d = 1 // listen-address for listen, token-cache for token-cache-time
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	}
	if best == "" {
		return ": not a flag of this command (see --help)"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func envOf(f *pflag.Flag) string {
	if a := f.Annotations[annEnv]; len(a) == 1 {
		return a[0]
	}
	return ""
}

// isPlaceholder tells whether v is what Print shows for secret f, copied
// from a printout into a file.
func isPlaceholder(f *pflag.Flag, v string) bool {
	a := f.Annotations[annSecret]
	return len(a) == 1 && (v == Redacted || a[0] == "dsn" && strings.Contains(v, ":"+Redacted+"@"))
}
