package pgserver

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

func TestNewest(t *testing.T) {
	cases := []struct {
		name string
		dirs []string
		want string
	}{
		{"none", nil, ""},
		{"one", []string{"/usr/lib/postgresql/15/bin"}, "/usr/lib/postgresql/15/bin"},
		{"numeric, not lexical", []string{"/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/9.6/bin"}, "/usr/lib/postgresql/16/bin"},
		{"minor versions", []string{"/usr/lib/postgresql/9.4/bin", "/usr/lib/postgresql/9.6/bin", "/usr/lib/postgresql/9/bin"}, "/usr/lib/postgresql/9.6/bin"},
		{"unparsable skipped", []string{"/usr/lib/postgresql/dev/bin", "/usr/lib/postgresql/13/bin"}, "/usr/lib/postgresql/13/bin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := newest(c.dirs); got != c.want {
				t.Errorf("newest(%v) = %q, want %q", c.dirs, got, c.want)
			}
		})
	}
}

// TestInitDB makes a cluster as the postgres user in a directory it owns.
func TestInitDB(t *testing.T) {
	testutil.RequireRoot(t)
	pg, err := Find()
	if errors.Is(err, ErrNotInstalled) && !Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	// The postgres user must reach the directory through its parents.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tmp, "pg")
	if err := pg.MkdirOwned(dir); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := pg.InitDB(data, "-E", "UTF8", "--locale=C"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(data, "PG_VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if owner := st.Sys().(*syscall.Stat_t).Uid; owner != pg.User.Uid {
		t.Errorf("PG_VERSION owned by uid %d, want the postgres user's %d", owner, pg.User.Uid)
	}
}
