package neutron

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/flowlb/flowlb/internal/server/httpedge"
	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// decodeBody reads {"<singular>": {...}} and checks the attribute names.
func decodeBody(req *http.Request, singular string, allowed map[string]bool) (map[string]json.RawMessage, error) {
	b, err := httpedge.ReadBody(req)
	if err != nil {
		return nil, fmt.Errorf("read %s body: %w", singular, err)
	}
	if err := httpedge.CheckUTF8(b); err != nil {
		return nil, err
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, refuse(KindInvalid, "HTTPBadRequest", "Malformed request body: %v", err)
	}
	raw, ok := env[singular]
	if !ok || len(env) != 1 {
		return nil, refuse(KindInvalid, "HTTPBadRequest", "Resource body required: expected a single '%s' object.", singular)
	}
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &attrs); err != nil || attrs == nil {
		return nil, refuse(KindInvalid, "HTTPBadRequest", "Malformed request body: '%s' must be an object.", singular)
	}
	var unknown []string
	for k := range attrs {
		if !allowed[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, refuse(KindInvalid, "HTTPBadRequest", "Unrecognized attribute(s) '%s'", strings.Join(unknown, ", "))
	}
	// NUL never reaches the database (PostgreSQL refuses it in text).
	var tree any
	_ = json.Unmarshal(raw, &tree)
	if attr, _, found := httpedge.FindNUL(tree); found {
		return nil, badAttr(attr, "the value contains a NUL character")
	}
	return attrs, nil
}

// decodeInto fills dst from the validated attributes.
func decodeInto(attrs map[string]json.RawMessage, dst any) error {
	b, _ := json.Marshal(attrs)
	if err := json.Unmarshal(b, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badAttr(te.Field, "'%s' is not a valid %s", te.Value, te.Type)
		}
		return refuse(KindInvalid, "HTTPBadRequest", "Malformed request body: %v", err)
	}
	return nil
}

func set(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

var createAttrs = map[store.Kind]map[string]bool{
	store.KindNetwork: set("name", "description", "admin_state_up", "shared", "router:external", "project_id", "tenant_id",
		"mtu", "port_security_enabled", "tags", "availability_zone_hints"),
	store.KindSubnet: set("name", "description", "network_id", "cidr", "ip_version", "gateway_ip", "allocation_pools",
		"enable_dhcp", "dns_nameservers", "host_routes", "ipv6_address_mode", "ipv6_ra_mode", "project_id", "tenant_id",
		"tags", "service_types"),
	store.KindPort: set("name", "description", "network_id", "fixed_ips", "admin_state_up", "device_id", "device_owner",
		"project_id", "tenant_id", "mac_address", "security_groups", "allowed_address_pairs", "binding:vnic_type",
		"port_security_enabled", "tags"),
}

// projectOf resolves project_id/tenant_id of a create: only an admin may
// create for another project.
func projectOf(c identity.Caller, singular string, attrs map[string]json.RawMessage) (string, error) {
	var p string
	for _, k := range []string{"project_id", "tenant_id"} {
		if raw, ok := attrs[k]; ok {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", badAttr(k, "must be a string")
			}
			if p != "" && s != p {
				return "", invalidInput("project_id and tenant_id do not match")
			}
			p = s
		}
	}
	if p == "" {
		p = c.ProjectID
	}
	if p != c.ProjectID && !c.IsAdmin {
		return "", policyDenied("create_" + singular + ":project_id")
	}
	return p, nil
}
