package octavia

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// Wire validation: what Octavia's wsme types accept and refuse, declared
// per object kind close to octavia/api/v2/types/*.py, so that bad input is
// refused with Octavia's messages before the domain sees it. The decoder
// (decode.go) checks every value against its field here while it reads
// the body into the typed request.

type ftype int

const (
	tString ftype = iota
	tInt
	tBool
	tUUID
	tIP
	tCIDRList
	tStringList // tags, tls_versions, ...
	tUUIDList
	tDict // str → str
	tFloatEnum
	tObject     // one nested object of kind `nested`
	tObjectList // a list of nested objects of kind `nested`
	tURL
	tURLPath
)

// where says in which requests a field may appear.
type where uint8

const (
	create          where = 1 << iota // POST of the object itself
	update                            // PUT
	nested                            // inside another object's create
	anywhere        = create | update | nested
	createdOrNested = create | nested
)

type field struct {
	name      string
	t         ftype
	where     where
	mandatory where // mandatory in these requests
	maxLen    int
	min, max  *int64
	enum      []string
	floats    []float64
	nested    string
	pattern   *regexp.Regexp
}

func i64(v int64) *int64 { return &v }

var (
	timeoutMin, timeoutMax = i64(0), i64(24 * 60 * 60 * 1000)
	portMin, portMax       = i64(1), i64(65535)
	reExpectedCodes        = regexp.MustCompile(`^(\d{3}(\s*,\s*\d{3})*)$|^(\d{3}-\d{3})$`)
	reNoCRLF               = regexp.MustCompile(`^[^\r\n]*$`)
	reCookie               = regexp.MustCompile(`^[^\s,;\\]+$`)
	reDomain               = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.?$`)
	listenerProtocols      = []string{"HTTP", "HTTPS", "TCP", "TERMINATED_HTTPS", "UDP", "SCTP", "PROMETHEUS"}
	poolProtocols          = []string{"HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP", "UDP", "SCTP"}
	algorithms             = []string{"ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT"}
	monitorTypes           = []string{"HTTP", "HTTPS", "PING", "TCP", "TLS-HELLO", "UDP-CONNECT", "SCTP"}
	httpMethods            = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "OPTIONS", "PATCH", "CONNECT"}
)

func common(name bool, desc bool) []field {
	f := []field{
		{name: "admin_state_up", t: tBool, where: anywhere},
		{name: "tags", t: tStringList, where: anywhere, maxLen: 255},
		{name: "project_id", t: tString, where: create, maxLen: 36},
		{name: "tenant_id", t: tString, where: create, maxLen: 36},
		// flowlb's extension: the caller names the new object's id
		// (lbaas Tree.takeID; admins only).
		{name: "id", t: tUUID, where: createdOrNested},
	}
	if name {
		f = append(f, field{name: "name", t: tString, where: anywhere, maxLen: 255})
	}
	if desc {
		f = append(f, field{name: "description", t: tString, where: anywhere, maxLen: 255})
	}
	return f
}

func with(base []field, more ...field) []field { return append(append([]field{}, base...), more...) }

var kinds = map[string][]field{
	"loadbalancer": with(common(true, true),
		field{name: "vip_address", t: tIP, where: create},
		field{name: "vip_port_id", t: tUUID, where: create},
		field{name: "vip_subnet_id", t: tUUID, where: create},
		field{name: "vip_network_id", t: tUUID, where: create},
		field{name: "vip_qos_policy_id", t: tUUID, where: create | update},
		field{name: "vip_sg_ids", t: tUUIDList, where: create | update},
		field{name: "additional_vips", t: tObjectList, where: create, nested: "additional_vip"},
		field{name: "listeners", t: tObjectList, where: create, nested: "listener"},
		field{name: "pools", t: tObjectList, where: create, nested: "pool"},
		field{name: "provider", t: tString, where: create, maxLen: 64},
		field{name: "flavor_id", t: tUUID, where: create},
		field{name: "availability_zone", t: tString, where: create, maxLen: 255},
	),
	"additional_vip": {
		{name: "subnet_id", t: tUUID, where: anywhere, mandatory: anywhere},
		{name: "ip_address", t: tIP, where: anywhere},
		{name: "port_id", t: tUUID, where: anywhere},
	},
	"listener": with(common(true, true),
		field{name: "protocol", t: tString, where: createdOrNested, mandatory: createdOrNested, enum: listenerProtocols},
		field{name: "protocol_port", t: tInt, where: createdOrNested, mandatory: createdOrNested, min: portMin, max: portMax},
		field{name: "loadbalancer_id", t: tUUID, where: create, mandatory: create},
		field{name: "connection_limit", t: tInt, where: anywhere, min: i64(-1)},
		field{name: "default_tls_container_ref", t: tString, where: anywhere, maxLen: 255},
		field{name: "sni_container_refs", t: tStringList, where: anywhere, maxLen: 255},
		field{name: "client_ca_tls_container_ref", t: tString, where: anywhere, maxLen: 255},
		field{name: "client_crl_container_ref", t: tString, where: anywhere, maxLen: 255},
		field{name: "client_authentication", t: tString, where: anywhere, enum: []string{"NONE", "OPTIONAL", "MANDATORY"}},
		field{name: "default_pool_id", t: tUUID, where: anywhere},
		field{name: "default_pool", t: tObject, where: createdOrNested, nested: "pool"},
		field{name: "l7policies", t: tObjectList, where: createdOrNested, nested: "l7policy"},
		field{name: "insert_headers", t: tDict, where: anywhere, maxLen: 255},
		field{name: "timeout_client_data", t: tInt, where: anywhere, min: timeoutMin, max: timeoutMax},
		field{name: "timeout_member_connect", t: tInt, where: anywhere, min: timeoutMin, max: timeoutMax},
		field{name: "timeout_member_data", t: tInt, where: anywhere, min: timeoutMin, max: timeoutMax},
		field{name: "timeout_tcp_inspect", t: tInt, where: anywhere, min: timeoutMin, max: timeoutMax},
		field{name: "allowed_cidrs", t: tCIDRList, where: anywhere},
		field{name: "tls_ciphers", t: tString, where: anywhere, maxLen: 2048},
		field{name: "tls_versions", t: tStringList, where: anywhere, maxLen: 32},
		field{name: "alpn_protocols", t: tStringList, where: anywhere, maxLen: 32},
		field{name: "hsts_max_age", t: tInt, where: anywhere, min: i64(0)},
		field{name: "hsts_include_subdomains", t: tBool, where: anywhere},
		field{name: "hsts_preload", t: tBool, where: anywhere},
	),
	"pool": with(common(true, true),
		field{name: "listener_id", t: tUUID, where: create},
		field{name: "loadbalancer_id", t: tUUID, where: create},
		field{name: "protocol", t: tString, where: createdOrNested, mandatory: create, enum: poolProtocols},
		field{name: "lb_algorithm", t: tString, where: anywhere, mandatory: create, enum: algorithms},
		field{name: "session_persistence", t: tObject, where: anywhere, nested: "session_persistence"},
		field{name: "healthmonitor", t: tObject, where: createdOrNested, nested: "healthmonitor"},
		field{name: "members", t: tObjectList, where: createdOrNested, nested: "member"},
		field{name: "tls_enabled", t: tBool, where: anywhere},
		field{name: "tls_container_ref", t: tString, where: anywhere, maxLen: 255},
		field{name: "ca_tls_container_ref", t: tString, where: anywhere, maxLen: 255},
		field{name: "crl_container_ref", t: tString, where: anywhere, maxLen: 255},
		field{name: "tls_ciphers", t: tString, where: anywhere, maxLen: 2048},
		field{name: "tls_versions", t: tStringList, where: anywhere, maxLen: 32},
		field{name: "alpn_protocols", t: tStringList, where: anywhere, maxLen: 32},
	),
	"session_persistence": {
		{name: "type", t: tString, where: anywhere, mandatory: createdOrNested, enum: []string{"SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE"}},
		{name: "cookie_name", t: tString, where: anywhere, maxLen: 255, pattern: reCookie},
		{name: "persistence_timeout", t: tInt, where: anywhere},
		{name: "persistence_granularity", t: tIP, where: anywhere},
	},
	"member": with(common(true, false),
		field{name: "address", t: tIP, where: createdOrNested, mandatory: createdOrNested},
		field{name: "protocol_port", t: tInt, where: createdOrNested, mandatory: createdOrNested, min: portMin, max: portMax},
		field{name: "weight", t: tInt, where: anywhere, min: i64(0), max: i64(256)},
		field{name: "backup", t: tBool, where: anywhere},
		field{name: "subnet_id", t: tUUID, where: createdOrNested},
		field{name: "monitor_port", t: tInt, where: anywhere, min: portMin, max: portMax},
		field{name: "monitor_address", t: tIP, where: anywhere},
		field{name: "request_sriov", t: tBool, where: createdOrNested},
	),
	"healthmonitor": with(common(true, false),
		field{name: "pool_id", t: tUUID, where: create, mandatory: create},
		field{name: "type", t: tString, where: createdOrNested, mandatory: createdOrNested, enum: monitorTypes},
		field{name: "delay", t: tInt, where: anywhere, mandatory: createdOrNested, min: i64(0)},
		field{name: "timeout", t: tInt, where: anywhere, mandatory: createdOrNested, min: i64(0)},
		field{name: "max_retries", t: tInt, where: anywhere, mandatory: createdOrNested, min: i64(1), max: i64(10)},
		field{name: "max_retries_down", t: tInt, where: anywhere, min: i64(1), max: i64(10)},
		field{name: "http_method", t: tString, where: anywhere, enum: httpMethods},
		field{name: "url_path", t: tURLPath, where: anywhere},
		field{name: "expected_codes", t: tString, where: anywhere, pattern: reExpectedCodes},
		field{name: "http_version", t: tFloatEnum, where: anywhere, floats: []float64{1.0, 1.1}},
		field{name: "domain_name", t: tString, where: anywhere, maxLen: 255, pattern: reDomain},
	),
	"l7policy": with(common(true, true),
		field{name: "listener_id", t: tUUID, where: create, mandatory: create},
		field{name: "action", t: tString, where: anywhere, mandatory: createdOrNested, enum: []string{"REJECT", "REDIRECT_TO_URL", "REDIRECT_TO_POOL", "REDIRECT_PREFIX"}},
		field{name: "position", t: tInt, where: anywhere, min: i64(1), max: i64(2147483647)},
		field{name: "redirect_pool_id", t: tUUID, where: create | update},
		field{name: "redirect_pool", t: tObject, where: nested, nested: "pool"},
		field{name: "redirect_url", t: tURL, where: anywhere},
		field{name: "redirect_prefix", t: tURL, where: anywhere},
		field{name: "redirect_http_code", t: tInt, where: anywhere, enum: []string{"301", "302", "303", "307", "308"}},
		field{name: "rules", t: tObjectList, where: createdOrNested, nested: "l7rule"},
	),
	"l7rule": with(common(false, false),
		field{name: "type", t: tString, where: anywhere, mandatory: createdOrNested, enum: []string{"HOST_NAME", "PATH", "FILE_TYPE", "HEADER", "COOKIE", "SSL_CONN_HAS_CERT", "SSL_VERIFY_RESULT", "SSL_DN_FIELD"}},
		field{name: "compare_type", t: tString, where: anywhere, mandatory: createdOrNested, enum: []string{"REGEX", "STARTS_WITH", "ENDS_WITH", "CONTAINS", "EQUAL_TO"}},
		field{name: "key", t: tString, where: anywhere, maxLen: 255, pattern: reNoCRLF},
		field{name: "value", t: tString, where: anywhere, mandatory: createdOrNested, maxLen: 255, pattern: reNoCRLF},
		field{name: "invert", t: tBool, where: anywhere},
	),
	"quota": quotaFields(),
	"flavor": {
		{name: "name", t: tString, where: anywhere, mandatory: create, maxLen: 255},
		{name: "description", t: tString, where: anywhere, maxLen: 255},
		{name: "enabled", t: tBool, where: anywhere},
		{name: "flavor_profile_id", t: tUUID, where: create, mandatory: create},
	},
	"flavorprofile": {
		{name: "name", t: tString, where: anywhere, mandatory: create, maxLen: 255},
		{name: "provider_name", t: tString, where: anywhere, mandatory: create, maxLen: 255},
		{name: "flavor_data", t: tString, where: anywhere, mandatory: create, maxLen: 4096},
	},
	"availability_zone": {
		{name: "name", t: tString, where: create, mandatory: create, maxLen: 255},
		{name: "description", t: tString, where: anywhere, maxLen: 255},
		{name: "enabled", t: tBool, where: anywhere},
		{name: "availability_zone_profile_id", t: tUUID, where: create, mandatory: create},
	},
	"availability_zone_profile": {
		{name: "name", t: tString, where: anywhere, mandatory: create, maxLen: 255},
		{name: "provider_name", t: tString, where: anywhere, mandatory: create, maxLen: 255},
		{name: "availability_zone_data", t: tString, where: anywhere, mandatory: create, maxLen: 4096},
	},
}

func quotaFields() []field {
	var out []field
	for _, n := range []string{"loadbalancer", "load_balancer", "listener", "member", "pool", "healthmonitor", "health_monitor", "l7policy", "l7rule"} {
		out = append(out, field{name: n, t: tInt, where: anywhere, min: i64(-1), max: i64(2000000000)})
	}
	return out
}

func invalid(name string, v any, why string) error {
	return fault.BadRequest("Invalid input for field/attribute %s. Value: '%v'. %s", name, render(v), why)
}

// render shows a value as wsme does in its messages; v is what
// encoding/json decodes a JSON value to (with UseNumber).
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "True"
		}
		return "False"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "str"
	case json.Number:
		return "int"
	case bool:
		return "bool"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return "NoneType"
}

func wrongType(f *field, v any, want string) error {
	return invalid(f.name, v, fmt.Sprintf("Wrong type. Expected '%s', got '%s'", want, typeName(v)))
}

func isUUID(s string) bool {
	// 32 hexadecimal digits, dashes anywhere (wsme's UuidType strips them).
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '-':
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
			digits++
		default:
			return false
		}
	}
	return digits == 32
}

// The checks of one value each get the value as the JSON text had it
// (scalar) and answer the Go value the typed request holds, or the
// refusal in wsme's words.

// checkString validates a string, an enumeration, a URL or a URL path.
func checkString(f *field, s string) error {
	if f.maxLen > 0 && utf8.RuneCountInString(s) > f.maxLen {
		return invalid(f.name, s, fmt.Sprintf("Value should have a maximum character requirement of %d", f.maxLen))
	}
	if f.pattern != nil && !f.pattern.MatchString(s) {
		return invalid(f.name, s, fmt.Sprintf("Value should match the pattern %s", f.pattern))
	}
	if len(f.enum) > 0 && !slices.Contains(f.enum, s) {
		return invalid(f.name, s, "Value should be one of: "+strings.Join(f.enum, ", "))
	}
	switch f.t {
	case tURL:
		if u, err := url.Parse(s); err != nil || u.Scheme == "" || u.Host == "" {
			return invalid(f.name, s, "Value must be a valid URL.")
		}
	case tURLPath:
		if u, err := url.Parse(s); err != nil || !strings.HasPrefix(s, "/") || u.Scheme != "" || u.Host != "" {
			return fault.BadRequest("Not a valid URLPath: %s", s)
		}
	}
	return nil
}

// checkInt validates an integer within the field's bounds and values: a
// JSON number, or a numeric string, which wsme converts (the openstack
// CLI sends some integers, connection_limit and weight, as strings). v is
// the value as given, for the message.
func checkInt(f *field, text string, v any) (int64, error) {
	i, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, wrongType(f, v, "<class 'int'>")
	}
	if f.min != nil && i < *f.min {
		return 0, invalid(f.name, v, fmt.Sprintf("Value should be greater or equal to %d", *f.min))
	}
	if f.max != nil && i > *f.max {
		return 0, invalid(f.name, v, fmt.Sprintf("Value should be lower or equal to %d", *f.max))
	}
	if len(f.enum) > 0 && !slices.Contains(f.enum, text) {
		return 0, invalid(f.name, v, "Value should be one of: "+strings.Join(f.enum, ", "))
	}
	return i, nil
}

// checkFloatEnum validates a number that must be one of the field's
// values; x is the number read, v the value as given.
func checkFloatEnum(f *field, x float64, v any) (float64, error) {
	if slices.Contains(f.floats, x) {
		return x, nil
	}
	return 0, invalid(f.name, v, "Value should be one of: 1.0, 1.1")
}

// checkListItem validates one string of a list of strings, CIDRs or
// UUIDs.
func checkListItem(f *field, s string) error {
	switch f.t {
	case tCIDRList:
		if _, err := netip.ParsePrefix(s); err != nil {
			return invalid(f.name, s, "Value should be a valid CIDR.")
		}
	case tUUIDList:
		if !isUUID(s) {
			return invalid(f.name, s, "Value should be UUID format")
		}
	default:
		if f.maxLen > 0 && utf8.RuneCountInString(s) > f.maxLen {
			return invalid(f.name, s, fmt.Sprintf("Value should have a maximum character requirement of %d", f.maxLen))
		}
	}
	return nil
}

// checkDictValue validates one entry of a string-to-string map; v is the
// value as given (a string or anything else), s the string if it is one.
func checkDictValue(f *field, key string, v any, isString bool, s string) error {
	if !isString || len(s) > f.maxLen {
		return invalid(f.name+"."+key, v, "Value should be a string of at most 255 characters")
	}
	return nil
}
