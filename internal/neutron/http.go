package neutron

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/flowlb/flowlb/internal/identity"
	"github.com/flowlb/flowlb/internal/store"
)

// handler serves networks, subnets and ports (and an always-empty QoS
// policy collection) in Neutron's wire format.
type handler struct {
	st  store.Store
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the Neutron subset. It accepts paths with or without
// the /v2.0 (or /v2) prefix and a ".json" suffix, so it can be mounted as
// is or behind http.StripPrefix. The caller comes from identity.FromContext.
func NewHandler(s store.Store, logger *slog.Logger) http.Handler {
	h := &handler{st: s, log: logger, mux: http.NewServeMux()}
	for _, r := range resources {
		h.mux.HandleFunc("GET /"+r.plural, h.list(r))
		h.mux.HandleFunc("GET /"+r.plural+"/{id}", h.show(r))
		h.mux.HandleFunc("POST /"+r.plural, h.create(r))
		h.mux.HandleFunc("PUT /"+r.plural+"/{id}", h.update(r))
		h.mux.HandleFunc("DELETE /"+r.plural+"/{id}", h.delete(r))
	}
	// QoS policies are not supported. An empty list and a 404 make the
	// CLI's --vip-qos-policy-id lookup fail on the client with "not
	// found" before it sends the load balancer create.
	h.mux.HandleFunc("GET /qos/policies", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"policies": []any{}})
	})
	h.mux.HandleFunc("GET /qos/policies/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, nil, newErr(http.StatusNotFound, "QosPolicyNotFound", "QoS policy %s could not be found.", r.PathValue("id")))
	})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, nil, newErr(http.StatusNotFound, "HTTPNotFound", "The resource could not be found."))
	})
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	for _, prefix := range []string{"/v2.0/", "/v2/"} {
		if strings.HasPrefix(p, prefix) {
			p = p[len(prefix)-1:]
			break
		}
	}
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/"), ".json")
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = p, ""
	r2.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	h.mux.ServeHTTP(w, r2)
}

func caller(r *http.Request) identity.Caller {
	c, _ := identity.FromContext(r.Context())
	return c
}

// resource describes one collection. Documents are rendered to maps, which
// is what filters and fields= work on.
type resource struct {
	kind             store.Kind
	singular, plural string
	notFound         func(id string) *apiError
	// attrs are the attribute names of the API object, for filter checks.
	attrs map[string]bool
}

var (
	networks  = &resource{kind: store.KindNetwork, singular: "network", plural: "networks", notFound: networkNotFound, attrs: keysOf(Network{})}
	subnets   = &resource{kind: store.KindSubnet, singular: "subnet", plural: "subnets", notFound: subnetNotFound, attrs: keysOf(Subnet{})}
	ports     = &resource{kind: store.KindPort, singular: "port", plural: "ports", notFound: portNotFound, attrs: keysOf(Port{})}
	resources = []*resource{networks, subnets, ports}
)

func keysOf(v any) map[string]bool {
	m, err := toMap(v)
	if err != nil {
		panic(err)
	}
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	err = d.Decode(&m)
	return m, err
}

// view is what one request may see: all for an admin; otherwise its own
// objects, plus shared and external networks and their subnets.
type view struct {
	tx   store.ReadTx
	c    identity.Caller
	nets map[string]Network
}

func (v *view) network(id string) (Network, bool) {
	if n, ok := v.nets[id]; ok {
		return n, true
	}
	n, err := getNetwork(v.tx, id)
	if err != nil {
		return Network{}, false
	}
	v.nets[id] = n
	return n, true
}

func (v *view) netVisible(n Network) bool {
	return v.c.IsAdmin || n.ProjectID == v.c.ProjectID || n.Shared || n.RouterExternal
}

// owns reports whether the caller may change an object of project.
func (v *view) owns(project string) bool { return v.c.IsAdmin || project == v.c.ProjectID }

// object decodes a record into its API object if the caller may see it.
func (v *view) object(r *resource, rec store.Record) (any, string, bool, error) {
	switch r.kind {
	case store.KindNetwork:
		var n Network
		if err := json.Unmarshal(rec.Data, &n); err != nil {
			return nil, "", false, err
		}
		v.nets[n.ID] = n
		return n, n.ProjectID, v.netVisible(n), nil
	case store.KindSubnet:
		if rec.ProjectID == ipamProject {
			return nil, "", false, nil
		}
		d, err := decodeSubnet(rec)
		if err != nil {
			return nil, "", false, err
		}
		if v.owns(d.ProjectID) {
			return d.Subnet, d.ProjectID, true, nil
		}
		n, ok := v.network(d.NetworkID)
		return d.Subnet, d.ProjectID, ok && v.netVisible(n), nil
	default:
		var d portDoc
		if err := json.Unmarshal(rec.Data, &d); err != nil {
			return nil, "", false, err
		}
		return d.Port, d.ProjectID, v.owns(d.ProjectID), nil
	}
}

func (v *view) get(r *resource, id string) (any, string, error) {
	rec, err := v.tx.Get(r.kind, id)
	if isNotFound(err) {
		return nil, "", r.notFound(id)
	}
	if err != nil {
		return nil, "", err
	}
	obj, project, ok, err := v.object(r, rec)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "", r.notFound(id)
	}
	return obj, project, nil
}

// Query parameters that are not attribute filters.
var nonFilters = map[string]bool{"fields": true, "limit": true, "marker": true, "sort_key": true, "sort_dir": true, "page_reverse": true}

func (h *handler) list(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		for k := range q {
			if !nonFilters[k] && !r.attrs[k] {
				writeErr(w, h.log, newErr(http.StatusBadRequest, "HTTPBadRequest", "%s is invalid attribute for filtering", k))
				return
			}
		}
		var out []map[string]any
		err := h.st.View(req.Context(), func(tx store.ReadTx) error {
			out = out[:0]
			v := &view{tx: tx, c: caller(req), nets: map[string]Network{}}
			var objs []any
			if ids := q["id"]; len(ids) > 0 {
				// The CLI resolves by ?id=, so look those up by key.
				for _, id := range ids {
					obj, _, err := v.get(r, id)
					var ae *apiError
					if errors.As(err, &ae) {
						continue
					}
					if err != nil {
						return err
					}
					objs = append(objs, obj)
				}
			} else {
				f := store.Filter{}
				if r.kind == store.KindPort && !v.c.IsAdmin {
					f.ProjectID = v.c.ProjectID
				}
				recs, err := tx.List(r.kind, f)
				if err != nil {
					return err
				}
				for _, rec := range recs {
					obj, _, ok, err := v.object(r, rec)
					if err != nil {
						return err
					}
					if ok {
						objs = append(objs, obj)
					}
				}
			}
			for _, o := range objs {
				m, err := toMap(o)
				if err != nil {
					return err
				}
				if matchAll(m, q) {
					out = append(out, selectFields(m, q["fields"]))
				}
			}
			return nil
		})
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		if out == nil {
			out = []map[string]any{}
		}
		writeJSON(w, http.StatusOK, map[string]any{r.plural: out})
	}
}

func matchAll(m map[string]any, q map[string][]string) bool {
	for k, wants := range q {
		if !nonFilters[k] && !matchAttr(k, m[k], wants) {
			return false
		}
	}
	return true
}

// matchAttr is Neutron's filter rule: an attribute matches if it equals any
// of the wanted values; a list attribute matches if it holds one of them.
// fixed_ips takes "ip_address=X" / "subnet_id=Y" terms, all of which must hold.
func matchAttr(key string, val any, wants []string) bool {
	if key == "fixed_ips" {
		ips, _ := val.([]any)
		for _, want := range wants {
			k, v, _ := strings.Cut(want, "=")
			found := false
			for _, ip := range ips {
				if m, ok := ip.(map[string]any); ok && fmt.Sprint(m[k]) == v {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
	for _, want := range wants {
		switch x := val.(type) {
		case nil:
			if want == "" || want == "None" || want == "null" {
				return true
			}
		case bool:
			if b, err := strconv.ParseBool(want); err == nil && b == x {
				return true
			}
		case []any:
			for _, e := range x {
				if fmt.Sprint(e) == want {
					return true
				}
			}
		default:
			if fmt.Sprint(x) == want {
				return true
			}
		}
	}
	return false
}

func selectFields(m map[string]any, fields []string) map[string]any {
	if len(fields) == 0 {
		return m
	}
	out := map[string]any{}
	for _, f := range fields {
		if v, ok := m[f]; ok {
			out[f] = v
		}
	}
	return out
}

func (h *handler) show(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var m map[string]any
		err := h.st.View(req.Context(), func(tx store.ReadTx) error {
			v := &view{tx: tx, c: caller(req), nets: map[string]Network{}}
			obj, _, err := v.get(r, req.PathValue("id"))
			if err != nil {
				return err
			}
			m, err = toMap(obj)
			return err
		})
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{r.singular: selectFields(m, req.URL.Query()["fields"])})
	}
}

// decodeBody reads {"<singular>": {...}} and checks the attribute names.
func decodeBody(req *http.Request, singular string, allowed map[string]bool) (map[string]json.RawMessage, error) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newErr(http.StatusRequestEntityTooLarge, "HTTPRequestEntityTooLarge", "Request body too large.")
		}
		return nil, err
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, newErr(http.StatusBadRequest, "HTTPBadRequest", "Malformed request body: %v", err)
	}
	raw, ok := env[singular]
	if !ok || len(env) != 1 {
		return nil, newErr(http.StatusBadRequest, "HTTPBadRequest", "Resource body required: expected a single '%s' object.", singular)
	}
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &attrs); err != nil || attrs == nil {
		return nil, newErr(http.StatusBadRequest, "HTTPBadRequest", "Malformed request body: '%s' must be an object.", singular)
	}
	var unknown []string
	for k := range attrs {
		if !allowed[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, newErr(http.StatusBadRequest, "HTTPBadRequest", "Unrecognized attribute(s) '%s'", strings.Join(unknown, ", "))
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
		return newErr(http.StatusBadRequest, "HTTPBadRequest", "Malformed request body: %v", err)
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

func (h *handler) create(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		c := caller(req)
		if r.kind != store.KindPort && !c.IsAdmin {
			writeErr(w, h.log, policyDenied("create_"+r.singular))
			return
		}
		attrs, err := decodeBody(req, r.singular, createAttrs[r.kind])
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		project, err := projectOf(c, r.singular, attrs)
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		var obj any
		_, err = h.st.Update(req.Context(), func(tx store.Tx) error {
			var err error
			switch r.kind {
			case store.KindNetwork:
				obj, err = h.createNetwork(tx, attrs, project)
			case store.KindSubnet:
				obj, err = h.createSubnet(tx, attrs, project)
			default:
				obj, err = h.createPort(tx, c, attrs, project)
			}
			return err
		})
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		m, err := toMap(obj)
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{r.singular: m})
	}
}

func (h *handler) createNetwork(tx store.Tx, attrs map[string]json.RawMessage, project string) (Network, error) {
	n := Network{AdminStateUp: true, PortSecurityEnabled: true}
	if err := decodeInto(attrs, &n); err != nil {
		return Network{}, err
	}
	n.ProjectID = project
	return createNetwork(tx, n)
}

func (h *handler) createSubnet(tx store.Tx, attrs map[string]json.RawMessage, project string) (Subnet, error) {
	var spec subnetSpec
	if err := decodeInto(attrs, &spec.Subnet); err != nil {
		return Subnet{}, err
	}
	if spec.NetworkID == "" {
		return Subnet{}, badAttr("network_id", "'network_id' is required")
	}
	if spec.CIDR == "" {
		return Subnet{}, badAttr("cidr", "'cidr' is required (subnet pools are not supported)")
	}
	if raw, ok := attrs["gateway_ip"]; ok && string(raw) == "null" {
		spec.NoGateway = true
	}
	spec.ProjectID = project
	return createSubnet(tx, spec)
}

func (h *handler) createPort(tx store.Tx, c identity.Caller, attrs map[string]json.RawMessage, project string) (Port, error) {
	p := Port{AdminStateUp: true, PortSecurityEnabled: true}
	if err := decodeInto(attrs, &p); err != nil {
		return Port{}, err
	}
	if p.NetworkID == "" {
		return Port{}, badAttr("network_id", "'network_id' is required")
	}
	net, err := getNetwork(tx, p.NetworkID)
	if err != nil {
		return Port{}, err
	}
	v := &view{tx: tx, c: c, nets: map[string]Network{}}
	if !v.netVisible(net) {
		return Port{}, networkNotFound(p.NetworkID)
	}
	_, given := attrs["fixed_ips"]
	fixed := p.FixedIPs
	p.FixedIPs = nil
	p.ProjectID = project
	p.Status = ""
	return createPort(tx, newAllocator(tx), net, p, fixed, given, "")
}

// update changes name and description, the only mutable attributes here.
func (h *handler) update(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		attrs, err := decodeBody(req, r.singular, set("name", "description"))
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		var upd struct {
			Name        *string `json:"name"`
			Description *string `json:"description"`
		}
		if err := decodeInto(attrs, &upd); err != nil {
			writeErr(w, h.log, err)
			return
		}
		id := req.PathValue("id")
		c := caller(req)
		var obj any
		_, err = h.st.Update(req.Context(), func(tx store.Tx) error {
			v := &view{tx: tx, c: c, nets: map[string]Network{}}
			_, project, err := v.get(r, id)
			if err != nil {
				return err
			}
			if !v.owns(project) {
				return policyDenied("update_" + r.singular)
			}
			apply := func(name, desc *string, rev *int, updated *string) {
				if upd.Name != nil {
					*name = *upd.Name
				}
				if upd.Description != nil {
					*desc = *upd.Description
				}
				*rev++
				*updated = now()
			}
			switch r.kind {
			case store.KindNetwork:
				n, err := getNetwork(tx, id)
				if err != nil {
					return err
				}
				apply(&n.Name, &n.Description, &n.RevisionNumber, &n.UpdatedAt)
				obj = n
				return putNetwork(tx, n, false)
			case store.KindSubnet:
				d, err := getSubnetDoc(tx, id, true)
				if err != nil {
					return err
				}
				apply(&d.Name, &d.Description, &d.RevisionNumber, &d.UpdatedAt)
				obj = d.Subnet
				return putSubnet(tx, d, false)
			default:
				d, err := getPortDoc(tx, id)
				if err != nil {
					return err
				}
				apply(&d.Name, &d.Description, &d.RevisionNumber, &d.UpdatedAt)
				obj = d.Port
				return putPort(tx, d, false)
			}
		})
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		m, err := toMap(obj)
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{r.singular: m})
	}
}

func (h *handler) delete(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		id := req.PathValue("id")
		c := caller(req)
		_, err := h.st.Update(req.Context(), func(tx store.Tx) error {
			v := &view{tx: tx, c: c, nets: map[string]Network{}}
			_, project, err := v.get(r, id)
			if err != nil {
				return err
			}
			if !v.owns(project) {
				return policyDenied("delete_" + r.singular)
			}
			switch r.kind {
			case store.KindNetwork:
				return deleteNetwork(tx, id)
			case store.KindSubnet:
				return deleteSubnet(tx, id)
			default:
				d, err := getPortDoc(tx, id)
				if err != nil {
					return err
				}
				// A VIP port goes with its load balancer, not through here.
				if d.DeviceOwner == DeviceOwnerLB && d.DeviceID != "" {
					return newErr(http.StatusConflict, "PortInUse", "Unable to complete operation on port %s for network %s. Port already has an attached device %s.", d.ID, d.NetworkID, d.DeviceID)
				}
				return deletePort(tx, d)
			}
		})
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr sends a NeutronError body. Errors that are not API errors are
// logged and become a 500 without detail.
func writeErr(w http.ResponseWriter, log *slog.Logger, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		if log != nil {
			log.Error("neutron API request failed", "err", err)
		}
		ae = newErr(http.StatusInternalServerError, "HTTPInternalServerError", "Request Failed: internal server error while processing your request.")
	}
	writeJSON(w, ae.Status, map[string]any{"NeutronError": map[string]any{"type": ae.Type, "message": ae.Message, "detail": ""}})
}
