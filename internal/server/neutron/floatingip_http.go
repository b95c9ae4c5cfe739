package neutron

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/flowlb/flowlb/internal/server/store"
)

var floatingips = &resource{kind: store.KindFloatingIP, singular: "floatingip", plural: "floatingips", notFound: floatingIPNotFound,
	attrs: keysOf(FloatingIP{}), projectScoped: true}

// Attributes of a floating IP create and update.
var (
	fipCreateAttrs = set("floating_network_id", "subnet_id", "floating_ip_address", "port_id", "fixed_ip_address",
		"description", "project_id", "tenant_id", "tags")
	fipUpdateAttrs = set("port_id", "fixed_ip_address", "description")
	// fipReadOnly are shown but not updatable: Neutron's refusal differs
	// from an unknown attribute's.
	fipReadOnly = set("id", "floating_ip_address", "floating_network_id", "router_id", "status", "project_id",
		"tenant_id", "subnet_id", "tags", "port_details", "revision_number", "created_at", "updated_at")
)

func (h *handler) routeFloatingIPs() {
	h.mux.HandleFunc("GET /floatingips", h.list(floatingips))
	h.mux.HandleFunc("GET /floatingips/{id}", h.show(floatingips))
	h.mux.HandleFunc("POST /floatingips", h.createFIP)
	h.mux.HandleFunc("PUT /floatingips/{id}", h.updateFIP)
	h.mux.HandleFunc("DELETE /floatingips/{id}", h.deleteFIP)
}

func (h *handler) createFIP(w http.ResponseWriter, req *http.Request) {
	c := caller(req)
	attrs, err := decodeBody(req, "floatingip", fipCreateAttrs)
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	if _, ok := attrs["floating_network_id"]; !ok {
		writeErr(w, h.log, refuse(KindInvalid, "HTTPBadRequest", "Failed to parse request. Required attribute 'floating_network_id' not specified"))
		return
	}
	// Neutron's default policy: only an admin picks the address.
	if _, ok := attrs["floating_ip_address"]; ok && !c.IsAdmin {
		writeErr(w, h.log, policyDenied("create_floatingip:floating_ip_address"))
		return
	}
	var r fipCreate
	if err := decodeInto(attrs, &r); err != nil {
		writeErr(w, h.log, err)
		return
	}
	project, err := projectOf(c, "floatingip", attrs)
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	r.await = h.realizer != nil
	var f FloatingIP
	var a awaiting
	var wait bool
	commit, err := h.st.Update(req.Context(), func(tx store.Tx) error {
		var err error
		f, err = createFloatingIP(tx, processHints, c, r, project)
		if err == nil && r.await {
			a, wait, err = awaitingOf(tx, f.ID)
		}
		if err == nil {
			f, err = withPortDetails(tx, f)
		}
		return err
	})
	if err == nil && wait {
		h.awaitAgents(a, commit.Changes[a.lb])
	}
	h.writeObject(w, http.StatusCreated, "floatingip", f, err)
}

func (h *handler) updateFIP(w http.ResponseWriter, req *http.Request) {
	all := map[string]bool{}
	for k := range fipUpdateAttrs {
		all[k] = true
	}
	for k := range fipReadOnly {
		all[k] = true
	}
	attrs, err := decodeBody(req, "floatingip", all)
	if err != nil {
		writeErr(w, h.log, err)
		return
	}
	var ro []string
	for k := range attrs {
		if fipReadOnly[k] {
			ro = append(ro, k)
		}
	}
	if len(ro) > 0 {
		sort.Strings(ro)
		writeErr(w, h.log, refuse(KindInvalid, "HTTPBadRequest", "Cannot update read-only attribute %s", strings.Join(ro, ", ")))
		return
	}
	var body struct {
		PortID      *string `json:"port_id"`
		FixedIP     *string `json:"fixed_ip_address"`
		Description *string `json:"description"`
	}
	if err := decodeInto(attrs, &body); err != nil {
		writeErr(w, h.log, err)
		return
	}
	_, portGiven := attrs["port_id"]
	u := fipUpdate{PortGiven: portGiven, PortID: body.PortID, FixedIP: body.FixedIP, Description: body.Description, await: h.realizer != nil}
	if raw, ok := attrs["fixed_ip_address"]; ok && string(raw) == "null" {
		u.FixedIP = nil
	}
	c := caller(req)
	var f FloatingIP
	var a awaiting
	var wait bool
	commit, err := h.st.Update(req.Context(), func(tx store.Tx) error {
		var err error
		f, err = updateFloatingIP(tx, c, req.PathValue("id"), u)
		if err == nil && u.await {
			a, wait, err = awaitingOf(tx, f.ID)
		}
		if err == nil {
			f, err = withPortDetails(tx, f)
		}
		return err
	})
	// Only a new association waits: one that is waiting already has its
	// own wait under way.
	if _, changed := commit.Changes[a.lb]; err == nil && wait && changed {
		h.awaitAgents(a, commit.Changes[a.lb])
	}
	h.writeObject(w, http.StatusOK, "floatingip", f, err)
}

func (h *handler) deleteFIP(w http.ResponseWriter, req *http.Request) {
	c := caller(req)
	h.writeDeleted(w, req, func(tx store.Tx) error {
		return deleteFloatingIP(tx, processHints, c, req.PathValue("id"))
	})
}

// awaitAgents makes association a ACTIVE once every agent has
// programmed change, the load balancer's change that made it (or, after
// the fan-out's ack timeout, anyway, as a load balancer turns ACTIVE).
func (h *handler) awaitAgents(a awaiting, change int64) {
	h.realizer.Realize(a.lb, change, func(error) {
		ctx, cancel := context.WithTimeout(context.Background(), activateTimeout)
		defer cancel()
		if _, err := h.st.Update(ctx, func(tx store.Tx) error { return activate(tx, a) }); err != nil {
			h.log.Warn("floating IP left DOWN: its activation failed", "floatingip", a.fip, "loadbalancer", a.lb, "err", err)
		}
	})
}

// activateTimeout bounds the transaction that makes a floating IP ACTIVE.
const activateTimeout = 30 * time.Second

// withPortDetails fills in the associated port's details.
func withPortDetails(tx store.ReadTx, f FloatingIP) (FloatingIP, error) {
	f.PortDetails = nil
	if f.PortID == nil {
		return f, nil
	}
	p, err := getPortDoc(tx, *f.PortID)
	if isKind(err, KindNotFound) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	f.PortDetails = portDetails(p.Port)
	return f, nil
}

// fipObject decodes a stored floating IP for the API.
func (v *view) fipObject(rec store.Record) (any, string, bool, error) {
	d, err := decodeFIP(rec)
	if err != nil {
		return nil, "", false, err
	}
	if !v.owns(d.ProjectID) {
		return nil, "", false, nil
	}
	f, err := withPortDetails(v.tx, d.FloatingIP)
	if err != nil {
		return nil, "", false, err
	}
	return f, d.ProjectID, true, nil
}
