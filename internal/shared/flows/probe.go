package flows

import (
	"net/netip"
	"time"
)

// MonitorType is how a member is probed.
type MonitorType string

const (
	MonitorTCP        MonitorType = "TCP"
	MonitorHTTP       MonitorType = "HTTP"
	MonitorHTTPS      MonitorType = "HTTPS"
	MonitorTLSHello   MonitorType = "TLS-HELLO"
	MonitorUDPConnect MonitorType = "UDP-CONNECT"
	MonitorPing       MonitorType = "PING"
	// There is no SCTP monitor: the kernels flowlb targets have no socket
	// support for it.
)

// Probe is one monitored member's health check: what the agent probing
// it needs, and the member's node, by which the server picks that agent.
type Probe struct {
	MemberID string
	Address  netip.Addr
	Port     uint16
	Type     MonitorType
	Delay    time.Duration
	Timeout  time.Duration
	// MaxRetries successes mark a member ONLINE, MaxRetriesDown failures
	// ERROR.
	MaxRetries     int
	MaxRetriesDown int
	// The HTTP(S) monitor's request and expected answer; empty for the
	// agent's defaults.
	HTTPMethod    string
	URLPath       string
	ExpectedCodes string
	HTTPVersion   string
	DomainName    string
	// InitialStatus is the member's health as the server knows it (ONLINE,
	// ERROR or empty), so that a member handed to another agent keeps its
	// state.
	InitialStatus string
	// Node is the node the member runs on (its flowlb:node= tag), "" when
	// unknown. It stays on the server: agents are not told.
	Node string
}
