package neutron

import (
	"encoding/json"
	"net/http"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

var (
	secgroups = &resource{kind: store.KindSecurityGroup, singular: "security_group", plural: "security-groups", collection: "security_groups", notFound: sgNotFound,
		attrs: keysOf(SecurityGroup{}), projectScoped: true}
	sgRules = &resource{kind: store.KindSecurityGroupRule, singular: "security_group_rule", plural: "security-group-rules",
		collection: "security_group_rules", notFound: sgRuleNotFound, attrs: keysOf(SecurityGroupRule{}), projectScoped: true}
)

var (
	sgCreateAttrs   = set("name", "description", "stateful", "tags", "project_id", "tenant_id")
	ruleCreateAttrs = set("security_group_id", "direction", "ethertype", "protocol", "port_range_min", "port_range_max",
		"remote_ip_prefix", "remote_group_id", "description", "project_id", "tenant_id")
)

func (h *handler) routeSecurityGroups() {
	h.mux.HandleFunc("GET /security-groups", h.withDefaultGroup(h.list(secgroups)))
	h.mux.HandleFunc("GET /security-groups/{id}", h.withDefaultGroup(h.show(secgroups)))
	h.mux.HandleFunc("POST /security-groups", h.createSG)
	h.mux.HandleFunc("PUT /security-groups/{id}", h.updateSG)
	h.mux.HandleFunc("DELETE /security-groups/{id}", h.deleteSG)
	h.mux.HandleFunc("GET /security-group-rules", h.withDefaultGroup(h.list(sgRules)))
	h.mux.HandleFunc("GET /security-group-rules/{id}", h.show(sgRules))
	h.mux.HandleFunc("POST /security-group-rules", h.createRule)
	h.mux.HandleFunc("DELETE /security-group-rules/{id}", h.deleteRule)
}

// withDefaultGroup makes the caller's project's default group before a
// read that should show it, as Neutron does on first use.
func (h *handler) withDefaultGroup(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if err := h.ensureDefault(req, caller(req).ProjectID); err != nil {
			writeErr(w, h.log, err)
			return
		}
		next(w, req)
	}
}

func (h *handler) ensureDefault(req *http.Request, project string) error {
	if project == "" {
		return nil
	}
	var exists bool
	err := h.st.View(req.Context(), func(tx store.ReadTx) error {
		_, err := tx.Get(store.KindSecurityGroup, defaultGroupID(project))
		exists = err == nil
		if isNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil || exists {
		return err
	}
	_, err = h.st.Update(req.Context(), func(tx store.Tx) error { return ensureDefaultGroup(tx, project) })
	return err
}

func (h *handler) createSG(w http.ResponseWriter, req *http.Request) {
	c := caller(req)
	attrs, err := decodeBody(req, "security_group", sgCreateAttrs)
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	var r sgCreate
	if err := decodeInto(attrs, &r); err != nil {
		writeErr(w, h.log, err)
		return
	}
	project, err := projectOf(c, "security_group", attrs)
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	var g SecurityGroup
	_, err = h.st.Update(req.Context(), func(tx store.Tx) error {
		var err error
		g, err = createGroup(tx, r, project)
		return err
	})
	h.writeObject(w, http.StatusCreated, "security_group", g, err)
}

func (h *handler) updateSG(w http.ResponseWriter, req *http.Request) {
	attrs, err := decodeBody(req, "security_group", set("name", "description"))
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	var u rename
	if err := decodeInto(attrs, &u); err != nil {
		writeErr(w, h.log, err)
		return
	}
	c := caller(req)
	var g SecurityGroup
	_, err = h.st.Update(req.Context(), func(tx store.Tx) error {
		var err error
		g, err = updateGroup(tx, c, req.PathValue("id"), u)
		return err
	})
	h.writeObject(w, http.StatusOK, "security_group", g, err)
}

func (h *handler) deleteSG(w http.ResponseWriter, req *http.Request) {
	c := caller(req)
	h.writeDeleted(w, req, func(tx store.Tx) error { return deleteGroup(tx, c, req.PathValue("id")) })
}

func (h *handler) createRule(w http.ResponseWriter, req *http.Request) {
	c := caller(req)
	attrs, err := decodeBody(req, "security_group_rule", ruleCreateAttrs)
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	var r ruleCreate
	if err := decodeInto(attrs, &r); err != nil {
		writeErr(w, h.log, err)
		return
	}
	// Only checked: a rule belongs to its group's project.
	if _, err := projectOf(c, "security_group_rule", attrs); err != nil {
		writeErr(w, h.log, err)
		return
	}
	var out SecurityGroupRule
	_, err = h.st.Update(req.Context(), func(tx store.Tx) error {
		if err := ensureDefaultGroup(tx, c.ProjectID); err != nil {
			return err
		}
		var err error
		out, err = createRule(tx, c, r)
		return err
	})
	h.writeObject(w, http.StatusCreated, "security_group_rule", out, err)
}

func (h *handler) deleteRule(w http.ResponseWriter, req *http.Request) {
	c := caller(req)
	h.writeDeleted(w, req, func(tx store.Tx) error { return deleteRule(tx, c, req.PathValue("id")) })
}

// sgObject decodes a stored group, with its rules, for the API.
func (v *view) sgObject(rec store.Record) (any, string, bool, error) {
	if !v.owns(rec.ProjectID) {
		return nil, "", false, nil
	}
	g, err := getGroup(v.tx, rec.ID)
	if err != nil {
		return nil, "", false, err
	}
	g, err = withRules(v.tx, g)
	return g, g.ProjectID, err == nil, err
}

func (v *view) ruleObject(rec store.Record) (any, string, bool, error) {
	if !v.owns(rec.ProjectID) {
		return nil, "", false, nil
	}
	r, err := decodeRule(rec)
	return r, r.ProjectID, err == nil, err
}

// portUpdate is the part of a port update beyond name and description.
type portUpdate struct {
	SecurityGroups      *[]string `json:"security_groups"`
	PortSecurityEnabled *bool     `json:"port_security_enabled"`
}

// updatePortSecurity applies a port update's security attributes.
func updatePortSecurity(tx store.Tx, c identity.Caller, id string, attrs map[string]json.RawMessage, u rename) (Port, error) {
	var pu portUpdate
	if err := decodeInto(attrs, &pu); err != nil {
		return Port{}, err
	}
	d, err := getPortDoc(tx, id)
	if err != nil {
		return Port{}, err
	}
	if pu.PortSecurityEnabled != nil {
		if !*pu.PortSecurityEnabled && len(d.SecurityGroups) > 0 && (pu.SecurityGroups == nil || len(*pu.SecurityGroups) > 0) {
			return Port{}, refuse(KindConflict, "PortSecurityPortHasSecurityGroup",
				"Port has security group associated. Cannot disable port security or ip address until security group is removed")
		}
		d.PortSecurityEnabled = *pu.PortSecurityEnabled
		if lb := servedBy(d.Port); lb != "" {
			tx.Touch(lb)
		}
	}
	if pu.SecurityGroups != nil {
		if err := setPortGroups(tx, c, &d, *pu.SecurityGroups); err != nil {
			return Port{}, err
		}
	}
	u.apply(&d.Name, &d.Description, &d.RevisionNumber, &d.UpdatedAt)
	return d.Port, putPort(tx, d, false)
}
