package noopoctavia

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigProvider: without a flowlb URL, Octavia's default provider is
// the amphora and no driver agent is configured; with one, flowlb is
// enabled beside the amphora and the default, with the driver agent's
// sockets, the provider agent and the [flowlb] section.
func TestConfigProvider(t *testing.T) {
	p := ConfigParams{Dir: "/d", Database: "octavia1", DBPort: 1, RabbitPort: 2, APIPort: 3}
	plain := Config(p)
	for _, want := range []string{"enabled_provider_drivers = amphora:The Amphora driver\n", "default_provider_driver = amphora\n"} {
		if !strings.Contains(plain, want) {
			t.Errorf("without flowlb: no %q in\n%s", want, plain)
		}
	}
	if strings.Contains(plain, "[driver_agent]") || strings.Contains(plain, "[flowlb]") {
		t.Errorf("without flowlb: a driver agent or flowlb section in\n%s", plain)
	}
	p.FlowlbURL = "http://127.0.0.1:9"
	withFlowlb := Config(p)
	for _, want := range []string{
		"enabled_provider_drivers = amphora:The Amphora driver,flowlb:flowlb distributed load balancer\n",
		"default_provider_driver = flowlb\n",
		"get_socket_path = /d/get.sock\n",
		"enabled_provider_agents = flowlb\n",
		"[flowlb]\nurl = http://127.0.0.1:9\n",
	} {
		if !strings.Contains(withFlowlb, want) {
			t.Errorf("with flowlb: no %q in\n%s", want, withFlowlb)
		}
	}
}

// contendLogging imports eventlet without patching threads, as
// octavia-worker does, sets oslo_log up (with the launcher's change
// first when patch is "patch"), and has four native threads take
// logging's module lock in turn; it prints the lock's type and how many
// threads finished within three seconds.
const contendLogging = `
import logging, os, sys, threading, time
import eventlet
from oslo_config import cfg
from oslo_log import log as oslo_log
sys.path.insert(0, sys.argv[1])
import octavia_worker
if sys.argv[2] == 'patch':
    octavia_worker.native_lock_after_oslo_log()
conf = cfg.ConfigOpts()
oslo_log.register_options(conf)
conf([])
oslo_log.setup(conf, 'contend')
def work():
    for i in range(100):
        with logging._lock:
            time.sleep(0.001)
ts = [threading.Thread(target=work, daemon=True) for _ in range(4)]
for t in ts:
    t.start()
end = time.monotonic() + 3
for t in ts:
    t.join(max(0, end - time.monotonic()))
print(type(logging._lock).__module__, sum(not t.is_alive() for t in ts), flush=True)
os._exit(0)
`

// TestWorkerLauncherNativeLock: with the launcher's change, oslo_log
// leaves logging a native lock and native threads that contend for it
// all finish; without it (logged, not required: a later eventlet may
// not hang) they hang on eventlet's hub.
func TestWorkerLauncherNativeLock(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import eventlet, oslo_log, oslo_config").Run(); err != nil {
		t.Skipf("no eventlet and oslo_log for /usr/bin/python3 (hack/install-deps.sh --test installs them): %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "octavia_worker.py"), workerLauncher, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(mode string) (module string, finished int) {
		out, err := exec.Command("/usr/bin/python3", "-c", contendLogging, dir, mode).Output()
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if _, err := fmt.Sscan(lines[len(lines)-1], &module, &finished); err != nil {
			t.Fatalf("%s: output %q: %v", mode, out, err)
		}
		return module, finished
	}
	if module, finished := run("patch"); module == "" || strings.HasPrefix(module, "eventlet") || finished != 4 {
		t.Errorf("with the launcher's change: lock from %q, %d of 4 threads finished; want a native lock and 4", module, finished)
	}
	module, finished := run("plain")
	t.Logf("without it: lock from %q, %d of 4 threads finished", module, finished)
}
