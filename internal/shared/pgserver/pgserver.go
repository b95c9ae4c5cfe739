// Package pgserver runs Debian's PostgreSQL server binaries
// (/usr/lib/postgresql/N/bin, package postgresql) as the postgres system
// user, which the server requires (it refuses to run as root). The store
// tests' throwaway cluster and the lab's database share it.
package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// RequireEnv, set to 1, makes tests that need PostgreSQL fail instead of
// skip when it is not installed (CI sets it).
const RequireEnv = "FLOWLB_REQUIRE_POSTGRES"

// Required reports whether RequireEnv is set.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// ErrNotInstalled is returned by Find when no server binaries are found.
var ErrNotInstalled = errors.New("PostgreSQL is not installed (apt-get install postgresql)")

// binGlob matches the binary directories of Debian's PostgreSQL packages.
const binGlob = "/usr/lib/postgresql/*/bin"

// Install is an installed PostgreSQL: its binaries and the system user
// the server runs as.
type Install struct {
	Bin  string // directory of initdb, postgres, pg_ctl, ...
	User syscall.Credential
}

// Find locates the newest installed major version and the postgres user.
func Find() (*Install, error) {
	dirs, _ := filepath.Glob(binGlob)
	dirs = slices.DeleteFunc(dirs, func(d string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.Mode()&0o111 == 0 {
				return true
			}
		}
		return false
	})
	bin := newest(dirs)
	if bin == "" {
		return nil, ErrNotInstalled
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres system user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres gid %q: %w", u.Gid, err)
	}
	return &Install{Bin: bin, User: syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
}

// newest picks, among /usr/lib/postgresql/N/bin directories, the one of
// the highest major version N (numerically: 16 is newer than 9.6).
func newest(dirs []string) string {
	best, bestVer := "", []int(nil)
	for _, d := range dirs {
		v, ok := majorVersion(d)
		if ok && (best == "" || slices.Compare(v, bestVer) > 0) {
			best, bestVer = d, v
		}
	}
	return best
}

// majorVersion parses N of .../postgresql/N/bin as dotted numbers.
func majorVersion(dir string) ([]int, bool) {
	var v []int
	for _, part := range strings.Split(filepath.Base(filepath.Dir(dir)), ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil, false
		}
		v = append(v, n)
	}
	return v, true
}

// Path is the path of the PostgreSQL program name.
func (i *Install) Path(name string) string { return filepath.Join(i.Bin, name) }

// Command runs the PostgreSQL program name as the postgres user, from the
// root directory (the caller's may not be readable by that user).
func (i *Install) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(i.Path(name), args...)
	cmd.Dir = "/"
	cred := i.User
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &cred}
	return cmd
}

// MkdirOwned creates dir (mode 0700) owned by the postgres user, as the
// server wants its data and socket directories; an existing dir is
// re-owned.
func (i *Install) MkdirOwned(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(dir, int(i.User.Uid), int(i.User.Gid)); err != nil {
		return fmt.Errorf("chown %s to postgres: %w", dir, err)
	}
	return os.Chmod(dir, 0o700)
}

// InitDB creates a cluster in data with trust authentication and the
// superuser postgres, without syncing to disk (throwaway clusters); args
// are added to initdb's.
func (i *Install) InitDB(data string, args ...string) error {
	argv := append([]string{"-D", data, "-A", "trust", "-U", "postgres", "--no-sync"}, args...)
	if out, err := i.Command("initdb", argv...).CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", data, err, out)
	}
	return nil
}
