package octavia

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// decodeCase is one route's decoding: the one-pass decoder, and the map
// validator it replaced (legacy_test.go) as the oracle.
type decodeCase struct {
	root, kind     string
	at             where
	plan           *plan
	decode, legacy func(body []byte) (any, error)
}

func caseOf[T any](root, kind string, at where) decodeCase {
	rd := newRequestDecoder[T](root, kind, at)
	return decodeCase{root: root, kind: kind, at: at, plan: rd.plan,
		decode: func(body []byte) (any, error) { return rd.decode(body) },
		legacy: func(body []byte) (any, error) {
			m, err := legacyValidateBody(body, root, kind, at)
			if err != nil {
				return nil, err
			}
			return legacyTyped[T](m)
		}}
}

// decodeCases are the bodies the routes decode; the batch member update
// is the last.
var decodeCases = []decodeCase{
	caseOf[lbaas.LoadBalancerCreate]("loadbalancer", "loadbalancer", create),
	caseOf[lbaas.LoadBalancerUpdate]("loadbalancer", "loadbalancer", update),
	caseOf[lbaas.ListenerCreate]("listener", "listener", create),
	caseOf[lbaas.ListenerUpdate]("listener", "listener", update),
	caseOf[lbaas.PoolCreate]("pool", "pool", create),
	caseOf[lbaas.PoolUpdate]("pool", "pool", update),
	caseOf[lbaas.MemberCreate]("member", "member", create),
	caseOf[lbaas.MemberUpdate]("member", "member", update),
	caseOf[lbaas.MonitorCreate]("healthmonitor", "healthmonitor", create),
	caseOf[lbaas.MonitorUpdate]("healthmonitor", "healthmonitor", update),
	caseOf[lbaas.L7PolicyCreate]("l7policy", "l7policy", create),
	caseOf[lbaas.L7PolicyUpdate]("l7policy", "l7policy", update),
	caseOf[lbaas.L7RuleCreate]("rule", "l7rule", create),
	caseOf[lbaas.L7RuleUpdate]("rule", "l7rule", update),
	caseOf[quotaRequest]("quota", "quota", update),
	caseOf[lbaas.FlavorCreate]("flavor", "flavor", create),
	caseOf[lbaas.FlavorUpdate]("flavor", "flavor", update),
	caseOf[lbaas.FlavorProfileRequest]("flavorprofile", "flavorprofile", create),
	caseOf[lbaas.FlavorProfileRequest]("flavorprofile", "flavorprofile", update),
	caseOf[lbaas.AZCreate]("availability_zone", "availability_zone", create),
	caseOf[lbaas.AZUpdate]("availability_zone", "availability_zone", update),
	caseOf[lbaas.AZProfileRequest]("availability_zone_profile", "availability_zone_profile", create),
	caseOf[lbaas.AZProfileRequest]("availability_zone_profile", "availability_zone_profile", update),
	func() decodeCase {
		md := newMembersDecoder[lbaas.MemberCreate]()
		return decodeCase{root: "members", kind: "member", at: create, plan: md.plan,
			decode: func(body []byte) (any, error) { return md.decode(body) },
			legacy: func(body []byte) (any, error) { return legacyDecodeMembers[lbaas.MemberCreate](body) }}
	}(),
}

// sameDecoding wants the decoder's answer to body to be the oracle's:
// the same typed request (nil and empty lists told apart), or the same
// refusal, status and words.
func sameDecoding(t *testing.T, c decodeCase, body []byte) {
	t.Helper()
	got, err := c.decode(body)
	want, wantErr := c.legacy(body)
	var fe, wantFE *fault.Error
	switch {
	case err == nil && wantErr == nil:
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %q:\ndecoded %#v\nbefore  %#v", c.root, body, got, want)
		}
	case !errors.As(err, &fe) || !errors.As(wantErr, &wantFE):
		t.Errorf("%s %q: error %v, before %v", c.root, body, err, wantErr)
	case *fe != *wantFE:
		t.Errorf("%s %q:\nrefused %d %q\nbefore  %d %q", c.root, body, fe.Status, fe.Message, wantFE.Status, wantFE.Message)
	}
}

// objects are request objects, each sent under every route's root key.
var objects = []string{
	// Every field of every kind, valid.
	`{"name": "lb", "description": "d", "admin_state_up": false, "tags": ["a", "b"], "project_id": "p", "tenant_id": "t",
	  "vip_address": "198.19.0.5", "vip_port_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "vip_subnet_id": "8a4e6b3e7f3c4a7e9bc94d3b6c2d7e11",
	  "vip_network_id": "8A4E6B3E-7F3C-4A7E-9BC9-4D3B6C2D7E11", "vip_qos_policy_id": null, "vip_sg_ids": [], "provider": "flow",
	  "flavor_id": null, "availability_zone": "az", "additional_vips": [{"subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e12", "ip_address": "2001:2::1"}],
	  "listeners": [{"protocol": "HTTP", "protocol_port": "80", "connection_limit": -1, "insert_headers": {"X-Forwarded-For": "true", "X-Forwarded-Port": "true"},
	    "allowed_cidrs": ["198.18.0.0/15", "2001:2::/48"], "timeout_client_data": 0, "tls_versions": [], "hsts_max_age": 5, "hsts_preload": true,
	    "default_pool": {"name": "p"},
	    "l7policies": [{"action": "REDIRECT_TO_POOL", "position": 2, "redirect_pool": {"name": "q", "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN"},
	      "rules": [{"type": "PATH", "compare_type": "STARTS_WITH", "value": "/a", "invert": false, "key": null}]},
	      {"action": "REDIRECT_TO_URL", "redirect_url": "http://a.test/", "redirect_http_code": 301}]}],
	  "pools": [{"name": "p", "protocol": "TCP", "lb_algorithm": "SOURCE_IP", "session_persistence": {"type": "APP_COOKIE", "cookie_name": "c", "persistence_timeout": 5},
	    "tls_enabled": false, "tls_container_ref": null, "alpn_protocols": ["h2"],
	    "members": [{"address": "198.18.17.2", "protocol_port": 8080, "weight": "5", "backup": true, "monitor_port": 81, "monitor_address": "198.18.17.3",
	      "subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e13", "request_sriov": false, "name": "m", "tags": null}],
	    "healthmonitor": {"type": "HTTP", "delay": 5, "timeout": 3, "max_retries": 3, "max_retries_down": 2, "http_method": "GET", "url_path": "/h",
	      "expected_codes": "200-204", "http_version": 1.1, "domain_name": "a.example"}}]}`,
	`{"loadbalancer_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "listener_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "pool_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11",
	  "protocol": "TCP", "protocol_port": 80, "lb_algorithm": "ROUND_ROBIN", "address": "198.18.17.2", "type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1,
	  "action": "REJECT", "compare_type": "EQUAL_TO", "value": "v", "name": "n", "enabled": true, "flavor_profile_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11",
	  "provider_name": "flow", "flavor_data": "{}", "availability_zone_profile_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "availability_zone_data": "{}"}`,
	`{"protocol": "UDP", "protocol_port": 53}`,
	`{"name": null, "description": null, "admin_state_up": null, "tags": null, "connection_limit": null, "session_persistence": null, "weight": null, "http_version": null}`,
	`{"loadbalancer": 5, "load_balancer": "6", "listener": -1, "member": null, "pool": 2000000000, "healthmonitor": 1, "health_monitor": 2, "l7policy": 3, "l7rule": 4}`,
	`{"loadbalancer": -2}`,
	`{"listener": 2000000001}`,
	`{}`,
	// Unknown attributes, sorted and named once; they come before any
	// other refusal.
	`{"zz": 1, "aa": 2, "zz": 3, "name": 5}`,
	`{"Name": "x"}`,
	// Wrong types, for each kind of field.
	`{"name": 5}`, `{"name": 1.5e3}`, `{"name": true}`, `{"name": ["x"]}`, `{"name": {"a": [1, "<&>"]}}`,
	`{"admin_state_up": "true"}`, `{"admin_state_up": 1}`, `{"admin_state_up": {}}`,
	`{"protocol_port": "80"}`, `{"protocol_port": " 80 "}`, `{"protocol_port": "+80"}`, `{"protocol_port": "0x50"}`, `{"protocol_port": 8e1}`,
	`{"protocol_port": 80.0}`, `{"protocol_port": -0}`, `{"protocol_port": 0}`, `{"protocol_port": 65536}`, `{"protocol_port": 99999999999999999999}`,
	`{"protocol_port": []}`, `{"protocol_port": false}`, `{"connection_limit": "  -1"}`, `{"weight": "257"}`, `{"weight": 256}`,
	`{"redirect_http_code": 302}`, `{"redirect_http_code": "0302"}`, `{"redirect_http_code": 304}`, `{"position": 0}`,
	`{"http_version": "1.1abc"}`, `{"http_version": "1"}`, `{"http_version": 1}`, `{"http_version": 1e400}`, `{"http_version": "x"}`, `{"http_version": [1.1]}`,
	`{"http_version": 2}`, `{"vip_subnet_id": 5}`, `{"vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e1"}`, `{"vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e1g"}`,
	`{"vip_subnet_id": "--8a4e6b3e7f3c4a7e9bc94d3b6c2d7e11--"}`, `{"vip_subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e1é"}`,
	`{"vip_address": "300.1.1.1"}`, `{"vip_address": null}`, `{"vip_address": ["198.18.0.1"]}`, `{"address": "fe80::1%eth0"}`,
	`{"tags": "a"}`, `{"tags": ["a", 1, "b"]}`, `{"tags": ["a", null]}`, `{"tags": [["a"]]}`, `{"tags": ["` + strings.Repeat("é", 256) + `", 1]}`,
	`{"tags": ["` + strings.Repeat("é", 255) + `"]}`, `{"allowed_cidrs": ["198.18.0.0/33", 5]}`, `{"allowed_cidrs": [5, "198.18.0.0/33"]}`,
	`{"allowed_cidrs": ["198.18.0.1"]}`, `{"vip_sg_ids": ["x"]}`, `{"vip_sg_ids": ["8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11"]}`,
	`{"insert_headers": "a"}`, `{"insert_headers": {"b": 1, "a": "` + strings.Repeat("x", 256) + `"}}`, `{"insert_headers": {"a": 1, "a": "ok"}}`,
	`{"insert_headers": {"a": "ok", "a": null}}`, `{"insert_headers": {"a": {"x": 1}}}`, `{"insert_headers": {}}`,
	`{"session_persistence": []}`, `{"session_persistence": {"type": "SOURCE_IP", "cookie_name": "a b"}}`, `{"session_persistence": {"cookie_name": "c"}}`,
	`{"session_persistence": {"type": null}}`, `{"session_persistence": {"type": "HTTP_COOKIE", "persistence_granularity": "255.255.255.0", "x": 1}}`,
	`{"url_path": "health"}`, `{"url_path": "http://a/"}`, `{"url_path": "/a b"}`, `{"redirect_url": "/x"}`, `{"redirect_prefix": "https://a.test"}`,
	`{"expected_codes": "200, 202"}`, `{"expected_codes": "200-"}`, `{"domain_name": "-a.example"}`, `{"value": "a\r\nb"}`, `{"key": "a\nb"}`,
	`{"cookie_name": ";"}`, `{"protocol": "FTP"}`, `{"protocol": "tcp"}`, `{"lb_algorithm": null}`, `{"type": "PING", "delay": -1}`,
	// Mandatory fields: missing, null, and which comes first.
	`{"protocol": null, "protocol_port": 80}`, `{"protocol_port": 80, "loadbalancer_id": null}`, `{"address": "x", "protocol_port": "y"}`,
	// Repeated attributes: the last counts.
	`{"name": 5, "name": "ok"}`, `{"name": "ok", "name": 5}`, `{"name": "a", "name": null}`, `{"tags": ["a"], "tags": null}`,
	`{"listeners": [{"protocol": "TCP", "protocol_port": 80}], "listeners": [{"protocol": "TCP", "protocol_port": 81}]}`,
	`{"listeners": [{"protocol": "TCP"}], "listeners": []}`,
	// Nested objects and lists of them.
	`{"listeners": {}}`, `{"listeners": [1, {"protocol": "X"}]}`, `{"listeners": [{"protocol": "X"}, 1]}`, `{"listeners": [null]}`,
	`{"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "p", "members": null}}]}`,
	`{"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"protocol": "TCP"}}]}`,
	`{"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {}}]}`,
	`{"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": "p"}]}`,
	`{"listeners": [{"protocol": "TCP", "protocol_port": 80, "default_pool": {"name": "p", "bogus": 1, "members": [{"pool_id": 1}]}}]}`,
	`{"pools": [{"name": "p", "members": [{"address": "198.18.17.2", "protocol_port": 80, "pool_id": "x"}]}]}`,
	`{"pools": [{"members": [{"address": "198.18.17.2"}], "lb_algorithm": "X"}]}`,
	`{"pools": [{"healthmonitor": {"type": "TCP", "delay": 1, "timeout": 1}, "protocol": "TCP"}]}`,
	`{"pools": [{"healthmonitor": null, "members": [], "session_persistence": {"type": "SOURCE_IP"}}]}`,
	`{"additional_vips": [{"ip_address": "198.19.0.1"}]}`, `{"additional_vips": [{"subnet_id": "8a4e6b3e-7f3c-4a7e-9bc9-4d3b6c2d7e11", "port_id": null}]}`,
	`{"l7policies": [{"action": "REJECT", "rules": [{"type": "HOST_NAME", "compare_type": "REGEX", "value": "a", "tenant_id": "x"}]}], "protocol": "HTTP", "protocol_port": 1}`,
	`{"rules": [{"type": "PATH"}], "action": "REJECT"}`,
	// NUL characters, escaped as JSON must.
	`{"name": "a\u0000"}`, `{"tags": ["x", "a\u0000"], "name": "b\u0000"}`, `{"a\u0000": 1}`, `{"name": "a\\u0000"}`,
	`{"insert_headers": {"k\u0000": "v"}}`, `{"pools": [{"members": [{"name": "\u0000"}]}]}`,
	// What encoding/json takes and the tokenizer refuses.
	`{"name": "a\ud800b"}`, `{"name": "\udc00\ud800"}`, `{"tags": ["\ud83d\ude00", "\ud83d"]}`, "{\"name\": \"a\xffb\"}",
	`{"description": "` + strings.Repeat("x", 256) + `"}`,
	`{"unknown": ` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"unknown": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
}

// bodies are whole bodies, each sent to every route.
var bodies = []string{
	``, ` `, `null`, `null]`, `null x`, `[1]`, `"x"`, `5`, `true`, `{`, `{"a"`, `{"a":}`, `{"a" 1}`, `{"a": 1,}`, `{"a": [1,]}`, `{"a": 01}`, `{"a": tru}`,
	`{} {}`, `{}]`, `{}}`, `{} x`, `{}x`, "{}\n\t ]xyz", `{"loadbalancer": {}} 5`, `{"loadbalancer": {"name": 5}} {`,
	`{"x": 1}`, `{"x": 1, "b": 2, "loadbalancer": {"name": "a"}, "listener": {}}`, `{"loadbalancer": null}`, `{"loadbalancer": [1]}`,
	`{"loadbalancer": "x", "loadbalancer": {"name": "a"}}`, `{"loadbalancer": {"name": "a"}, "loadbalancer": 5}`,
	`{"members": {}}`, `{"members": [1, {"address": "x"}]}`, `{"members": [{"address": "x"}, 1]}`, `{"members": []}`, `{"members": null}`,
	`{"members": [{"address": "198.18.17.2", "protocol_port": 80}], "members": [{"address": "198.18.17.3", "protocol_port": 80}]}`,
	"\ufeff{}", `{"loadbalancer": {"name": "a"}}` + "\x00",
}

// inputs are every body for c: each object under c's root key (as the
// batch update's only member), and the whole bodies.
func inputs(c decodeCase) [][]byte {
	var out [][]byte
	for _, o := range objects {
		if c.root == "members" {
			o = "[" + o + "]"
		}
		out = append(out, []byte(fmt.Sprintf(`{"%s": %s}`, c.root, o)))
	}
	for _, b := range bodies {
		out = append(out, []byte(b))
	}
	return out
}

// TestDecodeAsBefore: for every route, the decoder answers the bodies
// above (valid and refused, every kind of field and refusal, repeated
// names, NUL characters, what only encoding/json takes) as the map
// validator did.
func TestDecodeAsBefore(t *testing.T) {
	for _, c := range decodeCases {
		for _, body := range inputs(c) {
			sameDecoding(t, c, body)
		}
	}
}

// FuzzDecode: whatever the body, every route's decoder answers it as the
// map validator it replaced did, typed request or refusal. It stands
// where FuzzObject held jsondoc.Object, the map decoder's fast path, to
// encoding/json.
func FuzzDecode(f *testing.F) {
	// Every input for the fully populated create, and each once for one
	// of the other routes (TestDecodeAsBefore sends all to all).
	for i, c := range decodeCases {
		for j, body := range inputs(c) {
			if i == 0 || j%len(decodeCases) == i {
				f.Add(uint8(i), body)
			}
		}
	}
	for _, r := range bodyRoutes {
		f.Add(uint8(0), []byte(r.seed))
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		sameDecoding(t, decodeCases[int(route)%len(decodeCases)], body)
	})
}

// TestPlansBindEveryField: a plan is made for each route when the
// server starts (New would panic); each binds every field the wire type
// accepts to a Go field, and a struct that lacks one is refused.
func TestPlansBindEveryField(t *testing.T) {
	for _, c := range decodeCases {
		for _, f := range kinds[c.kind] {
			if _, ok := c.plan.byName[f.name]; ok != (f.where&c.at != 0) {
				t.Errorf("%s at %d: field %s bound %v", c.kind, c.at, f.name, ok)
			}
		}
	}
	if _, err := makePlan(reflect.TypeFor[struct {
		Name string `json:"name"`
	}](), "listener", update); err == nil || !strings.Contains(err.Error(), "no field for admin_state_up") {
		t.Errorf("a struct of only a name made a listener plan: %v", err)
	}
	if _, err := makePlan(reflect.TypeFor[lbaas.PoolUpdate](), "listener", update); err == nil {
		t.Error("a pool's update made a listener plan")
	}
	if _, err := makePlan(reflect.TypeFor[struct {
		Port string `json:"protocol_port"`
	}](), "quota", update); err == nil {
		t.Error("quota limits bound to a struct of no fitting field")
	}
}
