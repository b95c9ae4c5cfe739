// Package barbican runs Debian's barbican-api (Barbican, OpenStack's key
// manager, Octavia's certificate store) under uwsgi for the tests: SQLite
// and simple_crypto in a directory of its own, tokens validated by a
// Keystone the test runs. The lab's tests (test/e2e) and the real
// OpenStack test bed (internal/lab/openstack) start it in the lab's
// fabric namespace.
package barbican

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Port is where Barbican's API listens by default.
const Port = 9311

// User and Password are Barbican's service user in Keystone by default:
// its keystonemiddleware validates tokens as this user, which needs the
// admin (or service) role in its project.
const (
	User     = "barbican"
	Password = "barbicanpw"
)

// Missing reports what of Barbican is not installed (nil: all is).
func Missing() error {
	var miss []string
	for _, b := range []string{"uwsgi", "barbican-wsgi-api"} {
		if _, err := exec.LookPath(b); err != nil {
			miss = append(miss, b)
		}
	}
	if _, err := os.Stat("/usr/lib/uwsgi/plugins/python3_plugin.so"); err != nil {
		miss = append(miss, "uwsgi's python3 plugin")
	}
	if len(miss) > 0 {
		return fmt.Errorf("missing %s (Debian packages barbican-api, uwsgi, uwsgi-plugin-python3)", strings.Join(miss, ", "))
	}
	return nil
}

// Config is where Barbican lives and whom it trusts.
type Config struct {
	// Dir holds its configuration, database and logs.
	Dir string
	// Listen is where uwsgi binds (host:port), URL where clients reach
	// it (its secrets' references begin with it).
	Listen, URL string
	// KeystoneURL is the identity endpoint (no /v3); Project, User and
	// Password Barbican's service user there (User and Password by
	// default).
	KeystoneURL, Project, User, Password string
}

// Barbican is a configured Barbican, served once Argv runs.
type Barbican struct {
	Config
	started time.Time
}

// wsgi is the uwsgi entry of Barbican's API: Debian's
// barbican-wsgi-api loads its paste pipeline from /etc/barbican, this
// one from Barbican's own directory.
const wsgi = `# Written by flowlb's tests (internal/lab/barbican).
from paste import deploy
application = deploy.loadapp('config:%s')
`

// paste is Debian's barbican-api-paste.ini without the pipelines the
// tests do not serve (no auth, audit, profiling, the health check on a
// file of /etc): the versions at / and the API under Keystone at /v1.
const paste = `# Written by flowlb's tests (internal/lab/barbican).
[composite:main]
use = egg:Paste#urlmap
/: barbican_version
/v1: barbican-api-keystone

[pipeline:barbican_version]
pipeline = cors http_proxy_to_wsgi microversion versionapp

[pipeline:barbican-api-keystone]
pipeline = cors http_proxy_to_wsgi authtoken context microversion apiapp

[app:apiapp]
paste.app_factory = barbican.api.app:create_main_app

[app:versionapp]
paste.app_factory = barbican.api.app:create_version_app

[filter:context]
paste.filter_factory = barbican.api.middleware.context:ContextMiddleware.factory

[filter:microversion]
paste.filter_factory = barbican.api.middleware.microversion:MicroversionMiddleware.factory

[filter:authtoken]
paste.filter_factory = keystonemiddleware.auth_token:filter_factory

[filter:cors]
paste.filter_factory = oslo_middleware.cors:filter_factory
oslo_config_project = barbican

[filter:http_proxy_to_wsgi]
paste.filter_factory = oslo_middleware:HTTPProxyToWSGI.factory
`

// conf is barbican.conf: SQLite in Barbican's directory (tables made at
// start-up), secrets encrypted by simple_crypto with the key encryption
// key kek, tokens validated by Keystone.
func (b *Barbican) conf(kek string) string {
	return fmt.Sprintf(`# Written by flowlb's tests (internal/lab/barbican).
[DEFAULT]
host_href = %[2]s
sql_connection = sqlite:///%[1]s/barbican.sqlite
db_auto_create = true
log_file = %[1]s/log/barbican-api.log
debug = false

[keystone_authtoken]
www_authenticate_uri = %[3]s
auth_url = %[3]s
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = %[4]s
username = %[5]s
password = %[6]s
region_name = %[7]s

[keystone_notifications]
enable = false

[secretstore]
enabled_secretstore_plugins = store_crypto

[crypto]
enabled_crypto_plugins = simple_crypto

[simple_crypto_plugin]
kek = %[8]s

[oslo_policy]
policy_dirs = %[1]s/.barbican/policy.d
`, b.Dir, b.URL, b.KeystoneURL, b.Project, b.User, b.Password, keystone.Region, kek)
}

// New writes Barbican's configuration (a fresh key encryption key), its
// paste pipeline and WSGI entry under cfg.Dir. Barbican's modules each
// read barbican.conf from oslo.config's default places and take no
// --config-file; the first of those is ~/.barbican/barbican.conf, so
// Barbican runs with HOME at its directory, whose .barbican holds it:
// /etc/barbican is not read.
func New(cfg Config) (*Barbican, error) {
	if cfg.User == "" {
		cfg.User, cfg.Password = User, Password
	}
	b := &Barbican{Config: cfg}
	for _, sub := range []string{"log", filepath.Join(".barbican", "policy.d")} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	for p, s := range map[string]string{
		filepath.Join(cfg.Dir, ".barbican", "barbican.conf"): b.conf(base64.StdEncoding.EncodeToString(key)),
		b.pastePath(): paste,
		b.wsgiPath():  fmt.Sprintf(wsgi, b.pastePath()),
	} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *Barbican) pastePath() string { return filepath.Join(b.Dir, "barbican-api-paste.ini") }
func (b *Barbican) wsgiPath() string  { return filepath.Join(b.Dir, "barbican-wsgi.py") }

// Argv is the uwsgi command line and environment that serve b: one
// process and one thread (SQLite has one writer), each response with
// "Connection: close". It needs Keystone only once a request comes.
// Calling it marks b's start (Wait reports the time since).
func (b *Barbican) Argv() (argv, env []string) {
	b.started = time.Now()
	return []string{"uwsgi", "--http-socket", b.Listen,
			"--plugin", "python3", "--wsgi-file", b.wsgiPath(), "--chdir", b.Dir, "--master", "--die-on-term",
			"--processes", "1", "--threads", "1", "--buffer-size", "65535", "--add-header", "Connection: close",
			"--logto", b.LogPath()},
		[]string{"HOME=" + b.Dir}
}

// LogPath is uwsgi's log.
func (b *Barbican) LogPath() string { return filepath.Join(b.Dir, "log", "uwsgi.log") }

// APILogPath is Barbican's own log (its errors' tracebacks).
func (b *Barbican) APILogPath() string { return filepath.Join(b.Dir, "log", "barbican-api.log") }

// Wait waits until Barbican answers its versions through hc, and logs
// how long after its start.
func (b *Barbican) Wait(t testing.TB, hc *http.Client) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "Barbican at "+b.URL, func() (bool, string) {
		resp, err := hc.Get(b.URL + "/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		// 300 Multiple Choices: the versions document.
		return resp.StatusCode == 300 || resp.StatusCode == 200, resp.Status
	})
	t.Logf("Barbican answered %s after its start", time.Since(b.started).Round(time.Millisecond))
}
