package octavia

import (
	"fmt"
	"net/http"
	"net/url"
	"reflect"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/store"
)

// A listing is how a list of the tree's objects of one kind reads its
// page without loading every tree whole: it filters, sorts and pages
// over trees holding only the listed kind (shallow), whose renderings
// differ from the full ones only in the deep attributes (the objects'
// references to their descendants and relatives), and renders the
// page's objects from trees holding the kinds full. A query that
// filters or sorts on a deep attribute reads full trees throughout.
type listing[R any] struct {
	shallow, full []store.Kind
	deep          []string
	// render renders the tree's objects of the kind, in the tree's order.
	render func(t *lbaas.Tree) []R
}

var (
	lbListing = listing[LoadBalancerResponse]{shallow: []store.Kind{}, full: []store.Kind{store.KindListener, store.KindPool},
		deep: []string{"listeners", "pools"},
		render: func(t *lbaas.Tree) []LoadBalancerResponse {
			return []LoadBalancerResponse{renderLB(t)}
		}}
	listenerListing = listing[ListenerResponse]{shallow: []store.Kind{store.KindListener},
		full: []store.Kind{store.KindListener, store.KindL7Policy}, deep: []string{"l7policies"},
		render: func(t *lbaas.Tree) (out []ListenerResponse) {
			for _, l := range t.Listeners {
				out = append(out, renderListener(t, l))
			}
			return out
		}}
	poolListing = listing[PoolResponse]{shallow: []store.Kind{store.KindPool},
		full: []store.Kind{store.KindListener, store.KindPool, store.KindMember, store.KindHealthMonitor, store.KindL7Policy},
		deep: []string{"healthmonitor_id", "listeners", "members"},
		render: func(t *lbaas.Tree) (out []PoolResponse) {
			for _, p := range t.Pools {
				out = append(out, renderPool(t, p))
			}
			return out
		}}
	// A health monitor's rendering is its own: the shallow tree is full.
	monitorListing = listing[HealthMonitorResponse]{shallow: []store.Kind{store.KindHealthMonitor},
		full: []store.Kind{store.KindHealthMonitor},
		render: func(t *lbaas.Tree) (out []HealthMonitorResponse) {
			for _, h := range t.Monitors {
				out = append(out, renderMonitor(h))
			}
			return out
		}}
	policyListing = listing[L7PolicyResponse]{shallow: []store.Kind{store.KindL7Policy},
		full: []store.Kind{store.KindL7Policy, store.KindL7Rule}, deep: []string{"rules"},
		render: func(t *lbaas.Tree) (out []L7PolicyResponse) {
			for _, p := range t.L7Policies {
				out = append(out, renderPolicy(t, p))
			}
			return out
		}}
)

// needsFull reports whether the query filters or sorts on a deep
// attribute. Sort keys that do not parse fail the same way on either
// path.
func (l listing[R]) needsFull(q url.Values) bool {
	deep := func(k string) bool {
		for _, d := range l.deep {
			if k == d {
				return true
			}
		}
		return false
	}
	for k := range q {
		if !listParams[k] && deep(k) {
			return true
		}
	}
	keys, _ := sortKeys(q)
	for _, k := range keys {
		if deep(k.key) {
			return true
		}
	}
	return false
}

// listedTrees answers a list of the trees' objects of one kind (a
// collection, as listed does): narrow gives the load balancer id and
// name the query names once, which the candidates are read by (the
// list's filters still apply).
func listedTrees[R any](s *Server, sh shape[R], l listing[R], narrow func(r *http.Request) (id, name string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		shallow := l.shallow
		if l.needsFull(r.URL.Query()) {
			shallow = l.full
		}
		var (
			pageItems []R
			links     []Link
		)
		id, name := narrow(r)
		trees, err := s.svc.Listing(r.Context(), id, name, shallow, l.full, func(trees []*lbaas.Tree) ([]string, error) {
			var items []R
			lbOf := map[string]string{}
			for _, t := range trees {
				for _, x := range l.render(t) {
					items = append(items, x)
					lbOf[itemID(x, sh.idKey)] = t.LB.ID
				}
			}
			var err error
			pageItems, links, err = page(s, r, items, sh.idKey)
			if err != nil {
				return nil, err
			}
			lbs := make([]string, 0, len(pageItems))
			for _, x := range pageItems {
				lbs = append(lbs, lbOf[itemID(x, sh.idKey)])
			}
			return lbs, nil
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		// The page's objects, rendered whole from their trees.
		full := map[string]R{}
		for _, t := range trees {
			for _, x := range l.render(t) {
				full[itemID(x, sh.idKey)] = x
			}
		}
		for i, x := range pageItems {
			whole, ok := full[itemID(x, sh.idKey)]
			if !ok {
				s.fail(w, r, fmt.Errorf("list %s: %s vanished from its tree", sh.plural, itemID(x, sh.idKey)))
				return
			}
			pageItems[i] = whole
		}
		writeFields(w, r, http.StatusOK, sh.page(pageItems, links), sh.plural)
	}
}

// itemID is a rendered object's idKey attribute, as its page's links
// give it.
func itemID[R any](x R, idKey string) string {
	return fmt.Sprint(columnsOf(reflect.TypeFor[R]())[idKey].value(reflect.ValueOf(&x).Elem()))
}
