package openstack

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/keystone"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// BarbicanPort is where Barbican's API (the key manager, Octavia's
// certificate store) listens on the lab's control address.
const BarbicanPort = 9311

// Barbican's service user in Keystone: its keystonemiddleware validates
// tokens as this user.
const (
	BarbicanUser     = "barbican"
	BarbicanPassword = "barbicanpw"
)

// barbicanWSGI is the uwsgi entry of Barbican's API: Debian's
// barbican-wsgi-api loads its paste pipeline from /etc/barbican, this
// one from the bed's own file.
const barbicanWSGI = `# Written by the flowlb test bed (internal/lab/openstack/barbican.go).
from paste import deploy
application = deploy.loadapp('config:%s')
`

// barbicanPaste is Debian's barbican-api-paste.ini without the pipelines
// the bed does not serve (no auth, audit, profiling, the health check on
// a file of /etc): the versions at / and the API under Keystone at /v1.
const barbicanPaste = `# Written by the flowlb test bed (internal/lab/openstack/barbican.go).
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

// barbicanConf is barbican.conf: SQLite in the bed's directory (tables
// made at start-up), secrets encrypted by simple_crypto with the key
// encryption key kek, tokens validated by the bed's Keystone.
func (c *Cloud) barbicanConf(d, kek string) string {
	return fmt.Sprintf(`# Written by the flowlb test bed (internal/lab/openstack/barbican.go).
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
`, d, c.BarbicanURL, c.KeystoneURL, ServiceProject, BarbicanUser, BarbicanPassword, keystone.Region, kek)
}

// startBarbican starts Barbican's API (Debian's barbican-api) in the
// fabric namespace: uwsgi, one process and one thread (SQLite has one
// writer), its configuration, paste pipeline, database and logs under
// <bed>/barbican. Barbican's modules each read barbican.conf from
// oslo.config's default places and take no --config-file; the first of
// those is ~/.barbican/barbican.conf, so Barbican runs with HOME at its
// directory, whose .barbican holds it: /etc/barbican is not read. It
// needs Keystone only once a request comes (setupKeystone registers its
// user and endpoint).
func (c *Cloud) startBarbican() {
	c.t.Helper()
	d := c.path("barbican")
	for _, sub := range []string{"log", filepath.Join(".barbican", "policy.d")} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o700); err != nil {
			c.t.Fatal(err)
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		c.t.Fatal(err)
	}
	paste, wsgi := filepath.Join(d, "barbican-api-paste.ini"), filepath.Join(d, "barbican-wsgi.py")
	for p, s := range map[string]string{
		filepath.Join(d, ".barbican", "barbican.conf"): c.barbicanConf(d, base64.StdEncoding.EncodeToString(key)),
		paste: barbicanPaste,
		wsgi:  fmt.Sprintf(barbicanWSGI, paste),
	} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	c.barbicanStarted = time.Now()
	c.start(c.Lab.Fabric(), "barbican", []string{"HOME=" + d}, "uwsgi", "--http-socket", fmt.Sprintf("%s:%d", lab.ControlAddr, BarbicanPort),
		"--plugin", "python3", "--wsgi-file", wsgi, "--chdir", d, "--master", "--die-on-term",
		"--processes", "1", "--threads", "1", "--buffer-size", "65535", "--add-header", "Connection: close",
		"--logto", filepath.Join(d, "log", "uwsgi.log"))
}

// waitBarbican waits until Barbican's API answers its versions (the
// time since its start is an upper bound: the first try comes once
// Keystone is set up).
func (c *Cloud) waitBarbican() {
	c.t.Helper()
	testutil.Eventually(c.t, 3*time.Minute, "Barbican at "+c.BarbicanURL, func() (bool, string) {
		resp, err := c.HTTP.Get(c.BarbicanURL + "/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		// 300 Multiple Choices: the versions document.
		return resp.StatusCode == 300 || resp.StatusCode == 200, resp.Status
	})
	c.t.Logf("openstack: Barbican answered %s after its start", time.Since(c.barbicanStarted).Round(time.Millisecond))
}
