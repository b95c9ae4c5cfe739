package octavia

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/lbaas"
)

// referenceLists is the lists as they were before they paged over
// shallow trees: every visible tree loaded (the load balancers' with
// listeners and pools), rendered, then filtered, sorted and paged. The
// equivalence test and the benchmark hold the lists to it.
func referenceLists(api *Server) *Server {
	s := &Server{svc: api.svc, log: api.log, cfg: api.cfg, mux: http.NewServeMux()}
	trees := func(r *http.Request) ([]*lbaas.Tree, error) {
		if id := single(r, "loadbalancer_id"); id != "" {
			return s.svc.TreesOf(r.Context(), id, "")
		}
		return s.svc.Trees(r.Context())
	}
	children := func(fn func(t *lbaas.Tree)) func(r *http.Request) error {
		return func(r *http.Request) error {
			ts, err := trees(r)
			for _, t := range ts {
				fn(t)
			}
			return err
		}
	}
	s.handle("GET /loadbalancers", listed(s, lbShape, func(r *http.Request) ([]LoadBalancerResponse, error) {
		trees, err := s.svc.LoadBalancers(r.Context(), single(r, "id"), single(r, "name"))
		items := make([]LoadBalancerResponse, 0, len(trees))
		for _, t := range trees {
			items = append(items, renderLB(t))
		}
		return items, err
	}))
	s.handle("GET /listeners", listed(s, listenerShape, func(r *http.Request) (out []ListenerResponse, err error) {
		return out, children(func(t *lbaas.Tree) {
			for _, l := range t.Listeners {
				out = append(out, renderListener(t, l))
			}
		})(r)
	}))
	s.handle("GET /pools", listed(s, poolShape, func(r *http.Request) (out []PoolResponse, err error) {
		return out, children(func(t *lbaas.Tree) {
			for _, p := range t.Pools {
				out = append(out, renderPool(t, p))
			}
		})(r)
	}))
	s.handle("GET /healthmonitors", listed(s, monitorShape, func(r *http.Request) (out []HealthMonitorResponse, err error) {
		return out, children(func(t *lbaas.Tree) {
			for _, h := range t.Monitors {
				out = append(out, renderMonitor(h))
			}
		})(r)
	}))
	s.handle("GET /l7policies", listed(s, policyShape, func(r *http.Request) (out []L7PolicyResponse, err error) {
		return out, children(func(t *lbaas.Tree) {
			for _, p := range t.L7Policies {
				out = append(out, renderPolicy(t, p))
			}
		})(r)
	}))
	s.mux.HandleFunc("/", s.noRoute)
	return s
}

// asCaller serves h to a caller of the advanced persona set taken from
// the X-Test-Project and X-Test-Roles headers.
func asCaller(h http.Handler) http.Handler {
	pol := identity.Policy{Personas: identity.Advanced}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := identity.Caller{ProjectID: r.Header.Get("X-Test-Project"), Roles: strings.Fields(r.Header.Get("X-Test-Roles"))}
		h.ServeHTTP(w, r.WithContext(identity.WithCaller(r.Context(), pol.Resolve(c))))
	})
}

// TestListsMatchReference: every list of the trees' objects answers, for
// admins and for a project's member, byte for byte what the reference
// (every tree loaded) answers, over filters, tag filters, sorts, paging
// from markers both ways, fields= and the refusals of bad ones; table
// queries first, then random combinations.
func TestListsMatchReference(t *testing.T) {
	for _, kind := range []string{"mem", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			f := newListFixture(t, kind, 100)
			api := New(f.svc, nil, f.log, Config{PaginationMaxLimit: 50})
			ref := referenceLists(api)
			newH, refH := asCaller(api), asCaller(ref)
			callers := []who{{"adm", "admin"}, {"p1", "load-balancer_member"}, {"p2", "load-balancer_observer"}}
			get := func(h http.Handler, as who, path string) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", path, nil)
				req.Header.Set("X-Test-Project", as.project)
				req.Header.Set("X-Test-Roles", as.roles)
				h.ServeHTTP(rec, req)
				return rec
			}
			compared, ok200 := 0, 0
			check := func(as who, path string) {
				t.Helper()
				want, got := get(refH, as, path), get(newH, as, path)
				compared++
				if want.Code == http.StatusOK {
					ok200++
				}
				if got.Code != want.Code || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) ||
					got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
					t.Fatalf("%s as %v:\nreference %d %s\ngot       %d %s", path, as, want.Code, want.Body, got.Code, got.Body)
				}
			}
			// Ids to page from, filter by and mark with: of each list as
			// the admin sees it whole.
			ids := map[string][]string{}
			lbOf := map[string][]string{}
			for _, plural := range []string{"loadbalancers", "listeners", "pools", "healthmonitors", "l7policies"} {
				var all map[string]any
				if err := json.Unmarshal(get(refH, callers[0], "/v2/lbaas/"+plural+"?limit=0").Body.Bytes(), &all); err != nil {
					t.Fatal(err)
				}
				for _, x := range all[plural].([]any) {
					o := x.(map[string]any)
					ids[plural] = append(ids[plural], o["id"].(string))
					if lbs, ok := o["loadbalancers"].([]any); ok && len(lbs) > 0 {
						lbOf[plural] = append(lbOf[plural], lbs[0].(map[string]any)["id"].(string))
					}
				}
				if len(ids[plural]) < 15 {
					t.Fatalf("%s: only %d listed", plural, len(ids[plural]))
				}
			}
			lb := ids["loadbalancers"]
			queries := []string{"", "limit=7", "limit=0", "limit=-1", "limit=abc", "limit=1000",
				"sort=name:desc&limit=10", "sort=created_at:desc,id:asc&limit=9", "sort_key=name&sort_dir=desc&sort_key=id",
				"sort=bogus", "sort=name:sideways", "sort=tags", "sort=provisioning_status,name:desc&limit=5",
				"tags=t3", "tags=t3,even", "tags=t3&tags=even", "tags-any=t1,t2", "not-tags=even", "not-tags-any=t1,t2&limit=4",
				"tags=nothing", "project_id=p1", "project_id=p1&project_id=p2&limit=3", "provisioning_status=ACTIVE",
				"admin_state_up=True", "admin_state_up=false", "bogus=1", "name=lb-3", "name=p2", "name=h-1", "name=pol-2",
				"fields=id,name", "fields=listeners&fields=pools&limit=3", "fields=nothing",
				"id=" + lb[5], "id=" + lb[5] + "&name=lb-5", "id=" + lb[5] + "&id=" + lb[6], "name=lb-7&name=lb-8",
				"loadbalancer_id=" + lb[9], "loadbalancer_id=" + lb[9] + "&loadbalancer_id=" + lb[10], "loadbalancer_id=nope",
				"x_owns_vip_port=true", "listener_id=" + ids["listeners"][4], "pool_id=x", "listeners=x", "sort=listeners:desc&limit=3",
				"sort=members&limit=3", "sort=healthmonitor_id:desc&limit=6", "healthmonitor_id=" + ids["healthmonitors"][2],
				"sort=rules", "sort=l7policies:desc&limit=4", "pools=x", "marker=nope", "marker=nope&page_reverse=True",
				"tenant_id=p0&limit=5", "created_at=x", "sort=created_at&tags-any=t0,t5&limit=3&page_reverse=True",
			}
			for _, plural := range []string{"loadbalancers", "listeners", "pools", "healthmonitors", "l7policies"} {
				xs := ids[plural]
				qs := append([]string{}, queries...)
				for _, m := range []string{xs[0], xs[len(xs)/2], xs[len(xs)-1]} {
					qs = append(qs, "limit=7&marker="+m, "limit=7&page_reverse=True&marker="+m, "marker="+m,
						"sort=name:desc,id&limit=5&marker="+m, "tags=even&limit=5&marker="+m)
				}
				if lbs := lbOf[plural]; len(lbs) > 0 {
					qs = append(qs, "loadbalancer_id="+lbs[3], "loadbalancer_id="+lbs[3]+"&limit=1&marker="+xs[3])
				}
				for _, as := range callers[:2] {
					for _, q := range qs {
						check(as, "/v2/lbaas/"+plural+"?"+q)
					}
				}
				// Random combinations of the parts above.
				var parts []string
				for _, q := range qs {
					if q != "" {
						parts = append(parts, strings.Split(q, "&")...)
					}
				}
				rnd := rand.New(rand.NewPCG(1, uint64(len(plural))))
				for range 60 {
					v := url.Values{}
					for range 1 + rnd.IntN(4) {
						k, val, _ := strings.Cut(parts[rnd.IntN(len(parts))], "=")
						v.Add(k, val)
					}
					check(callers[rnd.IntN(len(callers))], "/v2/lbaas/"+plural+"?"+v.Encode())
				}
			}
			if ok200 < compared/2 {
				t.Fatalf("only %d of %d queries answered 200: the comparison says little", ok200, compared)
			}
			t.Logf("%d queries compared, %d answered 200", compared, ok200)
		})
	}
}
