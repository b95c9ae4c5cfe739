package noopoctavia

import (
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
