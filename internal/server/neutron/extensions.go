package neutron

import (
	"net/http"
	"slices"
)

// Extension is a Neutron API extension as GET /v2.0/extensions shows it.
type Extension struct {
	Name        string `json:"name"`
	Alias       string `json:"alias"`
	Description string `json:"description"`
	Updated     string `json:"updated"`
	Links       []any  `json:"links"`
}

// extensions lists the Neutron extensions whose attributes and resources
// this subset serves, so that a client that checks before it calls finds
// them, and finds none it would then miss. Not listed: "router", which
// in Neutron also defines floating IPs, because no router is served
// (router_id is always null); "standard-attr-tag", whose /tags calls are
// not served; "qos", not served either.
var extensions = []Extension{
	{Name: "Neutron external network", Alias: "external-net", Description: "Adds external network attribute to network resource.", Updated: "2013-01-14T10:00:00-00:00"},
	{Name: "Floating IP Port Details Extension", Alias: "fip-port-details", Description: "Add port_details attribute to Floating IP resource", Updated: "2018-04-09T10:00:00-00:00"},
	{Name: "Network MTU", Alias: "net-mtu", Description: "Provides MTU attribute for a network resource.", Updated: "2015-03-25T10:00:00-00:00"},
	{Name: "Port Security", Alias: "port-security", Description: "Provides port security", Updated: "2012-07-23T10:00:00-00:00"},
	{Name: "security-group", Alias: "security-group", Description: "The security groups extension.", Updated: "2012-10-05T10:00:00-00:00"},
	{Name: "project_id field enabled", Alias: "project-id", Description: "Extension that indicates that project_id field is enabled.", Updated: "2016-09-09T09:09:09-09:09"},
	{Name: "standard-attr-description", Alias: "standard-attr-description", Description: "Extension to add descriptions to standard attributes", Updated: "2016-02-10T10:00:00-00:00"},
	{Name: "Resource revision numbers", Alias: "standard-attr-revisions", Description: "This extension will display the revision number of neutron resources.", Updated: "2016-04-11T10:00:00-00:00"},
	{Name: "Resource timestamps", Alias: "standard-attr-timestamp", Description: "Adds created_at and updated_at fields to all Neutron resources that have Neutron standard attributes.", Updated: "2016-09-12T10:00:00-00:00"},
}

func (h *handler) routeExtensions() {
	h.mux.HandleFunc("GET /extensions", func(w http.ResponseWriter, _ *http.Request) {
		out := make([]Extension, len(extensions))
		for i, e := range extensions {
			out[i] = withLinks(e)
		}
		writeJSON(w, http.StatusOK, map[string]any{"extensions": out})
	})
	h.mux.HandleFunc("GET /extensions/{alias}", func(w http.ResponseWriter, r *http.Request) {
		alias := r.PathValue("alias")
		i := slices.IndexFunc(extensions, func(e Extension) bool { return e.Alias == alias })
		if i < 0 {
			writeErr(w, nil, refuse(KindNotFound, "HTTPNotFound", "Extension with alias %s does not exist", alias))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"extension": withLinks(extensions[i])})
	})
}

// withLinks gives an extension the empty list of links Neutron shows.
func withLinks(e Extension) Extension {
	if e.Links == nil {
		e.Links = []any{}
	}
	return e
}
