// Package noopoctavia runs the real OpenStack Octavia from Debian's packages
// for a benchmark: its own MariaDB and RabbitMQ on loopback, in a
// temporary directory, the API (uwsgi) and one worker with the no-op
// amphora, compute and network drivers and the amphora provider, noauth.
// This is Octavia at its fastest: the worker runs the amphora provider's
// whole flow (database, certificates, RPC) but boots no VM.
//
// With a provider source (StartWithProvider), the stack also has the
// flowlb provider driver (deploy/octavia-provider, installed with pip
// into the stack's directory) as its default provider, and the driver
// agent with the provider agent: Octavia's API hands each call to a
// flowlb server instead of the worker.
//
// Every process runs in its own process group, killed whole by Close
// (and by the kernel when the caller dies first); Close removes the
// directory.
package noopoctavia

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// Binaries are what Octavia needs installed (Debian packages octavia-api,
// octavia-worker, rabbitmq-server, mariadb-server, uwsgi,
// uwsgi-plugin-python3).
var Binaries = []string{"octavia-db-manage", "octavia-worker", "octavia-wsgi", "uwsgi",
	"mariadb-install-db", "mysqld", "mariadb", "epmd", "/usr/lib/rabbitmq/bin/rabbitmq-server"}

// workerLauncher runs octavia-worker with a native lock in the logging
// module (see the file's docstring): without it, two load balancers
// created at once can leave the worker hung for good.
//
//go:embed octavia_worker.py
var workerLauncher []byte

// Missing reports what of Binaries is not installed (nil: all is).
func Missing() error {
	var miss []string
	for _, b := range Binaries {
		if _, err := exec.LookPath(b); err != nil {
			miss = append(miss, b)
		}
	}
	if _, err := os.Stat("/usr/lib/uwsgi/plugins/python3_plugin.so"); err != nil {
		miss = append(miss, "uwsgi's python3 plugin")
	}
	if len(miss) > 0 {
		return fmt.Errorf("missing %s (hack/install-deps.sh --test installs them)", strings.Join(miss, ", "))
	}
	return nil
}

// Stack is MariaDB and RabbitMQ, started once, and an Octavia API and
// worker on a database of their own (see Fresh).
type Stack struct {
	// URL is the Octavia API's root, e.g. http://127.0.0.1:40000.
	URL string

	// FlowlbURL is the flowlb server the flowlb provider calls, read by
	// Fresh (a stack with the provider only).
	FlowlbURL string

	dir            string
	site           string // the flowlb provider's install, if any
	dbPort         int
	rabbitPort     int
	apiPort        int
	generation     int
	infra, octavia []*exec.Cmd
}

// Start starts MariaDB and RabbitMQ and a first Octavia.
func Start(ctx context.Context) (*Stack, error) { return start(ctx, "") }

// StartWithProvider starts MariaDB and RabbitMQ and installs the flowlb
// provider from src (deploy/octavia-provider); each Fresh then starts an
// Octavia whose default provider is flowlb, calling FlowlbURL.
func StartWithProvider(ctx context.Context, src string) (*Stack, error) { return start(ctx, src) }

func start(ctx context.Context, provider string) (_ *Stack, err error) {
	if err := Missing(); err != nil {
		return nil, err
	}
	if provider != "" {
		if _, err := exec.LookPath("octavia-driver-agent"); err != nil {
			return nil, fmt.Errorf("the flowlb provider needs octavia-driver-agent (hack/install-deps.sh --openstack): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "octavia-bench-")
	if err != nil {
		return nil, err
	}
	s := &Stack{dir: dir}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	ports, err := testutil.FreePorts(5)
	if err != nil {
		return nil, err
	}
	s.dbPort, s.rabbitPort, s.apiPort = ports[0], ports[1], ports[2]
	epmdPort, distPort := ports[3], ports[4]
	if err := s.startMariaDB(ctx); err != nil {
		return nil, err
	}
	if err := s.startRabbitMQ(ctx, epmdPort, distPort); err != nil {
		return nil, err
	}
	if err := writeCA(dir); err != nil {
		return nil, err
	}
	if provider != "" {
		// pip builds in the source directory: from a copy.
		s.site = s.path("site")
		build := s.path("provider-src")
		if err := run(ctx, nil, "cp", "-a", provider, build); err != nil {
			return nil, err
		}
		if err := run(ctx, nil, "/usr/bin/python3", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
			"--disable-pip-version-check", "--target", s.site, build); err != nil {
			return nil, err
		}
		return s, nil // Fresh once the caller's flowlb runs
	}
	if err := s.Fresh(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) path(p ...string) string { return filepath.Join(append([]string{s.dir}, p...)...) }

// start runs argv in its own process group, its output to log (in the
// stack's directory), and remembers it in *into.
func (s *Stack) start(into *[]*exec.Cmd, log string, env []string, argv ...string) error {
	out, err := os.Create(s.path(log))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	*into = append(*into, cmd)
	return nil
}

// run runs argv to completion, its output in the error.
func run(ctx context.Context, env []string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, tail(out))
	}
	return nil
}

func tail(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}

func (s *Stack) startMariaDB(ctx context.Context) error {
	data := s.path("mariadb")
	if err := run(ctx, nil, "mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db"); err != nil {
		return err
	}
	if err := s.start(&s.infra, "mysqld.log", nil, "mysqld", "--no-defaults", "--user=root", "--datadir="+data,
		"--socket="+s.path("mysqld.sock"), "--bind-address=127.0.0.1", fmt.Sprintf("--port=%d", s.dbPort),
		"--pid-file="+s.path("mysqld.pid"), "--skip-log-bin", "--max-connections=500"); err != nil {
		return err
	}
	return wait(ctx, 60*time.Second, "MariaDB", func() error { return s.sql(ctx, "SELECT 1") })
}

func (s *Stack) sql(ctx context.Context, stmt string) error {
	return run(ctx, nil, "mariadb", "--no-defaults", "--socket="+s.path("mysqld.sock"), "-uroot", "-e", stmt)
}

func (s *Stack) startRabbitMQ(ctx context.Context, epmdPort, distPort int) error {
	for _, d := range []string{"rabbitmq/home", "rabbitmq/mnesia", "rabbitmq/log"} {
		if err := os.MkdirAll(s.path(d), 0o700); err != nil {
			return err
		}
	}
	files := map[string]string{
		"rabbitmq/env.conf":        "",
		"rabbitmq/enabled_plugins": "[].\n",
		"rabbitmq/rabbitmq.conf":   fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\n", s.rabbitPort),
	}
	for name, text := range files {
		if err := os.WriteFile(s.path(name), []byte(text), 0o600); err != nil {
			return err
		}
	}
	// Our own epmd on its own port, so that no node of another RabbitMQ
	// or Erlang program meets this one, and Close stops it.
	if err := s.start(&s.infra, "epmd.log", nil, "epmd", "-port", fmt.Sprint(epmdPort), "-address", "127.0.0.1"); err != nil {
		return err
	}
	env := []string{
		"HOME=" + s.path("rabbitmq/home"), // the Erlang cookie
		fmt.Sprintf("ERL_EPMD_PORT=%d", epmdPort),
		"RABBITMQ_CONF_ENV_FILE=" + s.path("rabbitmq/env.conf"),
		"RABBITMQ_CONFIG_FILE=" + s.path("rabbitmq/rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + s.path("rabbitmq/advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + s.path("rabbitmq/enabled_plugins"),
		"RABBITMQ_PLUGINS_EXPAND_DIR=" + s.path("rabbitmq/plugins"),
		"RABBITMQ_MNESIA_BASE=" + s.path("rabbitmq/mnesia"),
		"RABBITMQ_LOG_BASE=" + s.path("rabbitmq/log"),
		"RABBITMQ_PID_FILE=" + s.path("rabbitmq/pid"),
		fmt.Sprintf("RABBITMQ_NODENAME=octbench%d@localhost", s.rabbitPort),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", s.rabbitPort),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", distPort),
		// Erlang distribution on loopback too.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	}
	if err := s.start(&s.infra, "rabbitmq.log", env, "/usr/lib/rabbitmq/bin/rabbitmq-server"); err != nil {
		return err
	}
	return wait(ctx, 120*time.Second, "RabbitMQ", func() error {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.rabbitPort), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// Fresh replaces the Octavia API and worker with new ones on an empty
// database of their own, so that every measurement starts from nothing
// (MariaDB and RabbitMQ stay).
func (s *Stack) Fresh(ctx context.Context) error {
	s.stop(s.octavia)
	s.octavia = nil
	s.generation++
	db := fmt.Sprintf("octavia%d", s.generation)
	if err := s.sql(ctx, fmt.Sprintf("CREATE DATABASE %[1]s; CREATE USER IF NOT EXISTS 'octavia'@'127.0.0.1' IDENTIFIED BY 'octavia'; "+
		"GRANT ALL ON %[1]s.* TO 'octavia'@'127.0.0.1';", db)); err != nil {
		return err
	}
	conf := s.path(db + ".conf")
	cp := ConfigParams{Dir: s.dir, Database: db, DBPort: s.dbPort, RabbitPort: s.rabbitPort, APIPort: s.apiPort}
	var env []string
	if s.site != "" {
		if s.FlowlbURL == "" {
			return errors.New("a stack with the flowlb provider needs FlowlbURL before Fresh")
		}
		cp.FlowlbURL = s.FlowlbURL
		env = []string{"PYTHONPATH=" + s.site}
		for _, sock := range []string{"status", "stats", "get"} {
			_ = os.Remove(s.path(sock + ".sock"))
		}
	}
	text := Config(cp)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(s.path("lock"), 0o700); err != nil {
		return err
	}
	if err := run(ctx, nil, "octavia-db-manage", "--config-file", conf, "upgrade", "head"); err != nil {
		return err
	}
	launcher := s.path("octavia_worker.py")
	if err := os.WriteFile(launcher, workerLauncher, 0o600); err != nil {
		return err
	}
	if err := s.start(&s.octavia, db+"-worker.log", nil, "/usr/bin/python3", launcher, "--config-file", conf); err != nil {
		return err
	}
	if s.site != "" {
		if err := s.start(&s.octavia, db+"-driver-agent.log", env, "/usr/bin/python3", "/usr/bin/octavia-driver-agent", "--config-file", conf); err != nil {
			return err
		}
		if err := wait(ctx, 180*time.Second, "Octavia's driver agent", func() error {
			for _, sock := range []string{"status", "stats", "get"} {
				if _, err := os.Stat(s.path(sock + ".sock")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	// uwsgi with 8 processes, as Debian's octavia-api-uwsgi.ini, one
	// thread each. Each response says "Connection: close": uwsgi's
	// http-socket closes every connection after its response, and a
	// client reusing one would see its POST reset. --pyargv hands the
	// configuration to octavia-wsgi.
	listen := fmt.Sprintf("127.0.0.1:%d", s.apiPort)
	if err := s.start(&s.octavia, db+"-api.log", env, "uwsgi", "--http-socket", listen, "--plugin", "python3",
		"--wsgi-file", "/usr/bin/octavia-wsgi", "--pyargv", "--config-file "+conf,
		"--master", "--die-on-term", "--lazy-apps", "--enable-threads", "--thunder-lock",
		"--processes", "8", "--threads", "1", "--buffer-size", "65535", "--add-header", "Connection: close"); err != nil {
		return err
	}
	s.URL = "http://" + listen
	return wait(ctx, 180*time.Second, "Octavia API", func() error {
		resp, err := http.Get(s.URL + "/v2/lbaas/loadbalancers?limit=1")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

// Logs returns the end of the worker's and the API's logs of the
// current Octavia, for an error report.
func (s *Stack) Logs() string {
	var b bytes.Buffer
	for _, name := range []string{"worker", "api", "driver-agent"} {
		out, _ := os.ReadFile(s.path(fmt.Sprintf("octavia%d-%s.log", s.generation, name)))
		fmt.Fprintf(&b, "--- octavia %s log (end):\n%s\n", name, tail(out))
	}
	return b.String()
}

// Close stops every process (their whole process groups) and removes
// the directory.
func (s *Stack) Close() {
	s.stop(s.octavia)
	s.stop(s.infra)
	s.octavia, s.infra = nil, nil
	_ = os.RemoveAll(s.dir)
}

// stop terminates the process groups of cmds, last started first, and
// kills what is left after 10 s.
func (s *Stack) stop(cmds []*exec.Cmd) {
	for i := len(cmds) - 1; i >= 0; i-- {
		cmd := cmds[i]
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		// The group, too: the children of a shell script (RabbitMQ's
		// beam) outlive it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// ConfigParams are what octavia.conf depends on.
type ConfigParams struct {
	Dir, Database               string
	DBPort, RabbitPort, APIPort int
	// FlowlbURL, if set, makes flowlb the default provider, calling the
	// flowlb server there, with the driver agent's sockets in Dir.
	FlowlbURL string
}

// Config is octavia.conf for the no-op drivers and the amphora provider,
// noauth, on loopback. The options below are those Octavia 11's worker
// reads on the way to ACTIVE with the no-op drivers: the CA signs each
// amphora's certificate and is read as client_ca while "building" it.
func Config(p ConfigParams) string {
	providers, def := "amphora:The Amphora driver", "amphora"
	if p.FlowlbURL != "" {
		providers, def = providers+",flowlb:flowlb distributed load balancer", "flowlb"
	}
	conf := fmt.Sprintf(`[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:%[3]d/
debug = false

[api_settings]
auth_strategy = noauth
bind_host = 127.0.0.1
bind_port = %[4]d
api_base_uri = http://127.0.0.1:%[4]d
enabled_provider_drivers = %[6]s
default_provider_driver = %[7]s

[database]
connection = mysql+pymysql://octavia:octavia@127.0.0.1:%[5]d/%[2]s
max_pool_size = 20

[controller_worker]
amphora_driver = amphora_noop_driver
compute_driver = compute_noop_driver
network_driver = network_noop_driver
image_driver = image_noop_driver
volume_driver = volume_noop_driver
loadbalancer_topology = SINGLE
amp_image_tag = amphora
amp_flavor_id = 1
amp_boot_network_list = 11111111-1111-1111-1111-111111111111
client_ca = %[1]s/ca.pem

[certificates]
cert_generator = local_cert_generator
ca_certificate = %[1]s/ca.pem
ca_private_key = %[1]s/ca.key

[oslo_messaging]
topic = octavia_prov

[oslo_concurrency]
lock_path = %[1]s/lock

[health_manager]
heartbeat_key = bench
`, p.Dir, p.Database, p.RabbitPort, p.APIPort, p.DBPort, providers, def)
	if p.FlowlbURL == "" {
		return conf
	}
	return conf + fmt.Sprintf(`
[driver_agent]
status_socket_path = %[1]s/status.sock
stats_socket_path = %[1]s/stats.sock
get_socket_path = %[1]s/get.sock
enabled_provider_agents = flowlb

[flowlb]
url = %[2]s
`, p.Dir, p.FlowlbURL)
}

// writeCA writes the CA that signs the amphorae's certificates
// (ca.pem, ca.key, unencrypted) into dir.
func writeCA(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "octavia-bench-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}

// wait waits until ready returns nil, within d, or ctx is done.
func wait(ctx context.Context, d time.Duration, what string, ready func() error) error {
	err := testutil.Wait(d, func() (bool, string) {
		if ctx.Err() != nil {
			return true, ""
		}
		if err := ready(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
