package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// checked wraps a flag's value with a check run before each Set, so that
// a bad value is refused while parsing the command line or the file,
// naming the key, rather than later by the daemon.
type checked struct {
	pflag.Value
	check   func(string) error
	allowed []string
}

func (c *checked) Set(s string) error {
	if err := c.check(s); err != nil {
		return err
	}
	return c.Value.Set(s)
}

// Check makes flag name refuse the values check refuses.
func Check(fs *pflag.FlagSet, name string, check func(string) error) {
	f := fs.Lookup(name)
	if f == nil {
		panic("config.Check: no flag " + name)
	}
	f.Value = &checked{Value: f.Value, check: check}
}

// OneOf makes flag name accept only the given values.
func OneOf(fs *pflag.FlagSet, name string, allowed ...string) {
	Check(fs, name, func(s string) error {
		if !slices.Contains(allowed, s) {
			return fmt.Errorf("%q is not one of %s", s, strings.Join(allowed, ", "))
		}
		return nil
	})
	fs.Lookup(name).Value.(*checked).allowed = allowed
}

// Allowed returns the values OneOf allows for f, or nil.
func Allowed(f *pflag.Flag) []string {
	if c, ok := f.Value.(*checked); ok {
		return c.allowed
	}
	return nil
}
