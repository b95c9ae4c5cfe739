package flows

import "slices"

// What the flow data plane supports, listed once: the compiler keeps only
// these, and the flow provider refuses the rest. Octavia's own, longer
// lists are in internal/server/octavia.

// ProviderName is the name the API gives the provider that realizes load
// balancers as these flows: what a client (the kube-controller) compares
// a load balancer's provider with.
const ProviderName = "flow"

var (
	protocols    = []Protocol{TCP, UDP, SCTP}
	algorithms   = []Algorithm{RoundRobin, SourceIP, SourceIPPort}
	monitorTypes = []MonitorType{MonitorTCP, MonitorHTTP, MonitorHTTPS, MonitorTLSHello, MonitorUDPConnect, MonitorPing}
)

// Protocols are the L4 protocols a flow can match.
func Protocols() []Protocol { return slices.Clone(protocols) }

// ParseProtocol returns the flow protocol of an Octavia listener or pool
// protocol, and whether a flow can carry it. HTTPS is TLS passed through
// to the members, a TCP flow, as the amphora serves it (in TCP mode).
func ParseProtocol(name string) (Protocol, bool) {
	if name == "HTTPS" {
		return TCP, true
	}
	return parse(protocols, name)
}

// Algorithms are the pool algorithms the data plane implements.
func Algorithms() []Algorithm { return slices.Clone(algorithms) }

// ParseAlgorithm returns the algorithm of an Octavia lb_algorithm, and
// whether the data plane implements it.
func ParseAlgorithm(name string) (Algorithm, bool) { return parse(algorithms, name) }

// MonitorTypes are the health monitor types the agents can probe.
func MonitorTypes() []MonitorType { return slices.Clone(monitorTypes) }

// ParseMonitorType returns the monitor type of an Octavia health monitor
// type, and whether the agents can probe it.
func ParseMonitorType(name string) (MonitorType, bool) { return parse(monitorTypes, name) }

func parse[T ~string](supported []T, name string) (T, bool) {
	if t := T(name); slices.Contains(supported, t) {
		return t, true
	}
	return "", false
}

// MaxWeightEntries bounds the entries a data plane without weights may
// write for one VIP's backends (OVN's: a backend of weight w, divided by
// the weights' greatest common divisor, is written w times).
const MaxWeightEntries = 64

// WeightDivisor is the greatest common divisor of the weights, each 0
// counted as 1.
func WeightDivisor(weights []int) int {
	g := 0
	for _, w := range weights {
		for b := max(w, 1); b != 0; {
			g, b = b, g%b
		}
	}
	return g
}

// WeightEntries is how many backend entries the weights need written as
// repetitions: the sum of each weight (0 counted as 1) over
// WeightDivisor. For any subset of the weights it is at most the whole
// set's, since the subset's divisor is a multiple of the set's.
func WeightEntries(weights []int) int {
	g := WeightDivisor(weights)
	n := 0
	for _, w := range weights {
		n += max(w, 1) / g
	}
	return n
}
