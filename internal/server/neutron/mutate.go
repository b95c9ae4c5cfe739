package neutron

import (
	"encoding/json"
	"net/http"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

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
		h.writeObject(w, http.StatusCreated, r.singular, obj, err)
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
	spec.NoDHCP = attrs["enable_dhcp"] != nil && !spec.EnableDHCP
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
	groups := p.SecurityGroups
	p.SecurityGroups = nil
	out, err := createPort(tx, newAllocator(tx, processHints), net, p, fixed, given, "")
	if err != nil || len(groups) == 0 {
		return out, err
	}
	d, err := getPortDoc(tx, out.ID)
	if err != nil {
		return Port{}, err
	}
	if err := setPortGroups(tx, c, &d, groups); err != nil {
		return Port{}, err
	}
	return d.Port, putPort(tx, d, false)
}

// update changes name and description, the only mutable attributes here.
func (h *handler) update(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		allowed := set("name", "description")
		if r.kind == store.KindPort {
			allowed = set("name", "description", "security_groups", "port_security_enabled")
		}
		attrs, err := decodeBody(req, r.singular, allowed)
		if err != nil {
			writeErr(w, h.log, err)
			return
		}
		var upd rename
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
			if r.kind == store.KindPort {
				obj, err = updatePortSecurity(tx, c, id, attrs, upd)
				return err
			}
			obj, err = upd.save(tx, r.kind, id)
			return err
		})
		h.writeObject(w, http.StatusOK, r.singular, obj, err)
	}
}

// writeObject answers with one object under its singular key, or with
// the error that kept it from being made.
func (h *handler) writeObject(w http.ResponseWriter, status int, singular string, obj any, err error) {
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	m, err := toMap(obj)
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	writeJSON(w, status, map[string]any{singular: m})
}

// rename is an update: name and description are the only mutable
// attributes here.
type rename struct {
	Name        *string `json:"name"`
	Description *string `json:"description"`
}

// apply changes an object's name and description and bumps its revision.
func (u rename) apply(name, desc *string, rev *int, updated *string) {
	if u.Name != nil {
		*name = *u.Name
	}
	if u.Description != nil {
		*desc = *u.Description
	}
	*rev++
	*updated = now()
}

// save applies the update to the stored object of kind and returns its
// API form.
func (u rename) save(tx store.Tx, kind store.Kind, id string) (any, error) {
	switch kind {
	case store.KindNetwork:
		n, err := getNetwork(tx, id)
		if err != nil {
			return nil, err
		}
		u.apply(&n.Name, &n.Description, &n.RevisionNumber, &n.UpdatedAt)
		return n, putNetwork(tx, n, false)
	case store.KindSubnet:
		d, err := getSubnetDoc(tx, id, updateLock)
		if err != nil {
			return nil, err
		}
		u.apply(&d.Name, &d.Description, &d.RevisionNumber, &d.UpdatedAt)
		return d.Subnet, putSubnet(tx, d, false)
	default:
		d, err := getPortDoc(tx, id)
		if err != nil {
			return nil, err
		}
		u.apply(&d.Name, &d.Description, &d.RevisionNumber, &d.UpdatedAt)
		return d.Port, putPort(tx, d, false)
	}
}

func (h *handler) delete(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		id := req.PathValue("id")
		c := caller(req)
		h.writeDeleted(w, req, func(tx store.Tx) error {
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
					return refuse(KindConflict, "PortInUse", "Unable to complete operation on port %s for network %s. Port already has an attached device %s.", d.ID, d.NetworkID, d.DeviceID)
				}
				// A floating IP's port goes with the floating IP.
				if d.DeviceOwner == DeviceOwnerFloatingIP {
					return refuse(KindConflict, "ServicePortInUse", "Port %s cannot be deleted directly via the port API: has device owner %s.", d.ID, d.DeviceOwner)
				}
				return deletePort(tx, processHints, d)
			}
		})
	}
}
