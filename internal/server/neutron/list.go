package neutron

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/flowlb/flowlb/internal/server/store"
)

// Query parameters that are not attribute filters.
var nonFilters = map[string]bool{"fields": true, "limit": true, "marker": true, "sort_key": true, "sort_dir": true, "page_reverse": true}

func (h *handler) list(r *resource) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		for k := range q {
			if !nonFilters[k] && !r.attrs[k] {
				writeErr(w, h.log, refuse(KindInvalid, "HTTPBadRequest", "%s is invalid attribute for filtering", k))
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
					var ne *Error
					if errors.As(err, &ne) {
						continue
					}
					if err != nil {
						return err
					}
					objs = append(objs, obj)
				}
			} else {
				f := store.Filter{}
				if r.projectScoped && !v.c.IsAdmin {
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
					out = append(out, pickFields(m, q["fields"]))
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
		key := r.plural
		if r.collection != "" {
			key = r.collection
		}
		writeJSON(w, http.StatusOK, map[string]any{key: out})
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

func pickFields(m map[string]any, fields []string) map[string]any {
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
		writeJSON(w, http.StatusOK, map[string]any{r.singular: pickFields(m, req.URL.Query()["fields"])})
	}
}
