package octavia

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/flowlb/flowlb/internal/lbaas"
	"github.com/flowlb/flowlb/internal/octavia/fault"
)

// Query parameters that are not attribute filters.
var listParams = map[string]bool{
	"limit": true, "marker": true, "page_reverse": true, "sort": true, "sort_key": true, "sort_dir": true,
	"fields": true, "tags": true, "tags-any": true, "not-tags": true, "not-tags-any": true,
}

type sortKey struct {
	key  string
	desc bool
}

// page applies Octavia's list conventions (octavia/api/common/pagination.py)
// to rendered objects: attribute filters with AND semantics, tag filters,
// sort, limit/marker/page_reverse paging with <plural>_links, and fields.
func (s *Server) page(r *http.Request, plural, linksKey string, items []map[string]any, idKey string) (map[string]any, error) {
	q := r.URL.Query()
	known := knownKeys(plural, items)
	filtered, err := filter(items, q, known)
	if err != nil {
		return nil, err
	}
	if err := sortItems(filtered, q, known, idKey); err != nil {
		return nil, err
	}
	limit, err := s.pageLimit(q, len(filtered))
	if err != nil {
		return nil, err
	}
	pageItems, err := slicePage(filtered, q, idKey, limit)
	if err != nil {
		return nil, err
	}
	links := []any{}
	if len(pageItems) > 0 {
		if len(pageItems) == limit {
			links = append(links, link(r, "next", fmt.Sprint(pageItems[len(pageItems)-1][idKey]), limit, false))
		}
		if q.Get("marker") != "" {
			links = append(links, link(r, "previous", fmt.Sprint(pageItems[0][idKey]), limit, true))
		}
	}
	fields := fieldList(q)
	out := make([]any, 0, len(pageItems))
	for _, it := range pageItems {
		out = append(out, pickFields(strip(it), fields))
	}
	return map[string]any{plural: out, linksKey: links}, nil
}

// knownKeys are the attributes a list may filter and sort on: those of
// the collection, and any its objects have.
func knownKeys(plural string, items []map[string]any) map[string]bool {
	known := map[string]bool{}
	for k := range attributes()[plural] {
		known[k] = true
	}
	for _, it := range items {
		for k := range it {
			known[k] = true
		}
	}
	return known
}

// filter keeps the items that match every attribute and tag filter; an
// unknown attribute is refused.
func filter(items []map[string]any, q url.Values, known map[string]bool) ([]map[string]any, error) {
	for k := range q {
		if !listParams[k] && !known[k] {
			return nil, fault.BadRequest("One or more arguments are either duplicate or invalid")
		}
	}
	out := items[:0:0]
	for _, it := range items {
		if matches(it, q) {
			out = append(out, it)
		}
	}
	return out, nil
}

// sortItems orders the items by the query's sort keys, or by created_at
// then id (flavors, AZs and quotas by their key) when it names none.
func sortItems(items []map[string]any, q url.Values, known map[string]bool, idKey string) error {
	keys, err := sortKeys(q)
	if err != nil {
		return err
	}
	if len(q["sort"])+len(q["sort_key"]) == 0 {
		keys = keys[:0]
		for _, k := range []string{"created_at", "id", idKey} {
			if known[k] && !slices.ContainsFunc(keys, func(x sortKey) bool { return x.key == k }) {
				keys = append(keys, sortKey{key: k})
			}
		}
	}
	for _, k := range keys {
		if !known[k.key] {
			return fault.BadRequest("Supplied sort key '%s' is not valid.", k.key)
		}
	}
	sort.SliceStable(items, func(i, j int) bool {
		for _, k := range keys {
			c := compare(items[i][k.key], items[j][k.key])
			if c != 0 {
				return (c < 0) != k.desc
			}
		}
		return false
	})
	return nil
}

// pageLimit is the page size: limit, at most pagination_max_limit; a
// limit below 1 means no limit.
func (s *Server) pageLimit(q url.Values, total int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return s.cfg.PaginationMaxLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fault.BadRequest("Supplied pagination limit '%s' is not valid.", v)
	}
	if n < 1 {
		return total, nil
	}
	return min(n, s.cfg.PaginationMaxLimit), nil
}

// slicePage cuts the page after (or, with page_reverse, before) the
// marker.
func slicePage(items []map[string]any, q url.Values, idKey string, limit int) ([]map[string]any, error) {
	reverse := strings.EqualFold(q.Get("page_reverse"), "true")
	marker := q.Get("marker")
	start, end := 0, len(items)
	if marker != "" {
		pos := slices.IndexFunc(items, func(it map[string]any) bool { return fmt.Sprint(it[idKey]) == marker })
		if pos < 0 {
			return nil, fault.BadRequest("Supplied pagination marker '%s' is not valid.", marker)
		}
		if reverse {
			end = pos
		} else {
			start = pos + 1
		}
	}
	if reverse {
		return items[max(end-limit, 0):end], nil
	}
	return items[start:min(start+limit, end)], nil
}

// matches applies attribute and tag filters.
func matches(it map[string]any, q url.Values) bool {
	for k, vs := range q {
		if listParams[k] {
			continue
		}
		got := scalar(it[k])
		ok := false
		for _, v := range vs {
			if got == v || (isBool(it[k]) && strings.EqualFold(got, v)) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	tags := map[string]bool{}
	if ts, ok := it["tags"].([]any); ok {
		for _, t := range ts {
			tags[fmt.Sprint(t)] = true
		}
	}
	list := func(k string) []string {
		var out []string
		for _, v := range q[k] {
			for _, t := range strings.Split(v, ",") {
				if t != "" {
					out = append(out, t)
				}
			}
		}
		return out
	}
	all := func(ts []string) bool {
		for _, t := range ts {
			if !tags[t] {
				return false
			}
		}
		return true
	}
	anyOf := func(ts []string) bool {
		for _, t := range ts {
			if tags[t] {
				return true
			}
		}
		return false
	}
	if ts := list("tags"); len(ts) > 0 && !all(ts) {
		return false
	}
	if ts := list("tags-any"); len(ts) > 0 && !anyOf(ts) {
		return false
	}
	if ts := list("not-tags"); len(ts) > 0 && all(ts) {
		return false
	}
	if ts := list("not-tags-any"); len(ts) > 0 && anyOf(ts) {
		return false
	}
	return true
}

func isBool(v any) bool { _, ok := v.(bool); return ok }

// scalar renders a JSON value as a query-string value.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	default:
		return fmt.Sprint(x)
	}
}

// compare orders JSON values: null first, numbers numerically, the rest
// as strings.
func compare(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	if x, ok := a.(float64); ok {
		if y, ok := b.(float64); ok {
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		}
	}
	return strings.Compare(scalar(a), scalar(b))
}

// sortKeys reads sort=k1:asc,k2:desc or sort_key/sort_dir pairs; the
// default is created_at then id, ascending.
func sortKeys(q url.Values) ([]sortKey, error) {
	var keys []sortKey
	dir := func(d string) (bool, error) {
		switch strings.ToLower(d) {
		case "", "asc":
			return false, nil
		case "desc":
			return true, nil
		}
		return false, fault.BadRequest("Supplied sort direction '%s' is not valid.", d)
	}
	for _, v := range q["sort"] {
		for _, part := range strings.Split(v, ",") {
			k, d, _ := strings.Cut(strings.TrimSpace(part), ":")
			desc, err := dir(d)
			if err != nil {
				return nil, err
			}
			keys = append(keys, sortKey{k, desc})
		}
	}
	dirs := q["sort_dir"]
	for i, k := range q["sort_key"] {
		d := ""
		if i < len(dirs) {
			d = dirs[i]
		}
		desc, err := dir(d)
		if err != nil {
			return nil, err
		}
		keys = append(keys, sortKey{k, desc})
	}
	if len(keys) == 0 {
		keys = []sortKey{{"created_at", false}, {"id", false}}
	}
	return keys, nil
}

func link(r *http.Request, rel, marker string, limit int, reverse bool) map[string]any {
	u := *requestURL(r)
	u.Scheme = "http"
	if r.TLS != nil {
		u.Scheme = "https"
	}
	u.Host = r.Host
	q := u.Query()
	q.Set("limit", strconv.Itoa(limit))
	q.Set("marker", marker)
	q.Del("page_reverse")
	if reverse {
		q.Set("page_reverse", "True")
	}
	u.RawQuery = q.Encode()
	return map[string]any{"rel": rel, "href": u.String()}
}

// fieldList reads fields=a&fields=b (or comma-separated).
func fieldList(q url.Values) []string {
	var out []string
	for _, v := range q["fields"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

// pickFields keeps only the requested fields (all when none is named).
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

// attributes are the filterable and sortable keys of each collection: the
// keys of an empty object's rendering, so that a filter is refused even
// when the list is empty.
var attributes = sync.OnceValue(func() map[string]map[string]bool {
	keys := func(m map[string]any) map[string]bool {
		out := map[string]bool{}
		for k := range m {
			out[k] = true
		}
		return out
	}
	t := &lbaas.Tree{LB: &lbaas.LoadBalancer{}}
	quota := renderQuota(lbaas.Quota{})
	quota["project_id"] = ""
	return map[string]map[string]bool{
		"loadbalancers":              keys(renderLB(t)),
		"listeners":                  keys(renderListener(t, &lbaas.Listener{})),
		"pools":                      keys(renderPool(t, &lbaas.Pool{})),
		"members":                    keys(renderMember(t, &lbaas.Member{})),
		"healthmonitors":             keys(renderMonitor(t, &lbaas.HealthMonitor{})),
		"l7policies":                 keys(renderPolicy(t, &lbaas.L7Policy{})),
		"rules":                      keys(renderRule(t, &lbaas.L7Rule{})),
		"flavors":                    keys(toMap(&lbaas.Flavor{})),
		"flavorprofiles":             keys(toMap(&lbaas.FlavorProfile{})),
		"availability_zones":         keys(toMap(&lbaas.AvailabilityZone{})),
		"availability_zone_profiles": keys(toMap(&lbaas.AZProfile{})),
		"quotas":                     keys(quota),
	}
})
