package config

import (
	"bytes"
	"fmt"
	"regexp"

	"github.com/spf13/pflag"
)

// Checks shared by this package's tests and the daemons' tests, which
// run them on the real flag sets; newFlags returns a fresh one.

// RoundTrip loads file into a fresh flag set, prints it unredacted, loads
// the printout into another and checks both hold the same values and
// print the same.
func RoundTrip(newFlags func() *pflag.FlagSet, file []byte) error {
	first := newFlags()
	if err := Load(first, "file", file, Sources{}); err != nil {
		return err
	}
	var p1, p2 bytes.Buffer
	if err := write(&p1, "", first, nil, false); err != nil {
		return err
	}
	second := newFlags()
	if err := Load(second, "printed", p1.Bytes(), Sources{}); err != nil {
		return fmt.Errorf("%w, printed:\n%s", err, p1.String())
	}
	for _, f := range Keys(first) {
		a, b := valueOf(f), valueOf(second.Lookup(f.Name))
		if a != b {
			return fmt.Errorf("%s: %q from the file, %q from its printout:\n%s", f.Name, a, b, p1.String())
		}
	}
	if err := write(&p2, "", second, nil, false); err != nil {
		return err
	}
	if p1.String() != p2.String() {
		return fmt.Errorf("printed differently once loaded again:\n%s\nthen\n%s", p1.String(), p2.String())
	}
	return nil
}

func valueOf(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return fmt.Sprintf("%q", sv.GetSlice())
	}
	return f.Value.String()
}

var commentedKey = regexp.MustCompile(`(?m)^#([a-z0-9][a-z0-9-]*:)`)

// CheckExample checks an example written by Example: it loads as it is,
// and with every key uncommented it loads too, naming every key once,
// each with the flag's default (or HostDefault's example).
func CheckExample(newFlags func() *pflag.FlagSet, example []byte) error {
	if err := Load(newFlags(), "example", example, Sources{}); err != nil {
		return err
	}
	fs := newFlags()
	src := Sources{}
	if err := Load(fs, "example uncommented", commentedKey.ReplaceAll(example, []byte("$1")), src); err != nil {
		return err
	}
	fresh := newFlags()
	for _, f := range Keys(fs) {
		if src[f.Name] == "" {
			return fmt.Errorf("example: key %s missing", f.Name)
		}
		want := valueOf(fresh.Lookup(f.Name))
		if hd := f.Annotations[annHostDefault]; len(hd) == 2 {
			want = hd[0]
		}
		if got := valueOf(f); got != want {
			return fmt.Errorf("example: %s is %q, its default %q", f.Name, got, want)
		}
	}
	return nil
}
