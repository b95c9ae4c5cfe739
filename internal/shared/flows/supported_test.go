package flows

import "testing"

func TestParseSupported(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  func(string) (string, bool)
		in   string
		ok   bool
	}{
		{"protocol TCP", wrap(ParseProtocol), "TCP", true},
		{"protocol UDP", wrap(ParseProtocol), "UDP", true},
		{"protocol SCTP", wrap(ParseProtocol), "SCTP", true},
		{"protocol HTTP", wrap(ParseProtocol), "HTTP", false},
		{"protocol lower case", wrap(ParseProtocol), "tcp", false},
		{"protocol empty", wrap(ParseProtocol), "", false},
		{"algorithm ROUND_ROBIN", wrap(ParseAlgorithm), "ROUND_ROBIN", true},
		{"algorithm SOURCE_IP", wrap(ParseAlgorithm), "SOURCE_IP", true},
		{"algorithm SOURCE_IP_PORT", wrap(ParseAlgorithm), "SOURCE_IP_PORT", true},
		{"algorithm LEAST_CONNECTIONS", wrap(ParseAlgorithm), "LEAST_CONNECTIONS", false},
		{"monitor TCP", wrap(ParseMonitorType), "TCP", true},
		{"monitor HTTP", wrap(ParseMonitorType), "HTTP", true},
		{"monitor HTTPS", wrap(ParseMonitorType), "HTTPS", true},
		{"monitor TLS-HELLO", wrap(ParseMonitorType), "TLS-HELLO", true},
		{"monitor UDP-CONNECT", wrap(ParseMonitorType), "UDP-CONNECT", true},
		{"monitor PING", wrap(ParseMonitorType), "PING", true},
		{"monitor SCTP", wrap(ParseMonitorType), "SCTP", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.got(tc.in)
			if ok != tc.ok || (ok && got != tc.in) || (!ok && got != "") {
				t.Errorf("parse %q = %q, %v; want ok %v", tc.in, got, ok, tc.ok)
			}
		})
	}
	if len(Protocols()) != 3 || len(Algorithms()) != 3 || len(MonitorTypes()) != 6 {
		t.Errorf("lists %v %v %v", Protocols(), Algorithms(), MonitorTypes())
	}
	if p, ok := ParseProtocol("HTTPS"); !ok || p != TCP {
		t.Errorf("HTTPS (passed through) = %q, %v; want TCP", p, ok)
	}
	Protocols()[0] = "changed"
	if _, ok := ParseProtocol("TCP"); !ok {
		t.Error("a caller changed the supported list")
	}
}

func wrap[T ~string](parse func(string) (T, bool)) func(string) (string, bool) {
	return func(s string) (string, bool) {
		v, ok := parse(s)
		return string(v), ok
	}
}

func TestWeightEntries(t *testing.T) {
	for _, tc := range []struct {
		weights          []int
		divisor, entries int
	}{
		{[]int{1, 1}, 1, 2},
		{[]int{3, 1}, 1, 4},
		{[]int{2, 4, 6}, 2, 6},
		{[]int{0, 5}, 1, 6}, // 0 counts as 1
		{[]int{10, 10, 10}, 10, 3},
		{[]int{1, 100}, 1, 101},
		{[]int{256}, 256, 1},
		{nil, 0, 0},
	} {
		if d, n := WeightDivisor(tc.weights), WeightEntries(tc.weights); d != tc.divisor || n != tc.entries {
			t.Errorf("%v: divisor %d, entries %d; want %d, %d", tc.weights, d, n, tc.divisor, tc.entries)
		}
	}
}
