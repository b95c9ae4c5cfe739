package octavia

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// decodeAs decodes body as the route of root, kind and at does, into its
// typed request.
func decodeAs(body []byte, root, kind string, at where) (any, error) {
	for _, c := range decodeCases {
		if c.root == root && c.kind == kind && c.at == at {
			return c.decode(body)
		}
	}
	panic("no route decodes " + root + " as " + kind)
}

func TestDecodeBody(t *testing.T) {
	const uuid = "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"
	for _, tc := range []struct {
		name, root, kind string
		at               where
		body             string
		err              string // "" = accepted
		check            func(t *testing.T, got any)
	}{
		{name: "plain LB", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": {"vip_subnet_id": "` + uuid + `", "name": "a"}}`,
			check: func(t *testing.T, got any) {
				lb := got.(lbaas.LoadBalancerCreate)
				if lb.Name != lbaas.Some("a") || lb.VIPSubnetID != uuid || lb.Description.Set || lb.FullyPopulated() {
					t.Errorf("accepted %+v", lb)
				}
			}},
		{name: "unknown attribute", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": {"bogus": 1}}`,
			err: "Unknown attribute for argument loadbalancer: bogus"},
		{name: "bad UUID", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": {"vip_subnet_id": "nope"}}`,
			err: "Invalid input for field/attribute vip_subnet_id. Value: 'nope'. Value should be UUID format"},
		{name: "bad IP", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": {"vip_address": "300.1.1.1"}}`,
			err: "Value should be IPv4 or IPv6 format"},
		{name: "name too long", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": {"name": "` + strings.Repeat("x", 256) + `"}}`,
			err: "maximum character requirement of 255"},
		{name: "PUT refuses POST-only field", root: "loadbalancer", kind: "loadbalancer", at: update, body: `{"loadbalancer": {"vip_address": "198.19.0.9"}}`,
			err: "Unknown attribute for argument loadbalancer: vip_address"},
		{name: "wrong root", root: "loadbalancer", kind: "loadbalancer", body: `{"listener": {}}`, err: `Missing argument: "loadbalancer"`},
		{name: "not JSON", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": `, err: "Invalid JSON body"},
		{name: "listener mandatory protocol", root: "listener", kind: "listener", body: `{"listener": {"loadbalancer_id": "` + uuid + `", "protocol_port": 80}}`,
			err: "Invalid input for field/attribute protocol. Value: 'Unset'. Mandatory field missing."},
		{name: "listener bad protocol", root: "listener", kind: "listener", body: `{"listener": {"loadbalancer_id": "` + uuid + `", "protocol": "FTP", "protocol_port": 80}}`,
			err: "Value should be one of: HTTP, HTTPS, TCP"},
		{name: "port range", root: "listener", kind: "listener", body: `{"listener": {"loadbalancer_id": "` + uuid + `", "protocol": "TCP", "protocol_port": 65536}}`,
			err: "Value should be lower or equal to 65535"},
		{name: "port wrong type", root: "listener", kind: "listener", body: `{"listener": {"loadbalancer_id": "` + uuid + `", "protocol": "TCP", "protocol_port": true}}`,
			err: "Wrong type"},
		{name: "numeric string as wsme converts it", root: "listener", kind: "listener", at: update, body: `{"listener": {"connection_limit": "5"}}`,
			check: func(t *testing.T, got any) {
				if l := got.(lbaas.ListenerUpdate); l.ConnectionLimit != lbaas.Some(5) {
					t.Errorf("connection_limit %+v", l.ConnectionLimit)
				}
			}},
		{name: "non-numeric string", root: "listener", kind: "listener", at: update, body: `{"listener": {"connection_limit": "five"}}`,
			err: "Wrong type"},
		{name: "bad CIDR", root: "listener", kind: "listener", body: `{"listener": {"loadbalancer_id": "` + uuid + `", "protocol": "TCP", "protocol_port": 80, "allowed_cidrs": ["10.0.0.0/33"]}}`,
			err: "Value should be a valid CIDR."},
		{name: "timeout range", root: "listener", kind: "listener", at: update, body: `{"listener": {"timeout_client_data": -1}}`,
			err: "Value should be greater or equal to 0"},
		{name: "weight 257", root: "member", kind: "member", body: `{"member": {"address": "198.18.17.2", "protocol_port": 80, "weight": 257}}`,
			err: "Value should be lower or equal to 256"},
		{name: "weight 0 is fine", root: "member", kind: "member", body: `{"member": {"address": "198.18.17.2", "protocol_port": 80, "weight": 0}}`,
			check: func(t *testing.T, got any) {
				if m := got.(lbaas.MemberCreate); m.Weight != lbaas.Some(0) {
					t.Errorf("weight %+v", m.Weight)
				}
			}},
		{name: "expected codes pattern", root: "healthmonitor", kind: "healthmonitor", body: `{"healthmonitor": {"pool_id": "` + uuid + `", "type": "HTTP", "delay": 5, "timeout": 3, "max_retries": 3, "expected_codes": "200-"}}`,
			err: "Value should match the pattern"},
		{name: "expected codes list and range", root: "healthmonitor", kind: "healthmonitor", at: update, body: `{"healthmonitor": {"expected_codes": "200, 202"}}`},
		{name: "url path", root: "healthmonitor", kind: "healthmonitor", at: update, body: `{"healthmonitor": {"url_path": "health"}}`,
			err: "Not a valid URLPath: health"},
		{name: "http version as string (gophercloud)", root: "healthmonitor", kind: "healthmonitor", at: update, body: `{"healthmonitor": {"http_version": "1.1"}}`,
			check: func(t *testing.T, got any) {
				if v := got.(lbaas.MonitorUpdate).HTTPVersion; !v.Set || v.Value == nil || *v.Value != 1.1 {
					t.Errorf("http_version %+v", v)
				}
			}},
		{name: "max retries", root: "healthmonitor", kind: "healthmonitor", at: update, body: `{"healthmonitor": {"max_retries": 11}}`,
			err: "Value should be lower or equal to 10"},
		{name: "PUT null clears", root: "pool", kind: "pool", at: update, body: `{"pool": {"session_persistence": null}}`,
			check: func(t *testing.T, got any) {
				if p := got.(lbaas.PoolUpdate); !p.SessionPersistence.Set || p.SessionPersistence.Value != nil || p.Name.Set {
					t.Errorf("explicit null lost: %+v", p)
				}
			}},
		{name: "cookie name pattern", root: "pool", kind: "pool", at: update, body: `{"pool": {"session_persistence": {"type": "APP_COOKIE", "cookie_name": "a b"}}}`,
			err: "cookie_name"},
		{name: "nested unknown attribute", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": {"vip_subnet_id": "` + uuid + `", "pools": [{"name": "p", "members": [{"address": "198.18.17.2", "protocol_port": 80, "pool_id": "x"}]}]}}`,
			err: "Unknown attribute for argument loadbalancer.pools.members: pool_id"},
		{name: "nested pool reference stays minimal", root: "loadbalancer", kind: "loadbalancer", body: `{"loadbalancer": {"vip_subnet_id": "` + uuid + `", "listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "p"}}]}}`,
			check: func(t *testing.T, got any) {
				dp := got.(lbaas.LoadBalancerCreate).Listeners.Value[0].DefaultPool
				if dp == nil || dp.Name != "p" || dp.Def != nil {
					t.Errorf("reference became %+v", dp)
				}
			}},
		{name: "l7 rule value CRLF", root: "rule", kind: "l7rule", body: `{"rule": {"type": "PATH", "compare_type": "EQUAL_TO", "value": "a\r\nb"}}`,
			err: "Value should match the pattern"},
		{name: "quota bounds", root: "quota", kind: "quota", at: update, body: `{"quota": {"listener": -2}}`,
			err: "Value should be greater or equal to -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.at
			if at == 0 {
				at = create
			}
			got, err := decodeAs([]byte(tc.body), tc.root, tc.kind, at)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if tc.check != nil {
					tc.check(t, got)
				}
				return
			}
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Status != 400 || !strings.Contains(fe.Message, tc.err) {
				t.Fatalf("got %v, want 400 containing %q", err, tc.err)
			}
		})
	}
}

func TestBatchMembersValidation(t *testing.T) {
	if _, err := newMembersDecoder[lbaas.MemberCreate]().decode([]byte(`{"members": [{"address": "198.18.17.2", "protocol_port": 80}, {"address": "x", "protocol_port": 80}]}`)); err == nil ||
		!strings.Contains(err.Error(), "IPv4 or IPv6") {
		t.Errorf("bad address in a batch: %v", err)
	}
	got, err := newMembersDecoder[lbaas.MemberCreate]().decode([]byte(`{"members": []}`))
	if err != nil || len(got) != 0 {
		t.Errorf("empty batch: %v %v", got, err)
	}
	// Bodies the fast decoder leaves to encoding/json, and what the
	// validator answers either way.
	for _, tc := range []struct{ body, err, address string }{
		{body: `{"members": [{"address": "198.18.17.2", "address": "198.18.17.3", "protocol_port": 80}]}`, address: "198.18.17.3"},
		{body: `{"members": [{"address": "198.18.17.2", "protocol_port": "80", "weight": "5"}]} `, address: "198.18.17.2"},
		{body: `{"members": [{"address": "198.18.17.2", "protocol_port": 80}]}]`, address: "198.18.17.2"},
		{body: `{"members": [{"address": "198.18.17.2", "protocol_port": 80}]} {}`, err: "Invalid JSON body: trailing data"},
		{body: `{"members": [{"address": "198.18.17.2", "protocol_port": 80}`, err: "Invalid JSON body: unexpected EOF"},
		{body: `{"members": [{"address": "198.18.17.2\u0000", "protocol_port": 80}]}`, err: "Invalid input for field/attribute address. Value: '198.18.17.2\x00'. Value should not contain NUL characters"},
		{body: `{"members": [{"address": "198.18.17.2", "protocol_port": 80, "name": "a\u0000"}]}`, err: "Value should not contain NUL characters"},
		{body: `{"members": [{"address": "198.18.17.2", "protocol_port": 80, "bogus": 1}]}`, err: "Unknown attribute for argument members: bogus"},
		{body: `{"members": [{"address": "198.18.17.2", "protocol_port": 80}], "x": 1}`, err: `Unknown argument: "x"`},
		{body: `{"members": {}}`, err: "Invalid input for field/attribute members. Value: '{}'. Wrong type. Expected 'list'"},
		{body: `{"members": [1]}`, err: "Invalid input for field/attribute members. Value: '1'. Wrong type. Expected 'dict'"},
		{body: `null`, err: `Missing argument: "members"`},
	} {
		got, err := newMembersDecoder[lbaas.MemberCreate]().decode([]byte(tc.body))
		if tc.err != "" {
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Status != 400 || !strings.Contains(fe.Message, tc.err) {
				t.Errorf("%s: got %v, want 400 containing %q", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != 1 || got[0].Address != tc.address || got[0].ProtocolPort != 80 {
			t.Errorf("%s: got %+v, %v", tc.body, got, err)
		}
	}
}

// BenchmarkDecodeMembers: the body of a batch update of 20,000 members,
// read, validated and typed, by the one-pass decoder and by the map
// validator it replaced (legacy_test.go).
func BenchmarkDecodeMembers(b *testing.B) {
	var body strings.Builder
	body.WriteString(`{"members": [`)
	for i := range 20000 {
		if i > 0 {
			body.WriteString(", ")
		}
		fmt.Fprintf(&body, `{"address": "198.18.%d.%d", "protocol_port": 8080}`, 16+i/250, 2+i%250)
	}
	body.WriteString("]}")
	benchmarkDecode(b, []byte(body.String()), len(decodeCases)-1)
}

// BenchmarkDecodeFullLoadBalancer: the body bench/apicreate sends, a load
// balancer with a listener, a pool of 10 members and a health monitor.
func BenchmarkDecodeFullLoadBalancer(b *testing.B) {
	var members []string
	for j := range 10 {
		members = append(members, fmt.Sprintf(`{"address":"198.18.%d.2","protocol_port":8000}`, 16+j))
	}
	body := `{"loadbalancer":{"listeners":[{"default_pool":{"name":"p"},"name":"l","protocol":"TCP","protocol_port":80}],"name":"bench-1",` +
		`"pools":[{"healthmonitor":{"delay":5,"max_retries":3,"timeout":3,"type":"TCP"},"lb_algorithm":"SOURCE_IP_PORT","members":[` +
		strings.Join(members, ",") + `],"name":"p","protocol":"TCP"}],"vip_subnet_id":"8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"}}`
	benchmarkDecode(b, []byte(body), 0)
}

func benchmarkDecode(b *testing.B, body []byte, route int) {
	c := decodeCases[route]
	for _, d := range []struct {
		name   string
		decode func([]byte) (any, error)
	}{{"one-pass", c.decode}, {"map-then-struct", c.legacy}} {
		b.Run(d.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
