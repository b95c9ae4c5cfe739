package config

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Redacted replaces a secret in Print's output.
const Redacted = "REDACTED"

// Print writes the effective configuration of fs as a YAML file that
// Load accepts, secrets redacted, each value set by other than the
// default followed by where it came from.
func Print(w io.Writer, title string, fs *pflag.FlagSet, src Sources) error {
	return write(w, title, fs, src, true)
}

func write(w io.Writer, title string, fs *pflag.FlagSet, src Sources, redactSecrets bool) error {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range Keys(fs) {
		v := value(f)
		if redactSecrets {
			redact(f, v)
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.Name}
		switch {
		case f.Changed:
			v.LineComment = "command line"
		case src[f.Name] != "":
			v.LineComment = src[f.Name]
		}
		m.Content = append(m.Content, k, v)
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, HeadComment: title, Content: []*yaml.Node{m}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// value is f's current value as a YAML node of its type, so that
// booleans and numbers print bare and strings that look like them are
// quoted.
func value(f *pflag.Flag) *yaml.Node {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, s := range sv.GetSlice() {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
		}
		return seq
	}
	return scalar(f.Value.Type(), f.Value.String())
}

func scalar(typ, s string) *yaml.Node {
	tag := "!!str"
	switch typ {
	case "bool":
		tag = "!!bool"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		tag = "!!int"
	case "float32", "float64":
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}
}

func redact(f *pflag.Flag, v *yaml.Node) {
	a := f.Annotations[annSecret]
	if len(a) != 1 || v.Kind != yaml.ScalarNode || v.Value == "" {
		return
	}
	switch a[0] {
	case "dsn":
		v.Value = redactDSN(v.Value)
	default:
		v.Value = Redacted
	}
}

// redactDSN hides the password of a URL DSN; a key=value DSN may hold
// one anywhere, so it is hidden whole. A path (SQLite) is no secret.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Redacted)
			return u.String()
		}
		if u.Query().Has("password") {
			return Redacted
		}
		return dsn
	}
	if strings.Contains(dsn, "=") {
		return Redacted
	}
	return dsn
}

// Example writes a complete example file for fs: every key with its help
// text, its default commented out, and how secrets and environment
// variables apply. Defaults from the host are shown as HostDefault says.
func Example(w io.Writer, header string, fs *pflag.FlagSet) error {
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
	}
	for _, f := range Keys(fs) {
		b.WriteString("\n")
		help := f.Usage
		var v *yaml.Node
		if hd := f.Annotations[annHostDefault]; len(hd) == 2 {
			v = scalar(f.Value.Type(), hd[0])
			help += " (default: " + hd[1] + ")"
		} else if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, s := range sv.GetSlice() {
				v.Content = append(v.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
			}
		} else {
			v = scalar(f.Value.Type(), f.DefValue)
		}
		if env := envOf(f); env != "" {
			if len(f.Annotations[annSecret]) > 0 {
				help += fmt.Sprintf("; a secret: better in $%s than in this file", env)
			} else {
				help += fmt.Sprintf("; $%s, when set, wins over this file", env)
			}
		}
		for _, line := range wrap(help, 76) {
			b.WriteString("# " + line + "\n")
		}
		m := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.Name}, v}}
		out, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		b.WriteString("#" + string(out))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// wrap breaks s into lines of at most width bytes at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
